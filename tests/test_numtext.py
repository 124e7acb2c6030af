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
from conftest import needed

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


@pytest.mark.parametrize("window", [0, 1, 3, 5])
def test_local_attention_for_every_window_width(window):
    """Luong et al. 2015's local attention with D = --window (the other tests use D = 2, where
    sigma = D / 2 = 1 hides any slip in the Gaussian's 2 sigma^2): visible iff |j - i| <= D,
    score_ij = q_i . k_j / sqrt(d_k) - (j - i)^2 / (2 sigma^2), sigma = D / 2; with D = 0 only
    the query's own position is visible. Checked against torch, the formula written out here."""
    torch = needed("torch")
    from attncli.attention.variants import VariantConfig, attend, init_params

    rng = np.random.default_rng(window)
    t, s, d = 7, 9, 6
    q, k, v = rng.standard_normal((t, d)), rng.standard_normal((s, d)), rng.standard_normal((s, d))
    res = attend("local", q, k, v, params=init_params("local", d, d, seed=0, config=VariantConfig(local_window=window)))
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
    dist = (torch.arange(s)[None, :] - torch.arange(t)[:, None]).double()  # (t, s): j - i
    sigma = window / 2
    penalty = dist**2 / (2 * sigma**2) if window else torch.zeros_like(dist)
    scores = (tq @ tk.T) / d**0.5 - penalty  # (t, s)
    weights = torch.softmax(scores.masked_fill(dist.abs() > window, float("-inf")), dim=-1)
    np.testing.assert_allclose(res.weights, weights.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.output, (weights @ tv).numpy(), rtol=1e-10, atol=1e-12)
    assert res.mask.tolist() == (dist.abs() <= window).tolist()


def test_compare_labels_join_the_two_sides_only_where_they_differ():
    """A cell's label is the shared token, or "a/b" where the two texts differ there (the drawing's
    row and column labels); the delta is B - A, worked by hand."""
    from attncli.attention.compare import compare

    c = compare(np.eye(2), np.full((2, 2), 0.5), ["time", "flies"], ["fruit", "flies"], ["x", "y"], ["x", "z"])
    assert c.labels == ["time/fruit", "flies"]
    assert c.key_labels == ["x", "y/z"]
    assert c.delta.tolist() == [[-0.5, 0.5], [0.5, -0.5]]


def test_compare_json_document_has_its_documented_keys():
    """docs/beyond-weights.md: {"unit", "align", "cropped", "a": {..., tokens, key_tokens, weights},
    "b": {...}, "delta", "delta_max_abs"}; each side keeps what made it (its text, model, ...)."""
    from attncli.attention.compare import compare, document

    c = compare(np.eye(2), np.full((3, 3), 0.25), ["a", "b"], ["a", "c", "d"], ["a", "b"], ["a", "c", "d"],
                align="position")
    doc = document(c, {"text": "a b"}, {"text": "a c d"}, "tokens")
    assert doc["a"] == {"text": "a b", "tokens": ["a", "b"], "key_tokens": ["a", "b"], "weights": [[1.0, 0.0], [0.0, 1.0]]}
    assert doc["b"] == {"text": "a c d", "tokens": ["a", "c"], "key_tokens": ["a", "c"],
                        "weights": [[0.25, 0.25], [0.25, 0.25]]}
    assert (doc["unit"], doc["align"], doc["cropped"]) == ("tokens", "position", True)
    assert doc["delta"] == [[-0.75, 0.25], [0.25, -0.75]] and doc["delta_max_abs"] == 0.75


def test_compare_of_equal_shapes_is_not_cropped_and_refusals_say_why():
    """Same shapes: aligned as they are, "cropped": false in the JSON (not null); the refusals name
    the rows' unit (tokens unless told) and the two --align choices."""
    from attncli.attention.compare import compare, document
    from attncli.errors import BadInput

    c = compare(np.eye(3), np.eye(3)[::-1], list("abc"), list("abc"), list("abc"), list("abc"))
    assert c.align == "same" and c.cropped is False
    assert document(c, {}, {}, "tokens")["cropped"] is False
    with pytest.raises(BadInput, match=r"2 and 3 tokens \(rows\)"):
        compare(np.eye(2), np.eye(3), list("ab"), list("abc"), list("ab"), list("abc"))
    with pytest.raises(BadInput, match=r"2 and 3 words \(rows\)"):
        compare(np.eye(2), np.eye(3), list("ab"), list("abc"), list("ab"), list("abc"), unit="words")
    with pytest.raises(BadInput, match="--align 'diagonal': choose same or position"):
        compare(np.eye(2), np.eye(2), list("ab"), list("ab"), list("ab"), list("ab"), align="diagonal")


