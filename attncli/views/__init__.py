"""Drawing shared by the command line (``attncli.cli``) and the interactive app
(``attncli.explore``): rich heatmaps of attention matrices and the per-cell explanation, and the
results every command prints, exports and a notebook shows inline (``result``: ``Result``,
``MatrixView``, ``LookupView``; ``%load_ext attncli.views`` draws the core's results too).
Nothing here computes attention; everything here is a rich renderable or prints one.

    >>> import numpy as np
    >>> from attncli.views import palette
    >>> palette(0.0), palette(1.0)
    (('#440154', '#ffffff'), ('#fde725', '#000000'))
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "Heatmap": "render",
    "palette": "render",
    "heatmap_renderables": "render",
    "matrix_heatmaps": "render",
    "matrix_renderables": "render",
    "explanation_renderables": "explanation",
    "render_heatmap": "render",
    "render_matrix": "render",
    "render_explanation": "explanation",
    "Result": "result",
    "MatrixView": "matrix_result",
    "LookupView": "lookup_view",
    "view_of": "notebook",
    "load_ipython_extension": "notebook",
})
