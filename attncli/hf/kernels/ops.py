"""The NumPy pieces every pretrained forward pass is built from, named as in transformers.

Shapes: B texts, T tokens, d model width, h heads, d_head = d / h. ``mask`` arguments are bool,
True where a query may attend a key; a masked key gets weight exactly 0 (never all of a row: a
query always sees itself or, padded, the text's first token).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from attncli.numeric import layer_norm, softmax  # noqa: F401 (ops.layer_norm, ops.softmax: the families' names)

# erf(x) for |x| < 2 by its Maclaurin series (32 terms: the next is below 1e-16 at x = 2), for
# 2 <= |x| < 6 by erfc's continued fraction (40 terms: 2e-16 at x = 2); from 6 on erf is 1.0 in float64
_SERIES_MAX = 2.0
_FRACTION_MAX = 6.0
_FRACTION_TERMS = 40
_SERIES = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2.0 / math.sqrt(math.pi) for n in range(32)]


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, vectorised (NumPy has none), float64, within 2e-15 of ``math.erf``.

    |x| < 2:      erf(x) = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1))       (Horner in x^2)
    2 <= |x| < 6: erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    (Abramowitz & Stegun 7.1.5 and 7.1.14), erf = 1 - erfc, odd in x.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.ones_like(a)
    small = a < _SERIES_MAX
    if small.any():
        s = a[small]
        s2 = s * s
        acc = np.full_like(s2, _SERIES[-1])
        for c in reversed(_SERIES[:-1]):
            acc *= s2
            acc += c
        out[small] = acc * s
    middle = ~small & (a < _FRACTION_MAX)
    if middle.any():
        z = a[middle]
        frac = z.copy()
        for k in range(_FRACTION_TERMS, 0, -1):  # evaluated from the tail inwards
            np.divide(k / 2.0, frac, out=frac)
            frac += z
        out[middle] = 1.0 - np.exp(-z * z) / math.sqrt(math.pi) / frac
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


# erf(x) = x P(x^2) / Q(x^2) on [-4, 4], clamped beyond (erf(4) = 1 - 1.5e-8, 1.0 in float32):
# the rational approximation Eigen and XLA use for float32 (numerator's odd coefficients from x^13
# down, denominator's even ones from x^8 down); within 0.6 float32 epsilons of erf evaluated exactly
_ERF32_P = np.array([-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                     -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02], dtype=np.float32)
_ERF32_Q = np.array([-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                     -1.42647390514189e-02], dtype=np.float32)


def erf32(x: np.ndarray) -> np.ndarray:
    """The error function in float32 arithmetic (a rational approximation, _ERF32_P / _ERF32_Q):
    7 times faster than ``erf``; within 8 float32 epsilons (8 x 2^-23) of ``math.erf`` by
    construction (0.6 of approximation, 14 roundings of half an epsilon), 3.3 measured."""
    return _erf32(np.clip(np.asarray(x, dtype=np.float32), -4.0, 4.0))


def _erf32(x: np.ndarray) -> np.ndarray:
    """``erf32`` of float32 x already within [-4, 4] (Horner from the first products: the same
    roundings as from a constant array, one fill fewer)."""
    x2 = x * x
    p = x2 * _ERF32_P[0]
    p += _ERF32_P[1]
    for c in _ERF32_P[2:]:
        p *= x2
        p += c
    q = x2 * _ERF32_Q[0]
    q += _ERF32_Q[1]
    for c in _ERF32_Q[2:]:
        q *= x2
        q += c
    p *= x
    p /= q
    return p


def gelu(x: np.ndarray) -> np.ndarray:
    """gelu(x) = x/2 (1 + erf(x / sqrt(2))): the exact GELU of BERT's ``hidden_act="gelu"``; float32
    input through ``erf32`` (a float32 pass asks no more), float64 through ``erf``."""
    if x.dtype == np.float32:
        t = x / np.float32(math.sqrt(2.0))
        e = _erf32(np.clip(t, -4.0, 4.0, out=t))  # the same operations as below, fewer arrays
        e += 1.0
        half = 0.5 * x
        half *= e
        return half
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)).astype(x.dtype))


def gelu_new(x: np.ndarray) -> np.ndarray:
    """gelu_new(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GPT-2's tanh approximation.
    float32 input as x/2 (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x x))) in place, in float32 (x^3 by
    ``np.power`` was 30 times slower, 3.5 s of a GPT-2 grid's 7.1 s); float64 as written above."""
    if x.dtype == np.float32:
        inner = x * x
        inner *= np.float32(0.044715)
        inner += np.float32(1.0)
        inner *= x
        inner *= np.float32(math.sqrt(2.0 / math.pi))
        np.tanh(inner, out=inner)
        inner += np.float32(1.0)
        inner *= x
        inner *= np.float32(0.5)
        return inner
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * np.power(x, 3.0))))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def quick_gelu(x: np.ndarray) -> np.ndarray:
    """x sigmoid(1.702 x)."""
    return x / (1.0 + np.exp(-1.702 * x))


