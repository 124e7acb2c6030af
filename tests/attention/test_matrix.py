"""The matrix request of word vectors (attncli.attention.matrix, projection, document): the head and
head-cell limits, the mask label and --pad-to checks, the additive variant's work limit, the
projections' registry and weights (variance 1/fan-in, W_o), and the JSON rows that refuse NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _attention_fixtures import VIEW_DIM, save_view_words
from conftest import needed

from attncli.attention import projection
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MAX_TOKENS, MatrixRequest, _heads, check_request, compute
from attncli.attention.projection import Projected
from attncli.errors import BadInput

SENTENCE = "time flies like an arrow"


@pytest.fixture
def tiny(attn_home):
    """The small word-vector model 'tiny' (tests/_attention_fixtures.py)."""
    return save_view_words("tiny")


# --- the matrix's heads and mask label -------------------------------------------------------------


def _projected(d_k: int, heads: int | None = None) -> Projected:
    z = np.zeros((1, d_k))
    return Projected(q=z, k=z, v=z, label="test", heads=heads)


def test_head_count_refusals_name_the_heads_they_were_given():
    with pytest.raises(BadInput) as caught:
        _heads(MatrixRequest(text="a", projection="trained"), _projected(8, heads=2), 1, 1)
    assert str(caught.value) == ("the trained projection has 2 heads: add --variant multihead, "
                                 "or pick one head with --head H")
    with pytest.raises(BadInput) as caught:  # 6 = d_k, so 4 heads do not divide it
        _heads(MatrixRequest(text="a", variant="multihead"), _projected(6), 1, 1)
    assert str(caught.value).startswith("the default of 4 heads does not divide the dimension (d_k = 6, d_v = 6)")
    with pytest.raises(BadInput) as caught:
        _heads(MatrixRequest(text="a", variant="multihead", heads=5), _projected(6), 1, 1)
    assert str(caught.value) == ("--heads 5 does not divide the dimension (d_k = 6, d_v = 6): "
                                 "try --heads with one of 1, 2, 3, 6")


def test_too_many_head_cells_are_refused_with_their_size_in_gib():
    # 5 heads x 4096 x 4096 = 83,886,080 float64 cells = 671,088,640 bytes = 0.625 GiB
    with pytest.raises(BadInput) as caught:
        _heads(MatrixRequest(text="a", variant="multihead", heads=5), _projected(10), 4096, 4096)
    assert str(caught.value) == ("--heads 5 on 4096 x 4096 tokens needs 83,886,080 cells per (heads, T, S) array "
                                 "(0.6 GiB each); attn matrix allows 67,108,864 (4 heads at 4,096 tokens): "
                                 "use fewer heads or a shorter text")


def test_local_variant_names_its_window_and_only_the_masks_added_to_it(tiny):
    """The title's mask: the local variant's window (default 2), then ' + ' and any mask added."""
    plain = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny))
    causal = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny, mask=MaskSpec(causal=True)))
    assert plain.mask_label() == "local window 2"
    assert causal.mask_label() == "local window 2 + causal"


def test_multihead_output_goes_through_the_random_projections_w_o(tiny):
    """--variant multihead --proj random: output = concat_h softmax(Q_h K_h^T / sqrt(d_k/h)) V_h @ W_o,
    W_o the projection's (random_weights); checked with torch from the projected Q, K, V."""
    torch = needed("torch")
    h, d_k, seed = 2, 6, 4
    res = compute(MatrixRequest(text=SENTENCE, variant="multihead", model=tiny, projection="random", d_k=d_k,
                                heads=h, seed=seed))
    Q, K, V = (torch.tensor(a, dtype=torch.float64) for a in (res.projected.q, res.projected.k, res.projected.v))
    T, dh = Q.shape[0], d_k // h
    split = lambda x: x.reshape(T, h, dh).transpose(0, 1)  # noqa: E731  (h, T, dh)
    heads = torch.softmax(split(Q) @ split(K).transpose(1, 2) / dh**0.5, dim=-1) @ split(V)  # (h, T, dh)
    w_o = torch.tensor(projection.random_weights(VIEW_DIM, d_k, seed)["W_o"])
    np.testing.assert_allclose(res.attention.output, (heads.transpose(0, 1).reshape(T, d_k) @ w_o).numpy(),
                               rtol=1e-10, atol=1e-12)


# --- projections -----------------------------------------------------------------------------------


def test_register_adds_a_projection_that_runs_its_function(monkeypatch):
    """projection.py's docstring: a projection is added with one line, ``register(name, fn, help)``;
    the kind runs ``fn`` and says whether it takes --d-k."""
    monkeypatch.setattr(projection, "PROJECTIONS", dict(projection.PROJECTIONS))
    seen = []

    def doubling(inp):
        seen.append(inp)
        return Projected(q=2 * inp.x_q, k=inp.x_kv, v=inp.x_kv, label="doubled")

    projection.register("doubled", doubling, "Q = 2 X", takes_d_k=True)
    projection.register("plain", doubling, "Q = 2 X")
    kind = projection.get_projection("doubled")
    assert (kind.name, kind.help, kind.takes_d_k) == ("doubled", "Q = 2 X", True)
    assert projection.get_projection("plain").takes_d_k is False
    x = np.eye(2)
    inp = projection.ProjectionInput(x_q=x, x_kv=x, words_q=x, words_kv=x, tokens=["a", "b"], key_tokens=["a", "b"],
                                     model=None)
    out = kind(inp)
    assert seen == [inp] and out.label == "doubled" and out.q.tolist() == [[2.0, 0.0], [0.0, 2.0]]


