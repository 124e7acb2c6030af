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
    testing runs each mutant in a process where they were already built; docs/contributing/mutation.md)."""
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
    document.write_value(rows, buf.write, "  ")
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


@pytest.fixture
def printf_calls(monkeypatch) -> list[int]:
    """How many numbers each call of ``cells`` handed to Python's own "%.6g" (the slow, exact path)."""
    calls: list[int] = []
    real = numtext._printf_cells

    def counting(b, x, where):
        calls.append(len(where))
        real(b, x, where)

    monkeypatch.setattr(numtext, "_printf_cells", counting)
    return calls


def _clear_of_ties(rng, exponents) -> np.ndarray:
    """Numbers m.f x 10^e with the 6-digit m anywhere in [100000, 999999] (both ends included) and
    a 7th digit and beyond f in [0.1, 0.4] or [0.6, 0.9]: never within 0.1 of a rounding tie, nor
    close to a power of ten, so their exponent and digits are plain (module docstring, step 3)."""
    parts = []
    for e in exponents:
        m = np.concatenate([[100000, 100001, 999998, 999999], rng.integers(100000, 1000000, 60)])
        f = rng.choice([0.1, 0.25, 0.4, 0.6, 0.75, 0.9], len(m))
        if e == numtext.E_HI:  # 999999.6e300 would carry to 1e+301, beyond the array path
            f[m == 999999] = 0.25
        x = (m + f) * 10.0 ** (e - 5)
        parts.append(np.where(rng.random(len(m)) < 0.5, -x, x))
    return np.concatenate(parts)


def test_numbers_clear_of_a_tie_never_take_pythons_formatting(printf_calls):
    """The module's promise: every number with an exponent in [-300, 300] goes through the array
    operations unless it lies next to a rounding tie (or its exponent was misjudged next to a power
    of ten); only those few, and subnormals, take one Python call each. A change that sends more
    numbers there prints the same text and loses the speed; this counts them."""
    rng = np.random.default_rng(24)
    exponents = [numtext.E_LO, numtext.E_LO + 1, -5, -4, -1, 0, 1, 4, 5, 6, numtext.E_HI - 1, numtext.E_HI]
    x = np.concatenate([_clear_of_ties(rng, exponents), [0.0, -0.0, 1.0, -10.0, 100.0, 0.5, 1e-300, 1e300]])
    assert _texts(x) == _expected(x)
    visible = rng.random(len(x)) < 0.7
    assert _texts(x, visible) == _expected(x, visible)
    assert printf_calls == [0, 0]


def test_near_ties_and_subnormals_take_pythons_formatting(printf_calls):
    """The other side: a number within 1e-7 of a 6-digit rounding tie, and every subnormal, is
    formatted by Python (the counts are of the numbers built to be such)."""
    x = np.array([1.234565, 2.5e-310, 5e-324, -1e-305, 1.5, 12.25])  # 1.234565: the 7th digit is a tie, in decimal
    assert _texts(x) == _expected(x)
    assert printf_calls == [4]


def test_numbers_just_below_1e_minus_300_round_up_to_it():
    """9.99999...e-301 has the decimal exponent -301, below the array path's range, and rounds up
    to 1e-300, inside it: printf's text is still what comes out (a mutant that judged such a number
    by its digits alone read the template of a key that does not exist)."""
    x = np.nextafter(1e-300, 0.0) - np.arange(0, 4000) * 1.25e-315  # (4000,) down from 1e-300 to ~9.99995e-301
    x = np.concatenate([x, -x, [9.999995e-301, 9.9999951e-301, 9.99999e-301, 9.5e-301]])
    assert _texts(x) == _expected(x)
    assert "1e-300" in _texts(x[:1]) and "9.99999e-301" in _expected(x)


