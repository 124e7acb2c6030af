"""What each learned head does: score its attention on held-out sentences against simple patterns.

The way interpretability tools label heads (e.g. the previous-token and first-token heads of
Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits", and the pattern
scores of TransformerLens / bertviz-style analyses). NumPy only, through ``model.py``.

For every query position i >= 1 of every sentence (position 0 can only attend to itself under
the causal mask, so it says nothing) and its attention row A[i, 0..i]:

    previous_token = A[i, i-1]
    first_token    = A[i, 0]
    self           = A[i, i]
    local          = sum of A[i, j] for i - window <= j <= i
    entropy        = H(A[i]) / log(i + 1)      1 = spread evenly over the prefix, 0 = one key

each averaged over all query positions. ``uniform`` gives the same scores for a head that
spreads evenly over the prefix, the level a score must clearly beat to mean something.

Label (first rule that holds), where a score "beats uniform" when it is at least MARGIN above
the uniform head's: the largest of previous_token / first_token / self if it is >= PATTERN_MIN
and beats uniform; else ``local`` if local >= LOCAL_MIN and beats uniform; else ``broad`` if
entropy >= BROAD_MIN; else ``mixed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncli.attention import heads as shared
from attncli.errors import BadInput
from attncli.tinylm.model import TrainedAttention

PATTERN_MIN = 0.4
LOCAL_MIN = 0.7
BROAD_MIN = 0.7
MARGIN = 0.2
SCORES = ("previous_token", "first_token", "self", "local", "entropy")


@dataclass
class HeadScore:
    layer: int
    head: int
    previous_token: float
    first_token: float
    self: float
    local: float
    entropy: float
    label: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def row_scores(weights: np.ndarray, window: int) -> np.ndarray:
    """(h, 5, T-1) scores of every query i >= 1 from causal weights (h, T, T), in ``SCORES`` order
    (the shared definitions of :mod:`attncli.attention.heads`)."""
    s = shared.row_scores(weights, causal=True, window=window, only=SCORES)  # each (h, T-1)
    return np.stack([s[name] for name in SCORES], axis=1)  # (h, 5, T-1)


def uniform_scores(lengths: list[int], window: int) -> dict[str, float]:
    """The scores of a head that spreads each row evenly over its prefix, on the same queries."""
    i = np.concatenate([np.arange(1, T) for T in lengths if T >= 2]).astype(np.float64)
    inv = 1.0 / (i + 1)
    return {
        "previous_token": float(inv.mean()),
        "first_token": float(inv.mean()),
        "self": float(inv.mean()),
        "local": float((np.minimum(i, window) + 1).dot(inv) / len(i)),
        "entropy": 1.0,
    }


def label(scores: dict[str, float], uniform: dict[str, float]) -> str:
    return shared.label(scores, uniform, patterns=("previous_token", "first_token", "self"), pattern_min=PATTERN_MIN,
                        local_min=LOCAL_MIN, broad_min=BROAD_MIN, margin=MARGIN)


MAX_WINDOW = 10_000  # a window longer than any sentence (max_len is at most 4096) changes nothing


def check_window(window: int) -> None:
    """BadInput naming --window unless it is in [1, MAX_WINDOW] (a huge one overflows NumPy)."""
    if window < 1:
        raise BadInput(f"--window must be at least 1 (got {window})")
    if window > MAX_WINDOW:
        raise BadInput(f"--window must be in [1, {MAX_WINDOW:,}] (got {window})")


def score_heads(att: TrainedAttention, sentences: list[list[str]], *, window: int = 3) -> dict[str, Any]:
    """Score every head of every layer on ``sentences`` (token lists; those under 2 tokens are skipped)."""
    check_window(window)
    max_len = int(att.config.get("max_len_trained", 512))
    usable = [s[:max_len] for s in sentences if len(s) >= 2]
    if not usable:
        raise BadInput("no sentence of two or more words to score the heads on")
    sums = np.zeros((att.layers, att.heads, len(SCORES)))  # (L, h, 5)
    n = 0
    for tokens, per_layer in zip(usable, att.batch_weights(usable)):
        for layer, weights in enumerate(per_layer):
            sums[layer] += row_scores(weights.astype(np.float64), window).sum(axis=-1)  # (h, 5)
        n += len(tokens) - 1
    means = sums / n
    uniform = uniform_scores([len(s) for s in usable], window)
    heads = []
    for layer in range(att.layers):
        for head in range(att.heads):
            s = {k: float(means[layer, head, c]) for c, k in enumerate(SCORES)}
            heads.append(HeadScore(layer, head, **s, label=label(s, uniform)))
    return {
        "model": att.model,
        "layers": att.layers,
        "heads_per_layer": att.heads,
        "sentences": len(usable),
        "queries": n,
        "window": window,
        "uniform": uniform,
        "thresholds": {"pattern": PATTERN_MIN, "local": LOCAL_MIN, "broad": BROAD_MIN, "margin": MARGIN},
        "heads": [h.as_dict() for h in heads],
    }
