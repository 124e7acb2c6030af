"""attn in Jupyter: a result of the views wing (attncli.views.result) displays inline by itself
(``_repr_svg_``, ``_repr_html_``); ``%load_ext attncli.views`` makes the core's own results display
too, although the core wings never import rich: IPython is told, by name, to draw an
:class:`attncli.attention.matrix.MatrixResult` as a :class:`MatrixView` and an
:class:`attncli.lookup.dictionary.LookupResult` as a :class:`LookupView`.

    >>> from attncli.attention import MatrixRequest, compute
    >>> type(view_of(compute(MatrixRequest("time flies")))).__name__
    'MatrixView'
"""

from __future__ import annotations

from typing import Any

from attncli.attention.matrix import MatrixResult
from attncli.views.lookup_view import LookupView
from attncli.views.matrix_result import MatrixView
from attncli.views.result import NOTEBOOK_WIDTH, Result

CORE_RESULTS = (("attncli.attention.matrix", "MatrixResult"), ("attncli.lookup.dictionary", "LookupResult"))


def view_of(obj: Any) -> Result:
    """The view of a core result (a view is returned as it is)."""
    if isinstance(obj, Result):
        return obj
    if isinstance(obj, MatrixResult):
        return MatrixView(obj)
    return LookupView(obj)


def _svg(obj: Any) -> str:
    # a lookup made in Python does not know the dictionary's file: no command line under it
    return view_of(obj).svg(NOTEBOOK_WIDTH, command=isinstance(obj, (MatrixResult, Result)))


def _html(obj: Any) -> str:
    return view_of(obj).html(NOTEBOOK_WIDTH, command=isinstance(obj, (MatrixResult, Result)))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext attncli.views``: the core's results display inline, as their views."""
    formatters = ipython.display_formatter.formatters
    for module, name in CORE_RESULTS:
        formatters["image/svg+xml"].for_type_by_name(module, name, _svg)
        formatters["text/html"].for_type_by_name(module, name, _html)