def silu(x: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-x)), computed in one new array (the same operations, the same bits)."""
    out = np.negative(x)
    np.exp(out, out=out)
    out += 1.0
    return np.divide(x, out, out=out)


# transformers' ACT2FN names this backend computes exactly (gelu_python is the same erf GELU)
ACTIVATIONS = {
    "gelu": gelu, "gelu_python": gelu, "gelu_new": gelu_new, "gelu_pytorch_tanh": gelu_new,
    "gelu_fast": gelu_new, "relu": relu, "quick_gelu": quick_gelu, "silu": silu, "swish": silu,
}


def _flat_matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (..., in) @ w (in, out) as ONE product of (rows, in) by (in, out): NumPy runs a stacked
    (B, T, in) @ (in, out) as B small products, about 3x slower for a batch of short texts."""
    if x.ndim <= 2:
        return x @ w
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[-1])


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """nn.Linear: x W^T + b, W stored (out, in)."""
    y = _flat_matmul(x, weight.T)
    return y if bias is None else y + bias


def conv1d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """GPT-2's Conv1D: x W + b, W stored (in, out), transposed relative to nn.Linear."""
    return _flat_matmul(x, weight) + bias


ROW_BLOCK_BYTES = 8 * 2**20  # by_rows: one block's widest inner array at most


def by_rows(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, width: int, budget: int | None = None) -> np.ndarray:
    """fn(x) for a position-wise ``fn`` (an MLP: each token's row on its own) of x (B, T, d), run
    over blocks of rows so that its inner arrays, (B, c, width) wide, stay within ``budget`` bytes
    (ROW_BLOCK_BYTES): a long text's MLP never holds its (T, intermediate) activations at once."""
    B, T = x.shape[:2]
    c = max(1, min(T, (budget or ROW_BLOCK_BYTES) // max(1, B * width * x.itemsize)))
    if c >= T:
        return fn(x)
    first = fn(x[:, :c])
    out = np.empty((B, T) + first.shape[2:], dtype=first.dtype)  # (B, T, ...)
    out[:, :c] = first
    for a in range(c, T, c):
        out[:, a: a + c] = fn(x[:, a: a + c])
    return out


def split_heads(x: np.ndarray, h: int) -> np.ndarray:
    """(B, T, d) -> (B, h, T, d_head)."""
    B, T, d = x.shape
    return x.reshape(B, T, h, d // h).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, h, T, d_head) -> (B, T, d)."""
    B, h, T, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, h * d_head)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
              allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention, as transformers' ``eager_attention_forward``.

    q, k, v (B, h, T, d_head); allowed (B, 1, T, T) bool or None. Returns the context
    (B, h, T, d_head) and the weights softmax(q k^T * scale, masked) (B, h, T, T).
    """
    scores = (q @ k.swapaxes(-1, -2)) * scale  # (B, h, T, T)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    weights = softmax(scores)  # (B, h, T, T)
    return weights @ v, weights


def key_mask(mask: np.ndarray, causal: bool) -> np.ndarray:
    """(B, T) bool token mask -> (B, 1, T, T) bool: query i may attend key j (a real token; j <= i if causal).
    A padding query also sees itself, so that none has every key masked (a sliding window may hide
    every real token from it); no real query sees padding."""
    B, T = mask.shape
    allowed = mask[:, None, None, :] | np.eye(T, dtype=bool)[None, None]  # (B, 1, T, T)
    if causal:
        allowed = allowed & np.tril(np.ones((T, T), dtype=bool))[None, None]
    return allowed


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE (rotary position embeddings) on the first rotary_dim dims of x (B, h, T, d_head); cos, sin
    (T, rotary_dim), halves alike: x cos + rotate_half(x) sin = x1 cos - x2 sin | x2 cos + x1 sin, written into one new array."""
    r = cos.shape[-1]
    half = r // 2
    x1, x2 = x[..., :half], x[..., half:r]
    c, s = cos[..., :half], sin[..., :half]  # (T, r/2)
    out = np.empty(x.shape, dtype=np.result_type(x, cos))  # (B, h, T, d_head)
    np.multiply(x1, c, out=out[..., :half])
    out[..., :half] -= x2 * s
    np.multiply(x2, c, out=out[..., half:r])
    out[..., half:r] += x1 * s
    out[..., r:] = x[..., r:]
    return out
