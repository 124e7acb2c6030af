"""Two views of ``attn explore --transformer`` (keys G and D) that replace the heatmap: the
head-ablation grid (what ``attn ablate`` draws) and the direct logit attribution (``attn dla``) of
the sentence's top prediction: a decoder's next token after the text, an encoder's token at the
text's last mask. Computed in the app's worker from the model already loaded, as the commands'
JSON documents with their drawing and their command line."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import numpy as np

from attncli.model.interface import has, refusal as interface_refusal
from attncli.errors import BadInput
from attncli.explore.drawing import Panel
from attncli.views.causal import dla_renderables, grid_renderables
from attncli.causal import documents, grids
from attncli.causal.dla import dla
from attncli.causal.target import Target, mask_position


@dataclass
class CausalResult(Panel):
    model: Any
    enc: Any
    doc: dict[str, Any]
    command: str  # the attn ablate / attn dla command that prints this view

    def renderables(self, width: int | None, lines: bool = True) -> list:
        draw = dla_renderables if self.doc["command"] == "dla" else grid_renderables
        return draw(self.doc, width)

    def notes(self) -> list[str]:
        if self.doc["command"] == "dla":
            return ["direct logit attribution: each head's and MLP's direct part of the top prediction's logit, "
                    "through the final norm with its scale frozen; the parts add up to the logit. D returns."]
        return ["head ablation: each head's output zeroed at every position, the change in the top prediction's "
                "log-probability (negative: the head helped). G returns."]

    def document(self) -> dict[str, Any]:
        return self.doc


def refusal(model: Any, kind: str) -> str | None:
    """Why ``kind`` ("ablate", "dla") cannot run on ``model``, or None: the model interface's own
    refusal (model/interface.py), the sentence the command line gives."""
    doing = {"ablate": "ablating heads (G)", "dla": "direct logit attribution (D)"}[kind]
    for capability in ("trace", "dla") if kind == "dla" else ("trace", "next_token"):
        if not has(model, capability):
            return interface_refusal(model, capability, doing)
    return None


def compute_causal(model: Any, state) -> CausalResult:
    reason = refusal(model, state.causal_view)
    if reason:
        raise BadInput(reason)
    if state.pair is not None:
        raise BadInput(f"{state.causal_view} reads one text: the view with a pair has no such command (drop the pair)")
    enc = model.encode(state.text, truncate=state.truncate)
    ids = list(enc.ids)
    position = len(ids) - 1 if model.is_decoder else mask_position(model, ids)
    logits = model.trace(ids, "logits")["logits"][position]  # (V,)
    top = int(np.argmax(logits))
    target = Target(position, top, model.token_strings([top])[0])
    if state.causal_view == "dla":
        doc = documents.dla_document(model, enc, target, dla(model, ids, target))
    else:
        doc = documents.ablate_document(model, enc, target, grids.ablate(model, ids, target))
    command = shlex.join(["attn", state.causal_view, state.text, "--transformer", state.transformer,
                          "--target-id", str(top)]
                         + ([] if getattr(state, "backend", "auto") == "auto" else ["--backend", state.backend]))
    return CausalResult(model, enc, doc, command)
