"""The array formatter of large matrices (attncli.attention.numtext) against Python's own "%.6g".

The JSON of `attn matrix` promises printf's %.6g for every number (docs/matrix.md); numtext must
give byte-for-byte the same text, including at rounding ties, carries into the next power of
ten, tiny and huge exponents, negative zero, and masked (null) cells.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.attention import document, numtext


@pytest.fixture(autouse=True)
def fresh_tables(monkeypatch):
    """Each test builds the digit tables afresh (``cells`` caches them at first use): a change to
    how they are built is then seen by every test, not only the first one in a process (mutation
    testing runs each mutant in a process where they were already built; docs/mutation.md)."""
    monkeypatch.setattr(numtext, "_tables", None)


def _texts(x: np.ndarray, visible: np.ndarray | None = None) -> list[str]:
    b = numtext.cells(x, visible)
    return b.tobytes().translate(None, b"\0").decode("ascii").split(",")[1:]


def _expected(x: np.ndarray, visible: np.ndarray | None = None) -> list[str]:
    return ["null" if visible is not None and not visible[i] else "%.6g" % v for i, v in enumerate(x.tolist())]


EDGES = [
    0.0, -0.0, 1.0, -1.0, 0.5, 1e6, 999999.5, 999999.49999, 999999.50001, 9999995.0, 99999.95, 100000.0,
    123456.5, 1234565.0, 1.234375, 2.5, 0.1, 0.3, 1e-4, 9.999995e-5, 9.9999949e-5, 1e-5, 0.000123456789,
    5e-324, 2.2250738585072014e-308, 1e-300, 1e-301, 1e-310, 9.9999995e299, 1e300, 1e301, 1.7976931348623157e308,
    1e16, 1e22, 1e23, 3.0000000000000004, 0.30000000000000004, 1 / 3, 2 / 3, 7e-5, 6.5e-5,
]


def test_edge_values_match_printf():
    x = np.array(EDGES + [-v for v in EDGES])
    assert _texts(x) == _expected(x)


def test_every_magnitude_and_random_bits_match_printf():
    rng = np.random.default_rng(12)
    with np.errstate(over="ignore"):
        wide = rng.standard_normal(200_000) * 10.0 ** rng.integers(-320, 309, 200_000)
    parts = [
        wide,
        rng.random(200_000) ** 8,  # softmax weights: many tiny values
        *(np.round(rng.standard_normal(20_000) * 1e4, d) for d in range(9)),  # short decimals: ties, zeros
        rng.integers(-10**9, 10**9, 100_000).astype(float),
        np.frombuffer(rng.bytes(8 * 200_000), np.float64),  # any bit pattern
    ]
    for x in parts:
        x = x[np.isfinite(x)]
        got, want = _texts(x), _expected(x)
        bad = [(v, g, w) for v, g, w in zip(x.tolist(), got, want) if g != w]
        assert len(got) == len(x) and not bad[:5]


def test_exact_ties_round_half_even_like_printf():
    # x = (2n + 1) / 2 * 10^k with 7 significant digits: an exact binary tie only when
    # representable, e.g. 1.234375 = 79/64; check a dense set of dyadic rationals
    x = np.arange(1, 200_001, dtype=np.float64) / 64.0 + 100000.0 / 64.0
    assert _texts(x) == _expected(x)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=50))
def test_hypothesis_floats_match_printf(values):
    x = np.array(values, dtype=np.float64)
    assert _texts(x) == _expected(x)


def test_masked_cells_are_null():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(5000)
    visible = rng.random(5000) < 0.5
    assert _texts(x, visible) == _expected(x, visible)


def test_masked_cells_may_hold_anything(recwarn):
    x = np.array([np.nan, 1.5, np.inf, -np.inf, 0.0])
    visible = np.array([False, True, False, False, True])
    assert _texts(x, visible) == ["null", "1.5", "null", "null", "0"]
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_row_text_marks_rows():
    a = np.array([[1.0, 0.25, -3e-7], [0.0, 1e6, 12.5]])
    vis = np.array([[True, False, True], [True, True, True]])
    assert numtext.row_text(a, vis) == b"\n1,null,-3e-07\n0,1e+06,12.5"


def _write(rows: document.Rows) -> str:
    buf = io.StringIO()
    document._write_value(rows, buf.write, "  ")
    return buf.getvalue()


def test_document_text_is_identical_on_both_paths(monkeypatch):
    """The same matrix through Python's formatting and through numtext, in several pieces."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((37, 29)) * 10.0 ** rng.integers(-6, 7, (37, 29))
    mask = np.tril(np.ones((37, 29), dtype=bool))
    mask[5] = False  # a row with every key hidden
    for m in (None, mask):
        monkeypatch.setattr(document, "VECTORISED_FROM", 10**12)
        slow = _write(document.Rows(a, m))
        monkeypatch.setattr(document, "VECTORISED_FROM", 0)
        monkeypatch.setattr(document, "_CHUNK", 100)  # several rows per piece, several pieces
        monkeypatch.setattr(document, "_THREADS", 3)  # formatted by three threads, written in order
        fast = _write(document.Rows(a, m))
        assert fast == slow
        assert json.loads(fast) == json.loads(slow)