def test_compare_of_empty_matrices_has_a_zero_largest_difference():
    """Nothing to compare (0 x 0): delta_max_abs is 0, not an error from max() of nothing."""
    from attncli.attention.compare import compare, document

    doc = document(compare(np.zeros((0, 0)), np.zeros((0, 0)), [], [], [], []), {}, {}, "tokens")
    assert doc["delta"] == [] and doc["delta_max_abs"] == 0.0


def test_max_flow_refuses_a_source_that_is_the_sink():
    """A flow from a node to itself has no meaning (not infinity, not 0): refused with a message."""
    from attncli.attention.flow import max_flow

    with pytest.raises(ValueError, match="^the source is the sink$"):
        max_flow(np.array([[0.0, 1.0], [0.0, 0.0]]), 1, 1)


def test_variant_weights_are_drawn_with_variance_one_over_fan_in():
    """The variants' own weights are N(0, 1/fan_in) draws (variants._normal: a product with a
    vector keeps its typical length): additive's W_1 (d_a x d_k) and v (d_a), multiplicative's W,
    relative's a^K, a^V tables; with fan_in = 1 the draws are N(0, 1). The sample standard
    deviation of thousands of seeded draws is within a few percent of 1 / sqrt(fan_in)."""
    from attncli.attention.variants import VariantConfig, init_params

    def close(draws, fan_in):
        return abs(np.std(draws) * np.sqrt(fan_in) - 1.0) < 0.05

    additive = init_params("additive", 64, 64, seed=1, config=VariantConfig())
    assert close(additive["W_1"], 64) and close(additive["W_2"], 64)
    assert close(init_params("multiplicative", 64, 64, seed=1, config=VariantConfig())["W"], 64)
    relative = init_params("relative", 1, 1, seed=1, config=VariantConfig(max_relative=2000))  # 4001 rows
    assert relative["a_K"].shape == (4001, 1) and close(relative["a_K"], 1) and close(relative["a_V"], 1)


def test_additive_scores_every_row_when_the_queries_outnumber_two_row_blocks():
    """additive works through the queries in blocks of rows (to keep its (rows, S, d_a) tanh
    block small): with 500 keys of 40 dimensions a block is 100 rows, and 250 queries take three
    blocks, the last one short. Every score still equals torch's v^T tanh(W_1 q_i + W_2 k_j)."""
    torch = needed("torch")
    from attncli.attention.variants import VariantConfig, attend, init_params

    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((250, 40)), rng.standard_normal((500, 40))
    p = init_params("additive", 40, 40, seed=0, config=VariantConfig())
    res = attend("additive", q, k, k, params=p)
    W_1, W_2, v = (torch.tensor(p[n]) for n in ("W_1", "W_2", "v"))
    scores = torch.tanh((torch.tensor(q) @ W_1.T)[:, None, :] + (torch.tensor(k) @ W_2.T)[None]) @ v  # (250, 500)
    np.testing.assert_allclose(res.scores, scores.numpy(), rtol=1e-10, atol=1e-12)


def test_cosine_uses_the_scale_it_is_given():
    """cosine's beta is sqrt(d_k) unless set (--cosine-scale): a set beta multiplies torch's
    cosine similarity, e.g. beta = 3 on 8 dimensions (sqrt(8) would be 2.83)."""
    torch = needed("torch")
    from attncli.attention.variants import VariantConfig, attend, init_params

    rng = np.random.default_rng(9)
    q, k = rng.standard_normal((4, 8)), rng.standard_normal((5, 8))
    p = init_params("cosine", 8, 8, seed=0, config=VariantConfig(cosine_scale=3.0))
    assert p == {"scale": 3.0}
    cos = torch.nn.functional.cosine_similarity(torch.tensor(q)[:, None, :], torch.tensor(k)[None, :, :], dim=-1)
    np.testing.assert_allclose(attend("cosine", q, k, k, params=p).scores, 3.0 * cos.numpy(), rtol=1e-12, atol=1e-12)


