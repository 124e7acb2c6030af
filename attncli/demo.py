"""The seed's worked example (``attn demo``) and its softmax-saturation experiment (``attn scale``).

Shapes: T = S = 4 words, d = d_k = d_v = 3.

The worked example, exactly as the seed writes it::

    word_1..word_4 = [1,0,0], [0,1,0], [1,1,0], [0,0,1]
    numpy.random.seed(42)
    W_Q = randint(3, size=(3, 3)); W_K = ...; W_V = ...   (in that order)
    Q, K, V = words W_Q, words W_K, words W_V
    weights = softmax(Q K^T / sqrt(d_k)) row by row;  output = weights V

The scale experiment puts the softmax of the raw scores, of the scores x 100 and of the scores
/ sqrt(d_k) side by side, then shows why the scale exists: for random q, k with unit-variance
entries, q . k has standard deviation sqrt(d_k), so without the scale the softmax saturates
(one weight near 1) and its gradient vanishes as d_k grows (Vaswani et al. 2017, footnote 4).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.attention import masked_softmax, scaled

WORDS = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])  # (4, 3)
NAMES = ["word_1", "word_2", "word_3", "word_4"]
SEED = 42


def worked_example() -> dict[str, np.ndarray]:
    """Every intermediate of the seed's example, computed with the seed's own random draws."""
    rng = np.random.RandomState(SEED)  # the same stream as numpy.random.seed(42)
    w_q = rng.randint(3, size=(3, 3))
    w_k = rng.randint(3, size=(3, 3))
    w_v = rng.randint(3, size=(3, 3))
    Q = WORDS @ w_q  # (4, 3) @ (3, 3) -> (4, 3)
    K = WORDS @ w_k  # (4, 3)
    V = WORDS @ w_v  # (4, 3)
    d_k = K.shape[1]
    result = scaled(Q.astype(float), K.astype(float), V.astype(float))
    return {
        "words": WORDS, "W_Q": w_q, "W_K": w_k, "W_V": w_v, "Q": Q, "K": K, "V": V,
        "scores": Q @ K.T,  # (4, 3) @ (3, 4) -> (4, 4)
        "scaled_scores": result.scores,  # (4, 4) = Q K^T / sqrt(d_k)
        "weights": result.weights,  # (4, 4)
        "output": result.output,  # (4, 4) @ (4, 3) -> (4, 3)
        "d_k": np.array(d_k),
    }


def demo_json(ex: dict[str, np.ndarray]) -> dict[str, Any]:
    doc = {name: ex[name].tolist() for name in ex}
    doc["d_k"] = int(ex["d_k"])
    doc["seed"] = SEED
    doc["word_names"] = NAMES
    return doc


def entropy_bits(p: np.ndarray) -> np.ndarray:
    """Row entropy in bits of (..., S) distributions (0 log 0 = 0)."""
    logs = np.log2(p, out=np.zeros_like(p), where=p > 0)
    return -(p * logs).sum(axis=-1)


def softmax_gradient_norm(p: np.ndarray) -> np.ndarray:
    """Frobenius norm of the softmax Jacobian diag(p) - p p^T, per row of (..., S) weights."""
    jac = -p[..., :, None] * p[..., None, :]  # (..., S, S)
    idx = np.arange(p.shape[-1])
    jac[..., idx, idx] += p
    return np.sqrt((jac**2).sum(axis=(-2, -1)))


def scale_experiment(factor: float = 100.0, *, seed: int = 0, keys: int = 16, trials: int = 200,
                     dims: tuple[int, ...] = (4, 16, 64, 256, 1024)) -> dict[str, Any]:
    """The three softmaxes of the worked example's scores, and the d_k sweep on random vectors."""
    ex = worked_example()
    scores = ex["scores"].astype(float)  # (4, 4) raw Q K^T
    d_k = int(ex["d_k"])
    full = np.ones(scores.shape, dtype=bool)
    panels = {
        "raw": masked_softmax(scores, full),
        "times_factor": masked_softmax(scores * factor, full),
        "scaled": masked_softmax(scores / np.sqrt(d_k), full),
    }
    rng = np.random.default_rng(seed)
    sweep = []
    for d in dims:
        q = rng.standard_normal((trials, 1, d))  # (trials, 1, d)
        k = rng.standard_normal((trials, keys, d))  # (trials, S, d)
        raw = (q @ k.transpose(0, 2, 1))[:, 0, :]  # (trials, S)
        full = np.ones(raw.shape[-2:], dtype=bool)
        p_raw = masked_softmax(raw, full)
        p_scaled = masked_softmax(raw / np.sqrt(d), full)
        sweep.append({
            "d_k": d,
            "score_std": float(raw.std()),
            "max_weight_raw": float(p_raw.max(axis=-1).mean()),
            "max_weight_scaled": float(p_scaled.max(axis=-1).mean()),
            "entropy_raw": float(entropy_bits(p_raw).mean()),
            "entropy_scaled": float(entropy_bits(p_scaled).mean()),
            "gradient_raw": float(softmax_gradient_norm(p_raw).mean()),
            "gradient_scaled": float(softmax_gradient_norm(p_scaled).mean()),
        })
    return {
        "d_k": d_k, "factor": factor, "scores": scores.tolist(),
        "softmax_raw": panels["raw"].tolist(),
        "softmax_times_factor": panels["times_factor"].tolist(),
        "softmax_scaled": panels["scaled"].tolist(),
        "entropy_bits": {name: entropy_bits(p).tolist() for name, p in panels.items()},
        "sweep": {"keys": keys, "trials": trials, "seed": seed, "rows": sweep},
    }


