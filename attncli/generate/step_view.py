"""Which attention a step shows: one head, the mean of a layer's heads, or the rollout.

Shapes: L layers, h heads, T tokens. Every view of a causal model is causal (lower triangular)
and its rows sum to 1, so row i depends only on tokens 0..i: the row a step shows while the
text is being written is the row of one pass over the finished text.

Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): per
layer the head mean plus the identity (the residual connection), rows renormalised, multiplied
through the layers:

    A~_l = rownorm(mean_heads(A_l) + I)          R = A~_{L-1} ... A~_1 A~_0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.attention.rollout import rollout as attention_rollout
from attncli.errors import BadInput


@dataclass(frozen=True)
class View:
    """The attention a generation shows: ``layer`` and ``head`` (None = the mean), or the rollout."""

    layer: int
    head: int | None = None
    rollout: bool = False

    def label(self, heads: int, layers: int) -> str:
        if self.rollout:
            return f"rollout over {layers} layers (head means + identity, Abnar & Zuidema 2020)"
        what = f"head {self.head}" if self.head is not None else f"mean of {heads} heads"
        return f"layer {self.layer} (layers 0-{layers - 1}), {what}"


def choose_view(layers: int, heads: int, layer: int | None, head: int | None, rollout: bool, model: str) -> View:
    """The view for the options; the default layer is the last (the one feeding the prediction)."""
    if rollout and (layer is not None or head is not None):
        raise BadInput("--rollout combines every layer and head: leave out --layer and --head")
    if layer is not None and not 0 <= layer < layers:
        raise BadInput(f"--layer {layer} is out of range: model '{model}' has layers 0..{layers - 1}")
    if head is not None and not 0 <= head < heads:
        raise BadInput(f"--head {head} is out of range: model '{model}' has heads 0..{heads - 1}")
    return View(layer=layers - 1 if layer is None else layer, head=head, rollout=rollout)


def rollout(weights: list[np.ndarray]) -> np.ndarray:
    """(T, T) attention rollout of L layers of weights, each (h, T, T): the project's one
    implementation, ``attncli.attention.rollout``."""
    return attention_rollout(np.stack([np.asarray(w, dtype=np.float64) for w in weights]))  # (L, h, T, T) -> (T, T)


def view_matrix(weights: list[np.ndarray], view: View) -> np.ndarray:
    """(T, T) float64: the chosen view of one pass's weights (L x (h, T, T))."""
    if view.rollout:
        return rollout(weights)
    w = np.asarray(weights[view.layer], dtype=np.float64)  # (h, T, T)
    return w[view.head] if view.head is not None else w.mean(axis=0)


def top_keys(row: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` keys with the largest weights in ``row``, largest first (ties: the earlier key)."""
    order = np.argsort(-row, kind="stable")[:k]
    return [(int(j), float(row[j])) for j in order]
