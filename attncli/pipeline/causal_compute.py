"""One compute for the causal tests: :func:`compute_causal` turns an ``attn ablate``, ``attn patch``
or ``attn dla`` request (attncli.causal.causal_request) into its result (attncli.views.causal: the
protocol of attncli.views.result), whoever asked: the command line, ``attn explore``'s G and D
keys, or Python::

    from attncli.pipeline import AblateRequest, compute_causal
    result = compute_causal(AblateRequest("When Mary and John went to the store, John gave a drink to",
                                          transformer="gpt2", target=" Mary", contrast=" John"))
    result.document()["grid"]        # (layers, heads): the change in the logit difference
    result.export("svg", "ablate.svg")

    request -> check (the table's "causal" rows) -> load (unless given) -> encode -> the target
            -> the grid or the attribution (attncli.causal: the math) -> the document -> the result
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

from attncli.causal import documents, grids
from attncli.causal.dla import dla
from attncli.causal.grids import check_traced
from attncli.causal.causal_request import AblateRequest, CausalRequest, DlaRequest, PatchRequest  # noqa: F401 (exported)
from attncli.causal.target import resolve
from attncli.errors import BadInput
from attncli.hf.loader import load
from attncli.tinylm.traced import load_builtin
from attncli.io.textio import read_user_text
from attncli.views.causal import causal_result

Stage = Callable[[str], ContextManager[Any]]  # a message -> a context around a stretch of work (a progress line)

KINDS = {AblateRequest: "ablate", PatchRequest: "patch", DlaRequest: "dla"}  # what causal.grids.missing checks


def load_causal(request: CausalRequest):
    """The request's model (attncli.hf.load: NumPy or transformers, by ``backend``); without
    --transformer, attn's built-in LM (attncli.tinylm.traced): the model every user has offline."""
    if request.transformer is None:
        return load_builtin()
    return load(request.transformer, backend=request.backend, allow_missing_weights=request.allow_missing_weights,
                device=request.device, dtype=request.dtype, device_map=request.device_map,
                max_memory=request.max_memory)


def compute_causal(request: CausalRequest, model: Any = None, *, stage: Optional[Stage] = None,
                   truncate: bool = False):
    """The result of ``request`` on ``model`` (None: loaded here). ``stage(message)``: a context
    around the grid's passes (the CLI's progress line); ``truncate``: cut a text longer than the
    model's limit (explore's state), where the command refuses it."""
    request.check()
    if model is None:
        model = load_causal(request)
    check_traced(model, KINDS[type(request)])  # the refusal explore's G and D give too (causal.grids.missing)
    enc = model.encode(request.text, truncate=truncate) if truncate else model.encode(request.text)
    bad = None
    if isinstance(request, PatchRequest):
        bad = model.encode(request.corrupt)
        grids.check_same_length(model, enc.ids, bad.ids)
    t = resolve(model, enc.ids, target=request.target, target_id=request.target_id, contrast=request.contrast,
                contrast_id=request.contrast_id)
    around = stage or (lambda message: nullcontext())
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


def reference_ids(model: Any, path: Path) -> list[list[int]]:
    """The ids of each text of ``--reference`` (one a line; blank lines skipped), cut to the model's limit."""
    lines = [line.strip() for line in read_user_text(path, "--reference", hint="one text per line").splitlines()]
    texts = [line for line in lines if line]
    if not texts:
        raise BadInput(f"--reference {path} holds no text: mean ablation needs at least one line to average over")
    return [model.encode(t, truncate=True).ids for t in texts]
