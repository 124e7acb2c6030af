"""The one tolerance for comparing two float32 computations of the same quantity.

Two float32 passes that compute the same numbers in a different order (NumPy against torch, a
batched grid against one pass per head, SDPA against eager attention, an AVX2 kernel against an
AVX-512 or NEON one, which sum 8, 16 or 4 lanes at a time) agree only up to float32 rounding. A
fixed ``atol=1e-5`` is a figure one CPU happened to meet; this module sizes the tolerance from the
rounding instead, so the suite passes on any CPU and still catches a real bug:

- one float32 operation rounds with relative error at most ``u = eps32 / 2`` (``eps32 = 2**-23``);
- a reduction of length ``n`` (a dot product, a sum over a softmax row) accumulates rounding errors
  that behave like a random walk: ``sqrt(n) * u`` relative to the size of the terms (the worst case
  ``n * u`` is never met by the blocked sums BLAS and torch use);
- a transformer layer chains about eight such reductions (q, k, v, scores, z, the output
  projection, the MLP's two matrices) and a norm, each adding its error relative to the size of the
  values it reads, so one layer contributes about ``8 * sqrt(n) * u`` and ``depth`` layers add up;
- the two sides each carry their own error: a factor 2.

Together: ``atol = 2 * 8 * u * depth * sqrt(n) * scale = 8 * eps32 * depth * sqrt(n) * scale``,
with ``scale`` the size of the values compared (by default the largest magnitude on either side:
an element near zero is a cancellation of terms of that size and carries their absolute error).
For a tiny model (width 32, MLP 37, 2 layers) and values of size 1 this is about 1.2e-5; a bug
that scales a value by 1.001 moves it by 1e-3 and is still caught by a margin of 80.

Which scale. By default the largest magnitude on either side, which suits values made by sums of
signed terms (hidden states, logits, q, k, z): there an element near zero carries the absolute error
of the terms it cancelled. A softmax's probabilities (attention weights, next-token probabilities)
are made without cancellation and are compared per element instead (``per_element=True``, the
last axis holding the rows). A weight ``p_i = exp(s_i - m) / sum_j exp(s_j - m)`` moves under
errors ``d`` in the scores by ``p_i * (d_i - sum_j p_j d_j)``: by at most ``2 * max|d|`` times
itself, so a weight of 1e-4 is as exact, relatively, as one of 0.9, and a tolerance sized for 1
would let a wrong small weight through. ``d`` is the scores' float32 rounding, the formula above at
the scores' size; the scores are not at hand, but their difference ``s_max - s_i =
log(p_max / p_i)`` is, and the scores are at least that large, so it stands for their size (at
least 1). Each weight may then move ``2 * f32_atol(max(1, log(p_max / p_i))) * p_i``. For
all-MiniLM-L6-v2 (6 layers, MLP width 1536) that is ``4.5e-4`` times a weight near the row's
largest: a weight scaled by 1.001 fails there by a margin of 2.2, where a tolerance sized for 1
(2.2e-4 absolute) lets every weight under 0.22 scaled by 1.001 through. (Its float32 pass differs
from the float64 one by 1.6e-5 relative, 1.8e-6 absolute, on tests/model/test_trace_batch.py's
sentences: a sanity check of the formula on one CPU, not its source.) Below float32's smallest
normal number (``tiny32``, 1.2e-38) float32 has no relative precision left: no weight counts as
smaller.

A float64 computation compared with float64 keeps its own tight fixed tolerance (1e-9, 1e-12):
this module is for float32 on either side.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = 2.0 ** -23  # float32's machine epsilon: the gap between 1 and the next float32
TINY32 = float(np.finfo(np.float32).tiny)  # float32's smallest normal number: below it, no relative precision
PER_LAYER = 8  # reductions per transformer layer (see the module docstring); also covers 2 sides x u


def f32_atol(scale: float, *, depth: int = 1, length: int = 1) -> float:
    """The absolute tolerance for two float32 computations of values of size ``scale`` after
    ``depth`` layers whose reductions are ``length`` long (the widest dot product on the way: the
    model width, the MLP width or the sequence length). See the module docstring for the reasoning."""
    if depth < 1 or length < 1:
        raise ValueError("depth and length are counts, at least 1")
    return PER_LAYER * EPS32 * depth * math.sqrt(length) * float(scale)


def f32_close(actual, expected, depth: int = 1, length: int = 1, *, scale: float | None = None,
              per_element: bool = False, printed: float = 0.0, what: str = "") -> None:
    """Assert that two float32 computations of the same values agree within float32 rounding
    (``f32_atol``), ``scale`` defaulting to the largest magnitude on either side, or with
    ``per_element`` to each element's own magnitude (probabilities: see the module docstring).
    ``printed`` adds the rounding of a number printed with few digits (5e-7 for 6 decimals in a
    JSON document). Fails with the largest difference, the tolerance and where."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    a, e = np.broadcast_arrays(a, e)
    finite = np.isfinite(a) & np.isfinite(e)
    odd = ~finite & ~((a == e) | (np.isnan(a) & np.isnan(e)))
    assert not odd.any(), f"{what or 'float32 values'}: non-finite values differ at {np.argwhere(odd)[:3].tolist()}"
    if per_element:  # softmax rows along the last axis: each weight against itself (module docstring)
        if scale is not None:
            raise ValueError("per_element takes each element's own scale: give no scale")
        p = np.maximum(np.abs(np.where(finite, a, 0.0)), np.abs(np.where(finite, e, 0.0)))
        top = p.max(axis=-1, keepdims=True) if p.ndim else p
        gap = np.log(np.maximum(top, TINY32) / np.maximum(p, TINY32))  # s_max - s_i, the score difference
        tol_each = 2 * f32_atol(1.0, depth=depth, length=length) * np.maximum(gap, 1.0) * np.maximum(p, TINY32) + printed
        diff = np.abs(np.subtract(a, e, out=np.zeros(a.shape), where=finite))
        if (diff > tol_each).any():
            at = np.unravel_index(int(np.argmax(diff / tol_each)), diff.shape) if diff.ndim else ()
            raise AssertionError(f"{what or 'float32 values'} differ by {float(diff[at]):.3g} at {at} "
                                 f"(actual {a[at]!r}, expected {e[at]!r}); float32 rounding allows "
                                 f"{float(tol_each[at]):.3g} there (per element, depth {depth}, length {length})")
        return
    if scale is None:
        scale = max(float(np.abs(e[finite]).max(initial=0.0)), float(np.abs(a[finite]).max(initial=0.0)), 1e-30)
    tol = f32_atol(scale, depth=depth, length=length) + printed
    diff = np.abs(np.subtract(a, e, out=np.zeros(a.shape), where=finite))  # 0 where both are the same inf
    worst = float(diff.max(initial=0.0))
    if not worst <= tol:
        at = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        raise AssertionError(f"{what or 'float32 values'} differ by {worst:.3g} at {at} "
                             f"(actual {a[at]!r}, expected {e[at]!r}); float32 rounding allows {tol:.3g} "
                             f"(scale {scale:.3g}, depth {depth}, length {length})")


def f32_size(config) -> tuple[int, int]:
    """A transformers config's ``depth`` and ``length`` for ``f32_atol``: its layers (an
    encoder-decoder's two stacks together) and its widest reduction (the width or the MLP's).
    ``config`` is a config.json's dict, a model directory holding one, or a model with ``.config``."""
    import json
    from pathlib import Path

    if hasattr(config, "config"):
        config = config.config
    if isinstance(config, (str, Path)):
        config = json.loads((Path(config) / "config.json").read_text(encoding="utf-8"))
    if hasattr(config, "to_dict"):
        config = config.to_dict()

    def first(*keys):
        return next((int(config[k]) for k in keys if config.get(k)), 0)

    depth = first("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers")
    depth += first("num_decoder_layers", "decoder_layers") if config.get("is_encoder_decoder") else 0
    width = first("hidden_size", "n_embd", "dim", "d_model")
    mlp = first("intermediate_size", "n_inner", "hidden_dim", "d_ff", "ffn_dim", "encoder_ffn_dim") or 4 * width
    if depth < 1 or width < 1:
        raise ValueError(f"no layer count or width in the config: {sorted(config)}")
    return depth, max(width, mlp)
