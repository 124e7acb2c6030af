"""``attn matrix --explain I J``: why cell (I, J) of the attention matrix has its value.

The steps recompute the cell from q_I and k_J by the variant's formula (dot product, scale,
relative-position or window term, the mask), then its softmax over row I, and check that the
recomputed score and weight equal the matrix's (an independent recomputation: the formulas
here are per cell, the matrix's are vectorised in ``variants.py`` and ``masks.py``). Indices are 0-based, as in the JSON arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.attention import masks as masks_mod
from attncli.attention.variants import VARIANTS, relative_index
from attncli.errors import BadInput


def explain_step(name: str, value: Any, note: str = "") -> dict[str, Any]:
    if isinstance(value, np.ndarray):
        value = [float(x) for x in value]
    elif isinstance(value, (np.floating, float)):
        value = float(value)
    return {"name": name, "value": value, "note": note}


def _score_steps(res, q_i, k_j, i: int, j: int, head: int | None) -> tuple[list[dict], float]:
    """The steps from q_i, k_j to the pre-softmax score, and that score."""
    variant, params, d_k = res.request.variant, res.params, len(q_i)
    steps = [explain_step("q_I", q_i, f"{len(q_i)} dims, |q| = {np.linalg.norm(q_i):.4g}"),
             explain_step("k_J", k_j, f"{len(k_j)} dims, |k| = {np.linalg.norm(k_j):.4g}")]
    dot = float(q_i @ k_j)
    if variant == "additive":
        a, b = params["W_1"] @ q_i, params["W_2"] @ k_j  # (d_a,), (d_a,)
        score = float(params["v"] @ np.tanh(a + b))
        steps += [explain_step("W_1 q_I", a), explain_step("W_2 k_J", b), explain_step("score = v^T tanh(W_1 q + W_2 k)", score)]
        return steps, score
    if variant == "multiplicative":
        score = float(q_i @ params["W"] @ k_j)
        steps += [explain_step("q . k (for comparison)", dot), explain_step("score = q^T W k", score)]
        return steps, score
    if variant == "cosine":
        nq, nk = np.linalg.norm(q_i), np.linalg.norm(k_j)
        cos = dot / (nq * nk) if nq > 0 and nk > 0 else 0.0
        score = params["scale"] * cos
        steps += [explain_step("q . k", dot), explain_step("cos(q, k) = q . k / (|q| |k|)", cos),
                  explain_step("beta", params["scale"]), explain_step("score = beta cos", score)]
        return steps, score
    scale = 1.0 if variant == "dot" else 1.0 / np.sqrt(d_k)
    steps.append(explain_step("q . k", dot))
    if variant != "dot":
        steps.append(explain_step("scale 1/sqrt(d_k)" if head is None else "scale 1/sqrt(d_k/h)", scale, f"d = {d_k}"))
    score = dot * scale
    if variant == "relative":
        r = int(relative_index(i + 1, j + 1, params["max_relative"])[i, j])
        a_k = params["a_K"][r]
        rel = float(q_i @ a_k)
        dist = r - params["max_relative"]
        steps.append(explain_step("relative term q . a^K", rel, f"j - i = {j - i}, clipped to {dist:+d}"))
        score = (dot + rel) * scale
        steps.append(explain_step("score = (q . k + q . a^K) / sqrt(d_k)", score))
        return steps, score
    if variant == "local":
        sigma = max(params["window"], 1) / 2
        penalty = (j - i) ** 2 / (2 * sigma**2)
        steps.append(explain_step("window term -(j - i)^2 / (2 sigma^2)", -penalty, f"D = {params['window']}, sigma = {sigma:g}"))
        score -= penalty
    steps.append(explain_step("score", score))
    return steps, score


def softmax_steps(scores_row: np.ndarray, visible_row: np.ndarray, j: int, score: float, weight: float) -> list[dict]:
    """The softmax of row I with cell J's score as recomputed by ``_score_steps`` (the other keys'
    scores from the matrix), checked against the matrix's score and weight of the cell."""
    if not visible_row.any():
        return [explain_step("weight", 0.0, "every key of this row is masked: weights and output are all 0")]
    matrix_score = float(scores_row[j])
    row = np.array(scores_row, dtype=float)  # (S,)
    row[j] = score
    top = float(row[visible_row].max())
    e = np.exp(row[visible_row] - top)  # (visible,)
    recomputed = float(np.exp(score - top) / e.sum())
    return [
        explain_step("the matrix's score", matrix_score,
              "the score above matches it" if _close(score, matrix_score) else f"MISMATCH with the score above, {score:.6g}"),
        explain_step("row max (visible keys)", top, "subtracted before exp"),
        explain_step("exp(score - max)", float(np.exp(score - top))),
        explain_step("sum over visible keys", float(e.sum()), f"{int(visible_row.sum())} of {len(visible_row)} keys visible"),
        explain_step("weight = exp / sum", recomputed, "matches the matrix" if _close(recomputed, weight) else f"MISMATCH: the matrix has {weight:.6g}"),
    ]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def explain(res, i: int, j: int) -> dict[str, Any]:
    """The explanation of cell (i, j) of ``res`` (a MatrixResult) as a JSON-ready dict."""
    att = res.attention
    T, S = att.weights.shape
    if not (0 <= i < T and 0 <= j < S):
        raise BadInput(f"--explain {i} {j} is outside the {T} x {S} matrix: rows 0..{T - 1}, columns 0..{S - 1} (0-based)")
    visible = bool(att.mask[i, j])
    why = masks_mod.reasons(res.request.mask, i, j, res.n_real_keys)
    if res.request.variant == "local" and abs(j - i) > res.params["window"]:
        why.append(f"local window: |{j} - {i}| = {abs(j - i)} > {res.params['window']}")
    q, k = np.asarray(res.projected.q, float), np.asarray(res.projected.k, float)
    doc: dict[str, Any] = {
        "query": {"index": i, "token": res.tokens[i]},
        "key": {"index": j, "token": res.key_tokens[j]},
        "variant": res.request.variant,
        "formula": VARIANTS[res.request.variant].formula,
        "masked": not visible,
        "mask_reasons": why,
        "weight": float(att.weights[i, j]),
    }
    if att.head_weights is None:
        steps, score = _score_steps(res, q[i], k[j], i, j, None)
        steps += softmax_steps(att.scores[i], att.mask[i], j, score, float(att.weights[i, j])) if visible else [
            explain_step("weight", 0.0, "masked: " + "; ".join(why))]
        doc.update(score=None if not visible else score, steps=steps)
        return doc
    h = att.heads
    d_head = q.shape[1] // h
    doc["heads"] = []
    for head in range(h):
        cols = slice(head * d_head, (head + 1) * d_head)
        steps, score = _score_steps(res, q[i, cols], k[j, cols], i, j, head)
        w = float(att.head_weights[head, i, j])
        steps += softmax_steps(att.head_scores[head, i], att.mask[i], j, score, w) if visible else [explain_step("weight", 0.0, "masked")]
        doc["heads"].append({"head": head, "score": None if not visible else score, "weight": w, "steps": steps})
    doc["score"] = None if not visible else float(att.scores[i, j])
    doc["note"] = f"weight = the mean of the {h} heads' weights"
    return doc
