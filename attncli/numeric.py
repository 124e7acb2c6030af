"""The numeric layer every wing shares: softmax, log-softmax, entropy and the two norms, each
written once (below attention/ and the model wings, so all of them may use it).

Shapes: ``...`` any leading axes, S the axis reduced over (keys, vocabulary, features: the last).

    softmax(x / T)[..., j]   = exp((x_j - m) / T) / sum_k exp((x_k - m) / T)    m = the row max
    logsumexp(x)[...]        = log sum_k exp(x_k - m) + m
    log_softmax(x)[..., j]   = x_j - logsumexp(x)
    entropy(p)[...]          = -sum_j p_j log p_j                               0 log 0 = 0
    layer_norm(x)            = (x - mean) / sqrt(var + eps) * weight + bias     var biased
    rms_norm(x)              = x / sqrt(mean(x^2) + eps) * (offset + weight)    Gemma: offset 1

The numerics (STYLE.md): the row max is subtracted before ``exp``, so no finite row overflows; a
masked entry (``mask`` False, or a score of -inf) gets weight exactly 0; a row whose every entry
is masked is all 0 on purpose (log-softmax: all -inf, logsumexp: -inf), never NaN. A row holding
NaN or +inf stays NaN (damage is not hidden: callers that refuse it pass ``check``). The dtype of
the input is kept (float32 in, float32 out); a caller that wants float64 casts first.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np


def _row_max(x: np.ndarray) -> np.ndarray:
    """(..., S) -> (..., 1) the row max, 0 for a row that is all -inf (its exp is then all 0)."""
    top = x.max(axis=-1, keepdims=True)  # (..., 1)
    top[top == -np.inf] = 0.0
    return top


def softmax(x: np.ndarray, temperature: float = 1.0, *, mask: Optional[np.ndarray] = None,
            out: Optional[np.ndarray] = None,
            check: Optional[Callable[[np.ndarray], None]] = None) -> np.ndarray:
    """softmax(x / temperature) over the last axis: (..., S) -> (..., S), the dtype of ``x``.

    ``mask`` (broadcast against x, True = visible): hidden entries get exactly 0. ``temperature``
    > 0 divides after the max is subtracted, so the top entry's term is exactly 1 for any T and a
    tiny T (5e-324) sends every other to -inf (weight exactly 0), with no warning. ``out`` (x
    itself for in place) receives the result; without it one new array is made. ``check`` is
    called with the row sums (..., 1) before the division (0 for a row with nothing visible).
    """
    if mask is not None:
        e = np.where(mask, x, -np.inf)  # (..., S): the one new array, worked on in place below
        e -= _row_max(e)
    else:
        e = np.subtract(x, _row_max(x), out=out)  # (..., S)
    if temperature != 1.0:
        with np.errstate(over="ignore"):
            e /= temperature  # <= 0; a tiny T overflows to -inf: weight exactly 0
    np.exp(e, out=e)  # exactly 0 where masked
    total = e.sum(axis=-1, keepdims=True)  # (..., 1), >= 1 unless every entry is masked
    if check is not None:
        check(total)
    np.divide(e, total, out=e, where=total != 0)  # a row with total 0 is all 0 already
    return e


def masked_softmax(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row softmax over the visible keys: (..., T, S) scores, (T, S) mask -> (..., T, S) weights;
    hidden keys exactly 0, a row with no visible key all 0."""
    return softmax(scores, mask=mask)


def logsumexp(x: np.ndarray) -> np.ndarray:
    """(..., S) -> (...,) log sum_j exp(x_j), the max taken out first; -inf for an all -inf row."""
    top = _row_max(x)  # (..., 1)
    with np.errstate(divide="ignore"):  # log 0 = -inf: a row with nothing in it
        return np.log(np.exp(x - top).sum(axis=-1)) + top[..., 0]


def log_softmax(x: np.ndarray) -> np.ndarray:
    """(..., S) -> (..., S) log softmax(x) = x - logsumexp(x); -inf where x is -inf (an all -inf
    row is all -inf, never NaN)."""
    lse = logsumexp(x)[..., None]  # (..., 1)
    with np.errstate(invalid="ignore"):
        out = x - lse  # (..., S)
    out[np.broadcast_to(lse == -np.inf, out.shape)] = -np.inf
    return out


def entropy(p: np.ndarray, base: Optional[float] = None) -> np.ndarray:
    """(..., S) distributions -> (...,) -sum_j p_j log p_j (0 log 0 = 0); ``base`` 2 for bits, None
    for nats (another base b: nats / log b)."""
    p = np.asarray(p)
    positive = p > 0  # (..., S)
    plogp = np.zeros(p.shape, dtype=np.result_type(p, np.float16))  # (..., S): 0 where p is not positive (0 log 0)
    (np.log2 if base == 2 else np.log)(p, out=plogp, where=positive)  # computed where p > 0 only, in place:
    np.multiply(plogp, p, out=plogp, where=positive)  # the same products as two np.where, two passes fewer
    h = -plogp.sum(axis=-1)
    return h if base in (None, 2) else h / np.log(base)


def _centred(x: np.ndarray) -> np.ndarray:
    """(..., d) -> (..., d) x minus its mean over the last axis."""
    return x - x.mean(axis=-1, keepdims=True)


def _scale(c: np.ndarray, eps: float) -> np.ndarray:
    """(..., d) -> (..., 1) sqrt(mean(c^2) + eps)."""
    return np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)


def norm_scale(x: np.ndarray, eps: float, centred: bool) -> np.ndarray:
    """(..., d) -> (..., 1) what a norm divides by: sqrt(var(x) + eps) (LayerNorm: ``centred``) or
    sqrt(mean(x^2) + eps) (RMSNorm)."""
    return _scale(_centred(x) if centred else x, eps)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias (biased variance);
    x (..., d), weight and bias (d,)."""
    c = _centred(x)  # (..., d)
    return c / _scale(c, eps) * weight + bias


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, offset: float = 0.0) -> np.ndarray:
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * (offset + weight) (Gemma: offset 1);
    x (..., d), weight (d,)."""
    out, w = x / _scale(x, eps), offset + weight  # (..., d), (d,)
    if np.result_type(out, w) != out.dtype:
        return out * w
    out *= w  # in place: the same operations, one array fewer
    return out
