"""The backward (vector-Jacobian products) of the NumPy pieces the decoders are built from.

Each ``*_back(g, ...)`` takes the gradient ``g`` of a scalar metric with respect to a piece's
output and returns the gradient with respect to its input (and, where they are needed, its other
inputs), in float64. Checked against torch autograd in tests/hf/test_backward.py.
Shapes: T queries, S keys, d model width, h heads, d_head a head's width, I the MLP's width.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from attncli.hf.kernels import ops
from attncli.numeric import norm_scale


def layer_norm_back(g: np.ndarray, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """y = (x - mean) / s * w + b, s = sqrt(var + eps): dx = (gw - mean(gw) - x^ mean(gw x^)) / s  (..., d)."""
    centred = x - x.mean(axis=-1, keepdims=True)
    s = norm_scale(x, eps, centred=True)  # (..., 1)
    xhat = centred / s
    gw = g * weight
    return (gw - gw.mean(axis=-1, keepdims=True) - xhat * (gw * xhat).mean(axis=-1, keepdims=True)) / s


def rms_norm_back(g: np.ndarray, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """y = x / s * w, s = sqrt(mean(x^2) + eps): dx = gw / s - x mean(gw x) / s^3  (..., d)."""
    s = norm_scale(x, eps, centred=False)  # (..., 1)
    gw = g * weight
    return gw / s - x * (gw * x).mean(axis=-1, keepdims=True) / s ** 3


def _d_gelu(x: np.ndarray) -> np.ndarray:
    """d/dx of x/2 (1 + erf(x / sqrt 2)) = Phi(x) + x phi(x)."""
    return 0.5 * (1.0 + ops.erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _d_gelu_tanh(x: np.ndarray) -> np.ndarray:
    """d/dx of x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)


def _d_silu(x: np.ndarray) -> np.ndarray:
    s = 1.0 / (1.0 + np.exp(-x))
    return s * (1.0 + x * (1.0 - s))


def _d_quick_gelu(x: np.ndarray) -> np.ndarray:
    s = 1.0 / (1.0 + np.exp(-1.702 * x))
    return s + 1.702 * x * s * (1.0 - s)


def _d_relu(x: np.ndarray) -> np.ndarray:
    return (x > 0).astype(np.float64)


DERIVATIVES: dict[Callable, Callable] = {ops.gelu: _d_gelu, ops.gelu_new: _d_gelu_tanh, ops.silu: _d_silu,
                                         ops.quick_gelu: _d_quick_gelu, ops.relu: _d_relu}


def softmax_back(g: np.ndarray, p: np.ndarray) -> np.ndarray:
    """p = softmax(s) over the last axis: ds = p (g - sum(g p))  (a masked key, p = 0, gets 0)."""
    return p * (g - (g * p).sum(axis=-1, keepdims=True))


def attention_back(g_z: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, p: np.ndarray,
                   scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """z = p v, p = softmax(q k^T scale + mask): from g_z (h, T, d_head) -> (dq, dk, dv, dp); q (h, T,
    d_head), k and v (h, S, d_head), p (h, T, S)."""
    dp = g_z @ v.swapaxes(-1, -2)  # (h, T, S)
    dv = p.swapaxes(-1, -2) @ g_z  # (h, S, d_head)
    ds = softmax_back(dp, p) * scale  # (h, T, S)
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv, dp  # (h, T, d_head), (h, S, d_head), (h, S, d_head), (h, T, S)
