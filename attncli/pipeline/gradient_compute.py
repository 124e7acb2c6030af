"""One compute for the gradient tests: :func:`compute` turns an ``attn attribute`` or ``attn circuit``
request (attncli.causal.gradient_request) into its result (views/causal.py's AttributeResult,
views/circuit_view.py's CircuitResult: the protocol of attncli.views.result), whoever asked: the
command line or Python::

    from attncli.pipeline import AttributeRequest, compute_gradients
    result = compute_gradients(AttributeRequest("the cat sat on the mat", corrupt="the dog sat on the mat",
                                                transformer="gpt2", site="head"))
    result.document()["grid"]        # (layers, heads): each patch's estimated effect
    result.export("svg", "attribute.svg")

    request -> check (the table's "gradients" rows) -> load (unless given) -> both encodings, the
            same length -> the target -> the attribution or the circuit (attncli.causal: the math)
            -> the document -> the result
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Union

from attncli.causal import documents
from attncli.causal.attribution import attribute, verify
from attncli.causal.circuit import circuit_document, find_circuit
from attncli.causal.gradient_request import AttributeRequest, CircuitRequest, GradientRequest  # noqa: F401 (exported)
from attncli.causal.grids import check_same_length, check_traced
from attncli.causal.target import resolve
from attncli.hf.loader import load
from attncli.pipeline.causal_compute import top_prediction
from attncli.pipeline.running import Progress, model_for, quiet
from attncli.views.causal import AttributeResult
from attncli.views.circuit_view import CircuitResult


def load_gradients(request: GradientRequest):
    """The request's checkpoint on its --backend (auto: attn's NumPy pass wherever it runs the model,
    whose tape runs the backward, hf/methods/backward.py; the torch backend's gradients: hf/backends/torch_grad.py)."""
    return load(request.transformer, backend=request.backend, allow_missing_weights=request.allow_missing_weights)


def compute(request: Union[AttributeRequest, CircuitRequest], model: Any = None, *,
            progress: Optional[Progress] = None) -> Union[AttributeResult, CircuitResult]:
    """The result of ``request`` on ``model`` (pipeline.running: None, loaded here). ``progress.stage``:
    a context around the passes (the CLI's progress line); ``request.target_top``: the target is the
    model's top prediction (the result's request names it as --target-id)."""
    request.check()
    model = model_for(model, request.transformer, lambda: load_gradients(request))
    check_traced(model, request.command)  # gradients: a tape's or torch autograd's (capability "grad")
    enc, bad = model.encode(request.text), model.encode(request.corrupt)
    check_same_length(model, enc.ids, bad.ids)
    if request.target_top:
        request = replace(request, target_id=top_prediction(model, enc.ids), target_top=False)
    t = resolve(model, enc.ids, target=request.target, target_id=request.target_id, contrast=request.contrast,
                contrast_id=request.contrast_id)
    around = quiet(progress).stage
    if isinstance(request, AttributeRequest):
        with around(f"attributing {request.site} in {model.layers} layers"):
            res = attribute(model, enc.ids, bad.ids, t, where=request.site, qk_fix=not request.no_qk_fix)
            if request.verify:
                res = verify(model, enc.ids, bad.ids, t, res, request.verify)
        result = AttributeResult(documents.attribute_document(model, enc, bad, t, res), request)
        result.model, result.enc = model, enc  # what explore reads beside the view
        return result
    with around(f"scoring the edges of {model.layers} layers"):
        res = find_circuit(model, enc.ids, bad.ids, t, steps=request.steps, faithfulness=request.faithfulness)
    return CircuitResult(circuit_document(model, enc, bad, t, res), request)