def test_random_projection_accepts_d_k_from_the_cli_and_refuses_beyond_4096(tiny):
    res = compute(MatrixRequest(text=SENTENCE, model=tiny, projection="random", d_k=5))
    assert res.projected.q.shape == (5, 5)
    for d_k in (0, 4097):
        with pytest.raises(BadInput, match=f"--d-k must be between 1 and 4096 \\(got {d_k}\\)"):
            compute(MatrixRequest(text=SENTENCE, model=tiny, projection="random", d_k=d_k))


def test_random_projection_draws_every_weight_with_variance_one_over_fan_in():
    """projection.py: W_q, W_k, W_v (d x d_k) and W_o (d_k x d_k) are drawn from N(0, 1/fan_in):
    on 16,384 draws each, the sample variance x fan_in lies within 5% of 1 (its standard error is
    about 1.1%)."""
    d, d_k = 64, 256
    w = projection.random_weights(d, d_k, seed=0)
    for name, fan_in in (("W_q", d), ("W_k", d), ("W_v", d), ("W_o", d_k)):
        assert float(np.var(w[name]) * fan_in) == pytest.approx(1.0, abs=0.05), name
        assert abs(float(np.mean(w[name]))) < 4 / math.sqrt(w[name].size * fan_in), name


# --- the JSON document's rows ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_rows_refuse_nan_and_infinity_and_say_why(bad):
    """document.py: NaN and infinity are refused (JSON has no such numbers), except where masked."""
    from attncli.attention.document import Rows

    with pytest.raises(ValueError) as caught:
        Rows(np.array([[0.5, bad]]))
    assert str(caught.value) == "a matrix holds NaN or infinity: refusing to write invalid JSON"
    assert list(Rows(np.array([[0.5, bad]]), np.array([[True, False]])).lines()) == ["[0.5,null]"]


def test_additive_work_limit_holds_at_its_bound():
    """--variant additive refuses more than 2**29 tanh terms (T * S * d_k) and allows exactly 2**29."""
    from attncli.attention.matrix import _check_work

    req = MatrixRequest(text="x", variant="additive")
    _check_work(req, 512, 512, 2048)  # 2**9 * 2**9 * 2**11 = 2**29
    with pytest.raises(BadInput, match=r"needs 537,395,200 tanh terms; attn matrix allows at most 536,870,912"):
        _check_work(req, 512, 512, 2050)
    _check_work(MatrixRequest(text="x", variant="scaled"), 512, 512, 4096)


def test_heads_range_includes_256():
    from attncli.attention.matrix import check_request

    check_request(MatrixRequest(text="x", variant="multihead", heads=256))
    with pytest.raises(BadInput, match=r"^--heads must be between 1 and 256 \(got 257\)$"):
        check_request(MatrixRequest(text="x", variant="multihead", heads=257))


# --- the matrix ----------------------------------------------------------------------------------


def test_multihead_allows_exactly_the_head_cell_limit():
    """4 heads on MAX_TOKENS x MAX_TOKENS tokens is the limit itself (4 x 4096 x 4096 cells): allowed."""
    z = np.zeros((1, 8))
    proj = Projected(q=z, k=z, v=z, label="test")
    assert _heads(MatrixRequest(text="a", variant="multihead", heads=4), proj, MAX_TOKENS, MAX_TOKENS) == 4
    with pytest.raises(BadInput):
        _heads(MatrixRequest(text="a", variant="multihead", heads=4), proj, MAX_TOKENS, MAX_TOKENS + 1)


def test_pad_to_below_one_is_refused_with_its_value():
    with pytest.raises(BadInput) as err:
        check_request(MatrixRequest(text="a b", mask=MaskSpec(pad_to=0)))
    assert str(err.value) == "--pad-to must be at least 1 (got 0)"


def test_json_settings_name_the_local_window(tiny):
    """--json's settings.local_window: the local variant's window (default 2); null for other variants."""
    from attncli.attention.document import document

    assert document(compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny)))["settings"]["local_window"] == 2
    assert document(compute(MatrixRequest(text=SENTENCE, variant="scaled", model=tiny)))["settings"]["local_window"] is None


def test_the_positional_scale_is_the_mean_length_of_the_first_1000_word_vectors():
    """docs/matrix.md's promise, standing alone (the tests' models have fewer than 1,000 words, so
    only the docs' example on the built-in model reached the cut): rows past the 1,000th do not count."""
    from types import SimpleNamespace

    from attncli.attention.matrix import typical_norm

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((1500, 8))
    rows[1000:] *= 100.0  # the rare words: far longer, and left out
    want = float(np.mean([np.sqrt(sum(x * x for x in row)) for row in rows[:1000]]))
    assert typical_norm(SimpleNamespace(vectors=rows)) == pytest.approx(want, rel=1e-12)
    assert typical_norm(SimpleNamespace(vectors=rows[:3])) == pytest.approx(
        float(np.mean([np.linalg.norm(r) for r in rows[:3]])), rel=1e-12)


@pytest.mark.parametrize("d", [6, 7])
def test_the_sinusoidal_encoding_is_vaswani_s_formula_for_even_and_odd_widths(d):
    import math

    from attncli.attention.matrix import sinusoidal

    want = [[math.sin(p / 10000 ** (i / d)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / d))
             for i in range(d)] for p in range(9)]
    np.testing.assert_allclose(sinusoidal(9, d), want, rtol=1e-12, atol=1e-15)