# --- rendering ----------------------------------------------------------------------------------


def _small_table(console, title: str, m: np.ndarray, rows: list[str], cols: list[str], decimals: int = 0) -> None:
    from rich.table import Table

    console.print(title, style="bold", highlight=False)
    table = Table(show_edge=False)
    table.add_column("")
    for c in cols:
        table.add_column(c, justify="right")
    for name, row in zip(rows, np.asarray(m)):
        table.add_row(name, *[f"{x:.{decimals}f}" for x in row])
    console.print(table)


def render_demo(console, ex: dict[str, np.ndarray]) -> None:
    from attncli.render import Heatmap, render_heatmap

    dims = ["0", "1", "2"]
    console.print("The seed's worked example: four words, numpy.random.seed(42), "
                  "W_Q, W_K, W_V = randint(3, size=(3, 3)) in that order.", highlight=False)
    _small_table(console, "1. the words (one row each)", ex["words"], NAMES, dims)
    for w in ("W_Q", "W_K", "W_V"):
        _small_table(console, f"2. {w}", ex[w], dims, dims)
    for m, w in (("Q", "W_Q"), ("K", "W_K"), ("V", "W_V")):
        _small_table(console, f"3. {m} = words {w}", ex[m], NAMES, dims)
    _small_table(console, "4. scores = Q K^T", ex["scores"], NAMES, NAMES)
    _small_table(console, "5. scores / sqrt(d_k), d_k = 3", ex["scaled_scores"], NAMES, NAMES, 4)
    render_heatmap(console, Heatmap(ex["weights"], NAMES, NAMES, "6. weights = softmax(scores / sqrt(3)), by row",
                                    decimals=(8, 4)))
    _small_table(console, "7. output = weights V (one context vector per word)", ex["output"], NAMES, dims, 8)


def render_scale(console, doc: dict[str, Any]) -> None:
    from rich.table import Table

    from attncli.render import Heatmap, render_heatmap

    f = doc["factor"]
    console.print(f"The worked example's raw scores Q K^T (d_k = {doc['d_k']}), through three softmaxes:", highlight=False)
    _small_table(console, "scores = Q K^T", np.array(doc["scores"]), NAMES, NAMES)
    for key, what in (("softmax_raw", "softmax(scores)"), ("softmax_times_factor", f"softmax(scores x {f:g})"),
                      ("softmax_scaled", f"softmax(scores / sqrt({doc['d_k']}))")):
        render_heatmap(console, Heatmap(np.array(doc[key]), NAMES, NAMES, what, decimals=(4, 3)))
    ent = doc["entropy_bits"]
    console.print("entropy of each row in bits (2 = spread over all 4 words, 0 = one-hot)", style="bold", highlight=False)
    table = Table(show_edge=False)
    for col in ("query", "raw", f"x {f:g}", "/ sqrt(d_k)"):
        table.add_column(col, justify="right")
    for i, name in enumerate(NAMES):
        table.add_row(name, *(f"{ent[k][i]:.3f}" for k in ("raw", "times_factor", "scaled")))
    console.print(table)
    sw = doc["sweep"]
    console.print(f"why divide by sqrt(d_k): random q, k ~ N(0, 1), {sw['keys']} keys, {sw['trials']} trials each",
                  style="bold", highlight=False)
    table = Table(show_edge=False)
    for col in ("d_k", "std q.k", "max w raw", "max w scaled", "H raw", "H scaled", "grad raw", "grad scaled"):
        table.add_column(col, justify="right")
    for r in sw["rows"]:
        table.add_row(str(r["d_k"]), f"{r['score_std']:.2f}", f"{r['max_weight_raw']:.3f}", f"{r['max_weight_scaled']:.3f}",
                      f"{r['entropy_raw']:.2f}", f"{r['entropy_scaled']:.2f}", f"{r['gradient_raw']:.4f}",
                      f"{r['gradient_scaled']:.4f}")
    console.print(table)
    console.print("max w = the largest weight of a row, H = its entropy in bits (4 = uniform over 16 keys), "
                  "grad = the norm of the softmax's Jacobian; scaled = scores / sqrt(d_k).", style="dim", highlight=False)
    console.print("The dot product's spread grows like sqrt(d_k): unscaled, the softmax saturates (max weight -> 1, "
                  "entropy -> 0) and its gradient (the norm of diag(p) - p p^T) vanishes, so learning stalls. "
                  "Dividing by sqrt(d_k) keeps the spread, the entropy and the gradient steady "
                  "(Vaswani et al. 2017, section 3.2.1).", style="dim", highlight=False)
