"""What a head moves, not only how much it weighs (Kobayashi et al. 2020, "Attention is Not Only a
Weight: Analyzing Transformers with Vector Norms", EMNLP).

A layer's attention output at position i is sum_h sum_j A[h, i, j] f^h(x_j) + b_O, with
f^h(x) = (x W_V + b_V)^h W_O^h, head h's value vector mapped by its rows of the output
projection (eq. 6). A weight near 1 on a key whose f(x_j) is tiny moves almost nothing; the norm
||A[h, i, j] f^h(x_j)|| says how much of key j actually reaches query i.

Shapes: ``h`` heads, ``T`` query tokens, ``S`` key tokens, ``d`` model width.

    >>> import numpy as np
    >>> A = np.array([[[0.9, 0.1]]]); fx = np.array([[[0.1, 0.0], [0.0, 3.0]]])
    >>> head_norms(A, fx).round(3).tolist()
    [[[0.09, 0.3]]]
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.rules.option_conflicts import validate
from attncli.attention.explain import explain_step

FORMULA = "||A_ij f(x_j)||,  f(x) = (x W_V + b_V) W_O  (one head: its rows of W_O)"
SOURCE = "Kobayashi et al. 2020, Attention is Not Only a Weight: Analyzing Transformers with Vector Norms (EMNLP)"


def check_norms_options(*, rollout: bool, words: bool, hide_special: bool, model_view: bool,
                        show: str = "norms") -> None:
    """--show norms / scores draw one layer's heads token by token: refuse the views that mix
    tokens or layers or renormalise rows (the table: attncli.rules.option_conflicts)."""
    validate(dict(show=show, rollout=rollout, words=words, hide_special=hide_special, model_view=model_view),
             "transformer")


def head_norms(weights: np.ndarray, fx: np.ndarray) -> np.ndarray:
    """(h, T, S) ||A[h, i, j] f^h(x_j)|| = A[h, i, j] ||f^h(x_j)|| (weights are never negative),
    in float64 whatever the inputs' precision.

    weights A (h, T, S); fx the transformed value vectors f^h(x_j) (h, S, d)."""
    return np.asarray(weights, dtype=np.float64) * np.linalg.norm(fx, axis=-1)[:, None, :]  # (h, T, S)


def summed_norms(weights: np.ndarray, fx: np.ndarray) -> np.ndarray:
    """(T, S) ||sum_h A[h, i, j] f^h(x_j)||: what key j sends query i through the whole layer
    (the heads' vectors added before the norm, as the layer adds them)."""
    moved = np.einsum("hij,hjd->ijd", np.asarray(weights, dtype=np.float64), fx)  # (T, S, d)
    return np.linalg.norm(moved, axis=-1)  # (T, S)


def explain_norm(weights: np.ndarray, fx: np.ndarray, tokens: Sequence[str], i: int, j: int,
                 head: Optional[int] = None) -> dict[str, Any]:
    """``--explain I J`` of the norms view: per head alpha = A[h, I, J], ||f(x_J)|| and their product;
    for the whole layer also ||sum_h alpha^h f^h(x_J)||. Same layout as the weights' explanation."""
    h, T, S = weights.shape
    if not (0 <= i < T and 0 <= j < S):
        raise BadInput(f"--explain {i} {j} is outside the {T} x {S} matrix: rows 0..{T - 1}, columns 0..{S - 1} "
                       "(0-based, input token positions, special tokens included)")
    f_norms = np.linalg.norm(fx[:, j], axis=-1)  # (h,)
    entries = []
    for hd in ([head] if head is not None else range(h)):
        alpha, size = float(weights[hd, i, j]), float(f_norms[hd])
        entries.append({"head": hd, "weight": alpha * size, "score": None, "steps": [
            explain_step("alpha", alpha, "the attention weight A[I, J]"),
            explain_step("||f(x_J)||", size, "f(x) = (x W_V + b_V) W_O, this head's rows of W_O"),
            explain_step("||alpha f(x_J)||", alpha * size, "alpha x ||f(x_J)||: what key J moves to query I")]})
    doc: dict[str, Any] = {
        "query": {"index": i, "token": tokens[i]}, "key": {"index": j, "token": tokens[j]},
        "variant": "pretrained", "show": "norms", "formula": FORMULA, "masked": False, "mask_reasons": [],
    }
    if head is not None:
        doc.update(score=None, weight=entries[0]["weight"], steps=entries[0]["steps"])
    else:
        total = float(np.linalg.norm(np.einsum("h,hd->d", weights[:, i, j], fx[:, j])))
        doc.update(heads=entries, score=None, weight=total,
                   note=f"the layer: ||sum over the {h} heads of alpha f(x_J)|| = {total:.4g} (not the sum of the heads' norms)")
    return doc
