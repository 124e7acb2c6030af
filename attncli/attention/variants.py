"""Attention variants as pure NumPy functions, and the one registry that lists them.

Shapes (used in the comments below):
    T    query tokens           S    key (and value) tokens
    d    model / word-vector dimension
    d_k  query and key dimension after the projection
    d_v  value dimension after the projection
    h    heads (multihead only; each head has d_k / h query/key and d_v / h value dimensions)

Every variant has the same signature::

    fn(q (T, d_k), k (S, d_k), v (S, d_v), *, mask (T, S) bool or None, params) -> AttentionResult

``mask[i, j]`` is True where query i may attend to key j (the convention of torch's
``scaled_dot_product_attention``); None means every key is visible. ``params`` is the dict made
by the variant's ``init(d_k, d_v, rng, config)``: the weights a variant owns (additive's W_1,
W_2, v; multiplicative's W; relative's a^K, a^V tables; ...), drawn from a seeded generator so a
run is reproducible.

Numerics, on purpose: scores of hidden keys never enter the softmax, the row maximum is
subtracted before ``exp``, and a hidden key's weight is exactly 0. A query row whose every key
is hidden (possible with --pad-to plus --window: a pad query far from every real key; or a narrow
window in cross-attention) gets
weights all 0 and output all 0 -- it attends to nothing -- and is listed in
``AttentionResult.empty_rows``; it never produces a NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from attncli.errors import BadInput
from attncli.numeric import masked_softmax


@dataclass
class AttentionResult:
    scores: np.ndarray  # (T, S) pre-softmax scores; the head average for multihead
    weights: np.ndarray  # (T, S) softmax weights; the head average for multihead
    output: np.ndarray  # (T, d_v)
    mask: np.ndarray  # (T, S) bool: the keys each query could see (incl. a variant's own window)
    head_scores: np.ndarray | None = None  # (h, T, S), multihead only
    head_weights: np.ndarray | None = None  # (h, T, S), multihead only

    @property
    def heads(self) -> int:
        return 1 if self.head_weights is None else int(self.head_weights.shape[0])

    @property
    def empty_rows(self) -> list[int]:
        """Query rows whose every key is hidden (weights and output all 0)."""
        return [int(i) for i in np.flatnonzero(~self.mask.any(axis=-1))]


@dataclass
class VariantConfig:
    """The user-facing knobs the variants' ``init`` functions read."""

    heads: int = 1
    max_relative: int = 4  # relative: clipping distance k
    local_window: int = 2  # local: half-width D of the window around each query
    cosine_scale: float | None = None  # cosine: beta; None = sqrt(d_k)


@dataclass(frozen=True)
class Variant:
    name: str
    title: str
    formula: str
    source: str
    fn: Callable[..., AttentionResult]
    init: Callable[[int, int, np.random.Generator, VariantConfig], dict[str, Any]] | None = None  # None: no weights


def full_mask(T: int, S: int, mask: np.ndarray | None) -> np.ndarray:
    """``mask`` as a (T, S) bool array (all True when None)."""
    if mask is None:
        return np.ones((T, S), dtype=bool)
    return np.asarray(mask, dtype=bool)


def _finish(scores: np.ndarray, v: np.ndarray, mask: np.ndarray) -> AttentionResult:
    weights = masked_softmax(scores, mask)  # (T, S)
    return AttentionResult(scores=scores, weights=weights, output=weights @ v, mask=mask)  # (T, d_v)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """N(0, 1/fan_in) draws: a product with a vector keeps its typical length."""
    return rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))


# --- the variants ------------------------------------------------------------------------------


def dot(q, k, v, *, mask=None, params=None) -> AttentionResult:
    """Dot-product attention.

    score_ij = q_i . k_j;  a_i = softmax_j(score_ij);  out_i = sum_j a_ij v_j
    (Luong et al. 2015, "dot"; Vaswani et al. 2017 without the scale).
    """
    mask = full_mask(len(q), len(k), mask)
    return _finish(q @ k.T, v, mask)  # (T, d_k) @ (d_k, S) -> (T, S)


