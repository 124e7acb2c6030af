"""One compute for the causal tests: :func:`compute` turns an ``attn ablate``, ``attn patch``
or ``attn dla`` request (attncli.causal.causal_request) into its result (attncli.views.causal: the
protocol of attncli.views.result), whoever asked: the command line, ``attn explore``'s G and D
keys, or Python::

    from attncli.pipeline import AblateRequest, compute_causal     # causal_compute.compute
    result = compute_causal(AblateRequest("When Mary and John went to the store, John gave a drink to",
                                          transformer="gpt2", target=" Mary", contrast=" John"))
    result.document()["grid"]        # (layers, heads): the change in the logit difference
    result.export("svg", "ablate.svg")

    request -> check (the table's "causal" rows) -> load (unless given) -> encode -> the target
            -> the grid or the attribution (attncli.causal: the math) -> the document -> the result
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from attncli.causal import documents, grids
from attncli.causal.dla import dla
from attncli.causal.grids import check_traced
from attncli.causal.causal_request import AblateRequest, CausalRequest, DlaRequest, PatchRequest  # noqa: F401 (exported)
from attncli.causal.target import mask_position, resolve
from attncli.errors import BadInput
from attncli.hf.loader import load
from attncli.pipeline.running import Progress, model_for, quiet
from attncli.tinylm.traced import load_builtin
from attncli.io.textio import read_user_text
from attncli.views.causal import AblateResult, DlaResult, PatchResult, causal_result  # noqa: F401 (the results)

KINDS = {AblateRequest: "ablate", PatchRequest: "patch", DlaRequest: "dla"}  # what causal.grids.missing checks


def load_causal(request: CausalRequest):
    """The request's model (attncli.hf.load: NumPy or transformers, by ``backend``); without
    --transformer, attn's built-in LM (attncli.tinylm.traced): the model every user has offline."""
    if request.transformer is None:
        return load_builtin()
    return load(request.transformer, backend=request.backend, allow_missing_weights=request.allow_missing_weights,
                device=request.device, dtype=request.dtype, device_map=request.device_map,
                max_memory=request.max_memory)


def compute(request: CausalRequest, model: Any = None, *,
            progress: Optional[Progress] = None) -> Union[AblateResult, PatchResult, DlaResult]:
    """The result of ``request`` on ``model`` (pipeline.running: None, loaded here). ``progress.stage``:
    a context around the grid's passes (the CLI's progress line). ``request.truncate`` cuts a text
    longer than the model's limit (explore's state), where the command refuses it; ``request.target_top``
    measures the model's top prediction (the result's request names it as --target-id)."""
    request.check()
    model = model_for(model, request.transformer, lambda: load_causal(request))
    check_traced(model, KINDS[type(request)])  # the refusal explore's G and D give too (causal.grids.missing)
    enc = model.encode(request.text, truncate=True) if request.truncate else model.encode(request.text)
    if request.target_top:
        request = replace(request, target_id=top_prediction(model, enc.ids), target_top=False)
    bad = None
    if isinstance(request, PatchRequest):
        bad = model.encode(request.corrupt)
        grids.check_same_length(model, enc.ids, bad.ids)
    t = resolve(model, enc.ids, target=request.target, target_id=request.target_id, contrast=request.contrast,
                contrast_id=request.contrast_id)
    around = quiet(progress).stage
    if isinstance(request, AblateRequest):
        means = None
        if request.mode == "mean" and request.reference is not None:
            means = grids.head_means(model, reference_ids(model, Path(request.reference)))
        with around(f"ablating {model.layers} x {model.heads} heads"):
            grid = grids.ablate(model, enc.ids, t, mode=request.mode, means=means, position=request.position)
        doc = documents.ablate_document(model, enc, t, grid, mode=request.mode, position=request.position)
    elif isinstance(request, PatchRequest):
        with around(f"patching {request.site} in {model.layers} layers"):
            grid = grids.patch(model, enc.ids, bad.ids, t, where=request.site)
        doc = documents.patch_document(model, enc, bad, t, grid, site=request.site)
    else:
        doc = documents.dla_document(model, enc, t, dla(model, enc.ids, t))
    result = causal_result(doc, request)
    result.model, result.enc = model, enc  # what explore reads beside the view
    return result


def top_prediction(model: Any, ids: list[int]) -> int:
    """The token ``model`` predicts at its read position of ``ids``: a decoder's next token after the
    text, an encoder's at the text's last mask."""
    position = len(ids) - 1 if model.is_decoder else mask_position(model, ids)
    return int(np.argmax(model.trace(list(ids), "logits")["logits"][position]))  # (V,) -> the top prediction


def reference_ids(model: Any, path: Path) -> list[list[int]]:
    """The ids of each text of ``--reference`` (one a line; blank lines skipped), cut to the model's limit."""
    lines = [line.strip() for line in read_user_text(path, "--reference", hint="one text per line").splitlines()]
    texts = [line for line in lines if line]
    if not texts:
        raise BadInput(f"--reference {path} holds no text: mean ablation needs at least one line to average over")
    return [model.encode(t, truncate=True).ids for t in texts]
