"""tests/_tolerance.py, the suite's one float32 tolerance: its size from float32 rounding, and what
it lets through and what it catches."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from _tolerance import EPS32, f32_atol, f32_close


def test_the_tolerance_is_float32_rounding_scaled_by_size_depth_and_length():
    assert EPS32 == np.finfo(np.float32).eps
    assert f32_atol(1.0) == 8 * EPS32
    assert f32_atol(3.0, depth=2, length=36) == pytest.approx(3.0 * 2 * 6 * 8 * EPS32)
    assert f32_atol(1.0, depth=2, length=37) < 1.2e-5  # a tiny model: near the fixed 1e-5 it replaces
    with pytest.raises(ValueError):
        f32_atol(1.0, depth=0)


def test_it_passes_float32_rounding_and_catches_a_wrong_scale():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 37))  # (rows, length)
    w = rng.standard_normal((37, 5))
    f64 = x @ w
    f32 = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float64)
    f32_close(f32, f64, length=37)  # one float32 reduction against float64
    with pytest.raises(AssertionError, match="float32 rounding allows"):
        f32_close(f32 * 1.001, f64, length=37)
    with pytest.raises(AssertionError, match="non-finite"):
        f32_close([1.0, math.inf], [1.0, -math.inf])
    f32_close([1.0, -math.inf], [1.0, -math.inf])  # a masked score on both sides


def test_per_element_holds_each_probability_to_its_own_size():
    """A softmax's small weights are as exact, relatively, as its large ones: per element, a small
    weight scaled by 1.001 fails although it moves by far less than the tolerance sized for 1."""
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((6, 9)) * 4  # (rows, keys)
    f64 = np.exp(scores - scores.max(-1, keepdims=True))
    f64 /= f64.sum(-1, keepdims=True)
    s32 = scores.astype(np.float32)
    f32 = np.exp(s32 - s32.max(-1, keepdims=True))
    f32 = (f32 / f32.sum(-1, keepdims=True)).astype(np.float64)
    f32_close(f32, f64, per_element=True, length=9)
    small = f32.copy()
    i = np.unravel_index(np.argmin(small), small.shape)  # the smallest weight
    small[i] *= 1.001
    f32_close(small, f64, length=9)  # sized for 1, the wrong small weight goes through
    with pytest.raises(AssertionError, match="per element"):
        f32_close(small, f64, per_element=True, length=9)
    f32_close([0.0, 1e-45], [0.0, 0.0], per_element=True)  # under float32's smallest normal: no relative precision
    with pytest.raises(ValueError):
        f32_close(f32, f64, per_element=True, scale=1.0)


# --- the audit: no new fixed tolerance where float32 rounding should size one ------------------------

# A tolerance literal between 1e-3 and 1e-7 (atol=, rtol=, abs=, rel=, tol=, or a bound after < or
# <=) is the size a fixed float32 tolerance takes; float64 comparisons keep 1e-9 and below. No test
# file holds one unless its line says, in a comment "# fixed: <where its size comes from>", why it is
# not float32's rounding (a number printed with few digits, a finite difference's error, a check that
# two things really differ): compare float32 results with f32_close.
FIXED = re.compile(r"(?:\b(?:atol|rtol|abs|rel|tol)\s*=\s*|<=?\s*)(\d(?:\.\d+)?e-(\d+))\b")
REASON = re.compile(r"#\s*fixed:\s*\S")  # "# fixed: <where the size comes from>" on the literal's line
TESTS = Path(__file__).resolve().parent


def fixed_tolerances(text: str) -> int:
    """The tolerance literals (FIXED, 1e-3 to 1e-7) on lines that do not say, in a ``# fixed:`` comment,
    where their size comes from."""
    return sum(1 for line in text.splitlines() if not REASON.search(line)
               for m in FIXED.finditer(line) if 3 <= int(m.group(2)) <= 7)


def test_no_new_fixed_tolerance_where_float32_rounding_should_size_it():
    assert fixed_tolerances("np.testing.assert_allclose(a, b, atol=1e-5)  # x < 2e-6 and y <= 1e-12") == 2
    assert fixed_tolerances("assert err < 1e-3  # fixed: the integral's trapezoid error\nok(abs=1e-4)") == 1
    assert fixed_tolerances("assert err < 1e-3  # fixed:\n") == 1  # a tag without its reason counts
    found = {str(p.relative_to(TESTS)): fixed_tolerances(p.read_text(encoding="utf-8"))
             for p in sorted(TESTS.rglob("*.py")) if p.name not in ("_tolerance.py", Path(__file__).name)}
    untagged = {name: n for name, n in found.items() if n}
    assert not untagged, (f"fixed tolerances (file: how many) {untagged}: compare float32 results with "
                          "tests/_tolerance.py's f32_close, or say why on the line (see the comment above FIXED)")