def scaled(q, k, v, *, mask=None, params=None) -> AttentionResult:
    """Scaled dot-product attention.

    score_ij = q_i . k_j / sqrt(d_k);  a_i = softmax_j(score_ij);  out_i = sum_j a_ij v_j
    (Vaswani et al. 2017, "Attention Is All You Need", eq. 1).
    """
    mask = full_mask(len(q), len(k), mask)
    scores = q @ k.T  # (T, S)
    scores /= np.sqrt(q.shape[-1])  # in place: a 4,096-token matrix is 134 MB
    return _finish(scores, v, mask)


def _additive_init(d_k, d_v, rng, cfg):
    d_a = d_k  # the hidden size of the scoring network
    return {"W_1": _normal(rng, (d_a, d_k), d_k), "W_2": _normal(rng, (d_a, d_k), d_k), "v": _normal(rng, (d_a,), d_a)}


def additive(q, k, v, *, mask=None, params) -> AttentionResult:
    """Additive (Bahdanau) attention.

    score_ij = v_a^T tanh(W_1 q_i + W_2 k_j)   with W_1, W_2 (d_a x d_k), v_a (d_a), d_a = d_k
    (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning to Align and
    Translate", eq. 6 with the decoder state as the query).
    """
    mask = full_mask(len(q), len(k), mask)
    a = q @ params["W_1"].T  # (T, d_a)
    b = k @ params["W_2"].T  # (S, d_a)
    scores = np.empty((len(q), len(k)))  # (T, S)
    rows = max(1, 2_000_000 // max(1, len(k) * a.shape[1]))  # keep the (rows, S, d_a) block small
    for start in range(0, len(q), rows):
        block = np.tanh(a[start : start + rows, None, :] + b[None, :, :])  # (rows, S, d_a)
        scores[start : start + rows] = block @ params["v"]  # (rows, S)
    return _finish(scores, v, mask)


def _multiplicative_init(d_k, d_v, rng, cfg):
    return {"W": _normal(rng, (d_k, d_k), d_k)}


def multiplicative(q, k, v, *, mask=None, params) -> AttentionResult:
    """Multiplicative ("general") attention.

    score_ij = q_i^T W k_j   with W (d_k x d_k)
    (Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural Machine
    Translation", the "general" score).
    """
    mask = full_mask(len(q), len(k), mask)
    return _finish(q @ params["W"] @ k.T, v, mask)  # (T, d_k) @ (d_k, d_k) @ (d_k, S) -> (T, S)


def _cosine_init(d_k, d_v, rng, cfg):
    return {"scale": float(cfg.cosine_scale if cfg.cosine_scale is not None else np.sqrt(d_k))}


def cosine(q, k, v, *, mask=None, params) -> AttentionResult:
    """Cosine attention.

    score_ij = beta * (q_i . k_j) / (|q_i| |k_j|)   with beta = sqrt(d_k) unless set
    (Graves, Wayne & Danihelka 2014, "Neural Turing Machines", content addressing with key
    strength beta; Liu et al. 2022, Swin Transformer V2, as scaled cosine attention). A zero
    vector has cosine 0 with everything.
    """
    mask = full_mask(len(q), len(k), mask)
    qn = np.linalg.norm(q, axis=-1, keepdims=True)  # (T, 1)
    kn = np.linalg.norm(k, axis=-1, keepdims=True)  # (S, 1)
    qu = np.divide(q, qn, out=np.zeros_like(q, dtype=float), where=qn > 0)  # (T, d_k)
    ku = np.divide(k, kn, out=np.zeros_like(k, dtype=float), where=kn > 0)  # (S, d_k)
    return _finish(params["scale"] * (qu @ ku.T), v, mask)  # (T, S)


def _multihead_init(d_k, d_v, rng, cfg):
    # The per-head W_q^i, W_k^i, W_v^i are the column blocks of the projection's W_q, W_k, W_v
    # (head i reads dimensions i*d_k/h .. (i+1)*d_k/h of q and k), as in every implementation of
    # Vaswani et al. The output projection W_o is identity unless the projection supplies one.
    return {"heads": cfg.heads, "W_o": np.eye(d_v)}


def multihead(q, k, v, *, mask=None, params) -> AttentionResult:
    """Multi-head attention.

    head_i = softmax(Q_i K_i^T / sqrt(d_k/h)) V_i   where Q_i, K_i, V_i are the i-th blocks of
    d_k/h (d_v/h) columns of Q, K, V;  out = concat(head_1 .. head_h) W_o
    (Vaswani et al. 2017, section 3.2.2). The reported weights are the mean over heads.
    params: heads, W_o (d_v, d_v), optionally b_o (d_v,) added to the output.
    """
    h = int(params["heads"])
    T, S = len(q), len(k)
    mask = full_mask(T, S, mask)
    d_head, dv_head = q.shape[-1] // h, v.shape[-1] // h
    qh = q.reshape(T, h, d_head).transpose(1, 0, 2)  # (h, T, d_k/h)
    kh = k.reshape(S, h, d_head).transpose(1, 0, 2)  # (h, S, d_k/h)
    vh = v.reshape(S, h, dv_head).transpose(1, 0, 2)  # (h, S, d_v/h)
    head_scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(d_head)  # (h, T, S)
    head_weights = masked_softmax(head_scores, mask)  # (h, T, S)
    heads_out = head_weights @ vh  # (h, T, d_v/h)
    concat = heads_out.transpose(1, 0, 2).reshape(T, h * dv_head)  # (T, d_v)
    return AttentionResult(
        scores=head_scores.mean(axis=0),  # (T, S)
        weights=head_weights.mean(axis=0),  # (T, S)
        output=concat @ params["W_o"] + params.get("b_o", 0.0),  # (T, d_v) @ (d_v, d_v) -> (T, d_v)
        mask=mask,
        head_scores=head_scores,
        head_weights=head_weights,
    )


def _relative_init(d_k, d_v, rng, cfg):
    n = 2 * cfg.max_relative + 1  # one row per clipped distance -k .. k
    return {"max_relative": cfg.max_relative, "a_K": _normal(rng, (n, d_k), d_k), "a_V": _normal(rng, (n, d_v), d_v)}


def relative_index(T: int, S: int, max_relative: int) -> np.ndarray:
    """(T, S) row of the a^K / a^V tables for each pair: clip(j - i, -k, k) + k."""
    dist = np.arange(S)[None, :] - np.arange(T)[:, None]  # (T, S)
    return np.clip(dist, -max_relative, max_relative) + max_relative


def relative(q, k, v, *, mask=None, params) -> AttentionResult:
    """Relative position representations.

    score_ij = q_i . (k_j + a^K_ij) / sqrt(d_k);  out_i = sum_j a_ij (v_j + a^V_ij)
    a^K_ij = w^K[clip(j - i, -k, k)], a^V_ij = w^V[clip(j - i, -k, k)], k = --max-relative
    (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with Relative Position Representations",
    eqs. 3-5). The tables are seeded random draws here, not learned.
    """
    T, S = len(q), len(k)
    mask = full_mask(T, S, mask)
    a_K, a_V = params["a_K"], params["a_V"]  # (n, d_k), (n, d_v), n = 2k + 1 clipped distances
    n = len(a_K)
    idx = relative_index(T, S, int(params["max_relative"]))  # (T, S)
    # Never materialise a^K_ij, a^V_ij as (T, S, d) tensors (13 GB at T = S = 4,096): q_i . a^K_ij
    # is q_i . w^K[r] for the pair's distance bucket r, and sum_j a_ij a^V_ij groups the weights by r.
    content = q @ k.T  # (T, S)
    position = np.take_along_axis(q @ a_K.T, idx, axis=1)  # (T, n) -> (T, S)
    scores = (content + position) / np.sqrt(q.shape[-1])  # (T, S)
    weights = masked_softmax(scores, mask)  # (T, S)
    rows = np.arange(T)[:, None] * n  # (T, 1)
    by_distance = np.bincount((rows + idx).ravel(), weights=weights.ravel(), minlength=T * n).reshape(T, n)  # (T, n)
    output = weights @ v + by_distance @ a_V  # (T, d_v)
    return AttentionResult(scores=scores, weights=weights, output=output, mask=mask)


def _local_init(d_k, d_v, rng, cfg):
    return {"window": cfg.local_window}


def local_band(T: int, S: int, window: int) -> np.ndarray:
    """(T, S) True where |j - i| <= window."""
    return np.abs(np.arange(S)[None, :] - np.arange(T)[:, None]) <= window


def local(q, k, v, *, mask=None, params) -> AttentionResult:
    """Local attention around each query's own position.

    visible iff |j - i| <= D;  score_ij = q_i . k_j / sqrt(d_k) - (j - i)^2 / (2 sigma^2),
    sigma = D / 2;  a_i = softmax_j over the window
    (Luong, Pham & Manning 2015, local attention: the window [p_t - D, p_t + D] with p_t = t as
    in local-m, and local-p's Gaussian favouring of the centre, applied before the softmax so a
    row still sums to 1). D = --window, 2 by default.
    """
    T, S = len(q), len(k)
    D = int(params["window"])
    mask = full_mask(T, S, mask) & local_band(T, S, D)
    dist = np.arange(S)[None, :] - np.arange(T)[:, None]  # (T, S)
    sigma = max(D, 1) / 2.0
    scores = q @ k.T / np.sqrt(q.shape[-1]) - dist**2 / (2 * sigma**2)  # (T, S)
    return _finish(scores, v, mask)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("dot", "dot-product", "q_i . k_j", "Luong et al. 2015 (dot)", dot),
        Variant("scaled", "scaled dot-product", "q_i . k_j / sqrt(d_k)", "Vaswani et al. 2017", scaled),
        Variant("additive", "additive", "v^T tanh(W_1 q_i + W_2 k_j)", "Bahdanau et al. 2015", additive, _additive_init),
        Variant("multiplicative", "multiplicative (general)", "q_i^T W k_j", "Luong et al. 2015 (general)", multiplicative, _multiplicative_init),
        Variant("cosine", "cosine", "beta * cos(q_i, k_j), beta = sqrt(d_k)", "Graves et al. 2014; Liu et al. 2022", cosine, _cosine_init),
        Variant(
            "multihead", "multi-head", "per head: Q_i K_i^T / sqrt(d_k/h); concat(heads) W_o",
            "Vaswani et al. 2017", multihead, _multihead_init,
        ),
        Variant(
            "relative", "relative-position", "q_i . (k_j + a^K[clip(j-i, -k, k)]) / sqrt(d_k)",
            "Shaw et al. 2018", relative, _relative_init,
        ),
        Variant(
            "local", "local", "q_i . k_j / sqrt(d_k) - (j-i)^2 / (2 (D/2)^2), |j-i| <= D",
            "Luong et al. 2015 (local)", local, _local_init,
        ),
    ]
}
DEFAULT_VARIANT = "scaled"


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise BadInput(f"unknown variant {name!r}: choose one of {', '.join(VARIANTS)} (see 'attn variants')") from None


def attend(name: str, q, k, v, *, mask=None, params: dict[str, Any]) -> AttentionResult:
    """Run variant ``name`` (q, k, v as float64)."""
    return get_variant(name).fn(q, k, v, mask=mask, params=params)


def init_params(name: str, d_k: int, d_v: int, *, seed: int, config: VariantConfig) -> dict[str, Any]:
    """The variant's own weights, from a generator seeded by ``seed`` (independent of the projection's)."""
    init = get_variant(name).init
    if init is None:  # no weights: numpy.random (10-40 ms of start-up) is not even imported
        return {}
    return init(d_k, d_v, np.random.default_rng([seed, 2]), config)
