"""--pool at hostile sizes (attncli.attention.long_view): the pooling's work grows with the
matrices' size, never with spans^2 x tokens^2 (a three-operand einsum took past 30 s for
--pool 20 on 1,600 tokens, hours for --pool 1), and a chunk size past a C int is refused at
every magnitude (attncli/rules/limits.py), never an OverflowError. No wall-clock assertion: the timeout markers (pytest-timeout) make the
old quadratic-in-spans path fail instead of hanging; bench/bench_bounded_work.py times it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attncli.attention import long_view as lvm
from attncli.cli.main import app

TEXT = "the bank was closed. we sat by the river bank. then home"


def brute_pool(mats, row_span, col_span):
    """Each cell by the docstring's formula, one span pair at a time."""
    qs, ks = sorted(set(row_span.tolist())), sorted(set(col_span.tolist()))
    out = np.zeros((len(mats), len(qs), len(ks)))
    for a, q in enumerate(qs):
        rows = np.flatnonzero(row_span == q)
        for b, k in enumerate(ks):
            cols = np.flatnonzero(col_span == k)
            out[:, a, b] = mats[:, rows][:, :, cols].sum(axis=2).mean(axis=1)
    return out


def test_pool_of_spans_in_any_order_is_the_formula():
    rng = np.random.default_rng(3)
    mats = rng.dirichlet(np.ones(9), size=(2, 6))  # (k=2, R=6, C=9)
    row_span, col_span = np.array([4, 1, 4, 1, 7, 4]), np.array([2, 0, 2, 5, 0, 5, 5, 2, 0])
    pooled, q, k = lvm.pool_matrices(mats, row_span, col_span)
    assert q == [1, 4, 7] and k == [0, 2, 5]
    assert np.allclose(pooled, brute_pool(mats, row_span, col_span), rtol=1e-12, atol=0)
    assert np.allclose(pooled.sum(axis=2), 1.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunk", [1, 20])
def test_pool_work_grows_with_the_matrix_not_with_the_spans(chunk):
    T = 1600
    rng = np.random.default_rng(0)
    mats = rng.random((2, T, T))  # (k, R, C): one head and the mean, as pool_view passes them
    ids = np.arange(T) // chunk
    pooled, q, k = lvm.pool_matrices(mats, ids, ids)
    assert pooled.shape == (2, len(q), len(k)) == (2, -(-T // chunk), -(-T // chunk))
    if chunk == 1:
        assert np.array_equal(pooled, mats)  # a span of one token is that token: summed alone, averaged alone
    else:
        a, b = 17, 61
        expect = mats[:, a * chunk:(a + 1) * chunk, b * chunk:(b + 1) * chunk].sum(axis=2).mean(axis=1)
        assert np.allclose(pooled[:, a, b], expect, rtol=64 * np.finfo(np.float64).eps)


def test_a_chunk_longer_than_the_text_is_one_span_and_one_past_the_c_int_is_refused():
    """The one rule for numbers (attncli/rules/limits.py): --pool N up to a C int runs (a chunk past the
    text's end is the whole text); past it, at every magnitude, it is refused with one line."""
    enc = SimpleNamespace(tokens=["a"] * 5)
    for n in (6, 2**31 - 1):
        assert lvm.parse_pool(str(n)) == n
        assert lvm.span_ids(n, enc).tolist() == [0] * 5
    from attncli.errors import BadInput

    for huge in (str(2**31), str(10**20), str(2**63), "9" * 5000, "0", "-1"):
        with pytest.raises(BadInput, match="--pool must be a whole number from 1 to 2,147,483,647"):
            lvm.parse_pool(huge)


def test_pool_with_a_huge_chunk_is_refused_on_the_command_line_at_every_magnitude(tiny_bert_dir):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    r = CliRunner().invoke(app, ["matrix", TEXT, "--transformer", str(tiny_bert_dir), "--json",
                                 "--pool", str(2**31 - 1)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["pool"]["spans"] == [0] and np.allclose(doc["pool"]["weights"], [[1.0]], atol=1e-6)  # fixed: a row's sum printed to 6 digits
    for huge in ("100000000000000000000", "9223372036854775808", "9" * 5000):
        cli_app._consoles.clear()
        r = CliRunner().invoke(app, ["matrix", TEXT, "--transformer", str(tiny_bert_dir), "--pool", huge])
        assert r.exit_code == 2 and "--pool must be a whole number" in r.stderr and "Traceback" not in r.stderr


def _enc(words):
    return SimpleNamespace(tokens=list(words), word_ids=list(range(len(words))), words=list(words),
                           segments=["a"] * len(words), special=[False] * len(words), text=" ".join(words), pair=None)


@settings(max_examples=200, deadline=None)
@given(spec=st.one_of(st.integers(min_value=-(10**30), max_value=10**30).map(str), st.text(max_size=30),
                      st.sampled_from(["sentence", " LINE ", "1e3", "0x10", "٣", "+7", "9" * 5000])),
       n=st.integers(min_value=1, max_value=40))
def test_any_pool_spec_is_a_span_map_or_a_refusal(spec, n):
    """Whatever --pool says: BadInput, or spans that cover every token in order, 0 first."""
    from attncli.errors import BadInput

    try:
        by = lvm.parse_pool(spec)
    except BadInput:
        return
    ids = lvm.span_ids(by, _enc(["word."] * n))
    assert len(ids) == n and ids[0] == 0 and np.all(np.diff(ids) >= 0) and np.all(np.diff(ids) <= 1)