def test_cosine_of_zero_and_short_queries_and_keys():
    """Cosine attention normalises every query and key, whatever its length (0.5 and 0.3 here,
    below 1), and a zero query or key has cosine 0 with everything (no NaN): the scores equal
    beta times torch's cosine similarity."""
    torch = needed("torch")
    from attncli.attention.variants import VariantConfig, attend, init_params

    rng = np.random.default_rng(11)
    q, k = rng.standard_normal((5, 8)), rng.standard_normal((6, 8))
    q[1], k[2] = 0.0, 0.0
    q[3] *= 0.5 / np.linalg.norm(q[3])
    k[4] *= 0.3 / np.linalg.norm(k[4])
    p = init_params("cosine", 8, 8, seed=0, config=VariantConfig())
    cos = torch.nn.functional.cosine_similarity(torch.tensor(q)[:, None, :], torch.tensor(k)[None, :, :], dim=-1)
    want = np.sqrt(8) * cos.numpy()  # (5, 6)
    assert want[1].tolist() == [0.0] * 6 and want[:, 2].tolist() == [0.0] * 5
    np.testing.assert_allclose(attend("cosine", q, k, k, params=p).scores, want, rtol=1e-12, atol=1e-12)


def test_multihead_reports_each_heads_scores_and_their_mean():
    """multihead's head_scores (h, T, S) are Q_i K_i^T / sqrt(d_k / h) on the i-th column blocks
    (Vaswani et al. 2017, 3.2.2), and its scores are their mean over the heads: from torch."""
    torch = needed("torch")
    from attncli.attention.variants import VariantConfig, attend, init_params

    rng = np.random.default_rng(13)
    q, k = rng.standard_normal((4, 8)), rng.standard_normal((6, 8))
    res = attend("multihead", q, k, k, params=init_params("multihead", 8, 8, seed=0, config=VariantConfig(heads=2)))
    tq, tk = torch.tensor(q).reshape(4, 2, 4).transpose(0, 1), torch.tensor(k).reshape(6, 2, 4).transpose(0, 1)
    head_scores = tq @ tk.transpose(1, 2) / 2.0  # (2, 4, 6): sqrt(8 / 2) = 2
    np.testing.assert_allclose(res.head_scores, head_scores.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.scores, head_scores.mean(dim=0).numpy(), rtol=1e-12, atol=1e-12)


def test_an_unknown_variant_names_every_choice():
    from attncli.attention.variants import get_variant
    from attncli.errors import BadInput

    with pytest.raises(BadInput) as caught:
        get_variant("nope")
    assert str(caught.value) == ("unknown variant 'nope': choose one of dot, scaled, additive, multiplicative, "
                                 "cosine, multihead, relative, local (see 'attn variants')")


def test_a_variants_weights_are_the_same_for_the_same_seed_and_differ_for_another():
    from attncli.attention.variants import VariantConfig, init_params

    draw = lambda seed: init_params("multiplicative", 4, 4, seed=seed, config=VariantConfig())["W"]  # noqa: E731
    assert np.array_equal(draw(5), draw(5)) and not np.array_equal(draw(5), draw(6))


def test_compare_of_rectangular_matrices_names_rows_and_columns_apart():
    """Cross-attention matrices are not square: A (3, 5) and B (4, 2) are refused with each count
    in its place, and aligned by position to the first 3 rows and 2 columns of each."""
    from attncli.attention.compare import compare
    from attncli.errors import BadInput

    a, b = np.arange(15.0).reshape(3, 5), np.arange(8.0).reshape(4, 2)
    with pytest.raises(BadInput, match=r"the two have 3 and 4 tokens \(rows\) and 5 and 2 \(columns\).*the first 3 of each"):
        compare(a, b, list("abc"), list("abcd"), list("xyzuv"), list("pq"))
    c = compare(a, b, list("abc"), list("abcd"), list("xyzuv"), list("pq"), align="position")
    assert c.delta.tolist() == [[0.0, 0.0], [-3.0, -3.0], [-6.0, -6.0]] and c.key_labels == ["x/p", "y/q"]
