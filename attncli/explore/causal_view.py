"""Four views of ``attn explore`` that replace the heatmap: the head-ablation grid (key G, what
``attn ablate`` draws), the direct logit attribution (D, ``attn dla``) and, with --corrupt, the
restored-fraction grid of activation patching (R, ``attn patch CLEAN CORRUPT``) and its estimate by
attribution patching (E, ``attn attribute CLEAN CORRUPT``, a --transformer's NumPy pass only) of
the sentence's top prediction: a decoder's next token after the text, an encoder's token at the
text's last mask.
With --transformer, on that model; without, on attn's built-in LM (attncli.tinylm.traced: offline,
as ``attn ablate`` and ``attn dla`` without --transformer), of the word-vector model the app reads
(--model; its command line then sets ``ATTN_MODEL``, which those commands read). Computed in the
app's worker from the model already loaded, as the commands' JSON documents with their drawing
and their command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import shlex

import numpy as np

from attncli.causal.causal_request import REQUESTS
from attncli.causal.gradient_request import AttributeRequest
from attncli.causal.target import mask_position
from attncli.errors import BadInput
from attncli.explore.disabled_keys import NEEDS_CORRUPT, corrupt_refusal
from attncli.explore.drawing import Panel
from attncli.causal.grids import missing
from attncli.model.interface import has
from attncli.pipeline.causal_compute import compute_causal as run_causal
from attncli.pipeline.gradient_compute import compute as run_gradients, load_gradients
from attncli.tinylm.traced import load_builtin


@dataclass
class CausalResult(Panel):
    """The app's panel around the command's own result (attncli.views.causal): drawn, exported and
    said as a command line by it."""

    result: Any  # an AblateResult, a DlaResult, a PatchResult or an AttributeResult
    builtin_model: str | None = None  # the built-in LM of this word-vector model (--model), not the default one

    @property
    def model(self) -> Any:
        return self.result.model

    @property
    def enc(self) -> Any:
        return self.result.enc

    @property
    def doc(self) -> dict[str, Any]:
        return self.result.document()

    @property
    def command(self) -> str:  # the attn ablate / attn dla command that prints this view
        command = self.result.command_line()
        return command if self.builtin_model is None else f"ATTN_MODEL={shlex.quote(self.builtin_model)} {command}"

    def renderables(self, width: int | None, lines: bool = True) -> list:
        return self.result.renderables(width)

    def notes(self) -> list[str]:
        return [NOTES[self.doc["command"]]]

    def document(self) -> dict[str, Any]:
        return self.doc


NOTES = {  # the explanation panel of each view: what a cell of it is
    "ablate": "head ablation: each head's output zeroed at every position, the change in the top prediction's "
              "log-probability (negative: the head helped). G returns.",
    "dla": "direct logit attribution: each head's and MLP's direct part of the top prediction's logit, "
           "through the final norm with its scale frozen; the parts add up to the logit. D returns.",
    "patch": "activation patching: a cell is the corrupted text's run with that site (a layer's residual stream "
             "at one position, by default) copied from the clean run, the fraction of the top prediction's "
             "log-probability gap restored: (patched - corrupt) / (clean - corrupt); 1: that site alone carries "
             "the difference, 0: nothing. R returns.",
    "attribute": "attribution patching (AtP*): each cell of attn patch's grid (R) estimated from one forward and "
                 "one backward pass, the gradient at the corrupted run times the clean - corrupt difference of "
                 "that site, over the same gap; close to R's numbers where the model is near linear. E returns.",
}


def request_of(state, kind: str, target_id: int | None = None):
    """The request of G, D, R or E (``kind``: "ablate", "dla", "patch", "attribute") for the state's
    sentence (and --corrupt): what the command line builds for ``attn ablate`` / ``attn dla`` /
    ``attn patch`` / ``attn attribute`` with --target-id ``target_id``."""
    if kind == "attribute":  # the NumPy pass always: no --backend
        return AttributeRequest(state.text, transformer=state.transformer, corrupt=state.corrupt or "",
                                target_id=target_id)
    corrupt = {"corrupt": state.corrupt or ""} if kind == "patch" else {}
    return REQUESTS[kind](state.text, transformer=state.transformer, target_id=target_id, backend=state.backend,
                          **corrupt)


def refusal(model: Any, kind: str, state=None) -> str | None:
    """Why ``kind`` ("ablate", "dla", "patch", "attribute") cannot run on ``model``, or None: with
    ``state``, first a missing --corrupt, then what the command's request refuses
    (attncli.rules.option_conflicts' "causal" and "gradients" rows); then the sentence the command gives
    for the model (causal.grids.missing, from the model interface's capabilities; attn attribute's
    own check of "grad" on the NumPy pass E loads is the pipeline's)."""
    if state is not None:
        if kind in NEEDS_CORRUPT and state.corrupt is None:
            return corrupt_refusal(kind)
        reason = request_of(state, kind).refusal()
        if reason:
            return reason
    return missing(model, kind)


def gradient_model(model: Any, state, models: dict[tuple[str, str], Any]) -> Any:
    """The model E computes on: attn attribute's, the checkpoint's NumPy pass (its backward pass is
    attn's own) whatever the view's --backend; loaded once into ``models`` beside the view's."""
    if has(model, "tape"):  # AtP* (E's): the QK fix recomputes patterns on attn's NumPy tape
        return model
    key = (state.transformer, "numpy")
    if key not in models:
        models[key] = load_gradients(request_of(state, "attribute"))
    return models[key]


def builtin_lm(state, models: dict[tuple[str, str], Any]):
    """The built-in LM of the state's word-vector model (--model; None: the default), loaded once
    into ``models`` (the app's models, by (name, backend))."""
    key = (state.model or "", "builtin")
    if key not in models:
        models[key] = load_builtin(state.model)
    return models[key]


def compute_on_builtin(state, models: dict[tuple[str, str], Any]) -> CausalResult:
    """G or D without --transformer: ``attn ablate`` / ``attn dla`` of the built-in LM."""
    result = compute_causal(builtin_lm(state, models), state)
    result.builtin_model = state.model
    return result


def compute_causal(model: Any, state) -> CausalResult:
    """``attn ablate`` (G), ``attn dla`` (D), ``attn patch`` (R) or ``attn attribute`` (E) of the
    sentence's top prediction: the command's request, with that target, computed as the command
    computes it."""
    reason = refusal(model, state.causal_view, state)
    if reason:
        raise BadInput(reason)
    if state.pair is not None:
        raise BadInput(f"{state.causal_view} reads one text: the view with a pair has no such command (drop the pair)")
    enc = model.encode(state.text, truncate=state.truncate)
    ids = list(enc.ids)
    position = len(ids) - 1 if model.is_decoder else mask_position(model, ids)
    top = int(np.argmax(model.trace(ids, "logits")["logits"][position]))  # (V,) -> the top prediction
    request = request_of(state, state.causal_view, top)
    if state.causal_view == "attribute":  # attn attribute reads the whole text: no --truncate
        result = run_gradients(request, model)
        result.model, result.enc = model, enc
        return CausalResult(result)
    return CausalResult(run_causal(request, model, truncate=state.truncate))
