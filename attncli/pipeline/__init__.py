"""One request, one compute, one result per command: a pretrained model's attention view (here),
the logit lens (lens_compute: LensRequest, compute_lens), a comparison (compare_compute:
CompareRequest, compute_compare), the head report (heads_compute: HeadsRequest, compute_heads), the
causal tests (causal_compute: AblateRequest, PatchRequest, DlaRequest, compute_causal; gradient_compute:
AttributeRequest, CircuitRequest, compute_gradients) and one score's parts (qk_compute: QKRequest,
compute_qk), massive activations (sinks_compute: SinksRequest, compute_sinks), a --pairs run (pairs_compute:
PairsRequest, compute_pairs) and head statistics (stats_compute: StatsRequest or MergeRequest, compute_stats),
each built the same by the command line, explore and the Python API.

Every module ``*_compute`` has one ``compute(request, model=None, *, progress=None) -> result``
(attncli.pipeline.running: a model loaded, ``Later(load)`` or None; what it says while it works), its
request a TableRequest (attncli.rules.option_conflicts) and its result the protocol of attncli.views.result.

Every surface (``attn matrix --transformer``, ``attn explore --transformer``, the interactive page,
the Python API) builds a :class:`ViewRequest` and calls :func:`compute`, which runs one traced
forward pass and returns a :class:`ViewResult` or, for ``model_view``, a :class:`ModelViewResult` (attncli.views.result's protocol: renderables,
document, command_line, export, ``_repr_svg_`` / ``_repr_html_``)::

    request = ViewRequest("time flies like an arrow", transformer="gpt2", layer=1, head=0)
    result = compute(request)          # loads the model unless one is given: compute(request, model)
    result.document()["weights"]       # the --json document
    result.export("html", "view.html") # the interactive page

The request needs no model to be checked or to say its command line:

    >>> from attncli.pipeline import ViewRequest
    >>> ViewRequest("time flies", transformer="t5-small", target="le temps", stack="cross").command_line()
    "attn matrix 'time flies' --transformer t5-small --target 'le temps' --stack cross"
    >>> ViewRequest("time flies", transformer="gpt2", stack="middle").check()
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: --stack 'middle': choose one of encoder, decoder, cross
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "ViewRequest": "view_request",
    "MatrixOptions": "view_request:ViewRequest",
    "check_combinations": "view_request",
    "STACKS": "view_request",
    "compute": "compute_view",
    "ViewResult": "view_result",
    "ModelViewResult": "view_result",
    "LensRequest": "lens_compute",
    "LensResult": "lens_compute",
    "compute_lens": "lens_compute:compute",
    "CompareRequest": "compare_compute",
    "CompareResult": "compare_compute",
    "compute_compare": "compare_compute:compute",
    "HeadsRequest": "heads_compute",
    "HeadsResult": "heads_compute",
    "compute_heads": "heads_compute:compute",
    "AblateRequest": "causal_compute",
    "PatchRequest": "causal_compute",
    "DlaRequest": "causal_compute",
    "compute_causal": "causal_compute:compute",
    "StatsRequest": "stats_compute",
    "MergeRequest": "stats_compute",
    "compute_stats": "stats_compute:compute",
    "compute_merge": "stats_compute:compute",
    "AttributeRequest": "gradient_compute",
    "CircuitRequest": "gradient_compute",
    "compute_gradients": "gradient_compute:compute",
    "QKRequest": "qk_compute",
    "compute_qk": "qk_compute:compute",
    "SinksRequest": "sinks_compute",
    "compute_sinks": "sinks_compute:compute",
    "PairsRequest": "pairs_compute",
    "compute_pairs": "pairs_compute:compute",
    "Later": "running",
    "Progress": "running",
    "Quiet": "running",
})
