"""The seed's worked example (``attn demo``) and its softmax-saturation experiment (``attn scale``):
the computation only; ``attncli/cli/panels.py`` draws them.

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

from attncli.attention.variants import masked_softmax, scaled
from attncli.numeric import entropy

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
    return entropy(p, base=2)


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
