"""The attention variants' registry and numbers (attncli.attention.variants): local attention for
every window width against torch, weights drawn with variance 1/fan-in and reproduced by their seed,
the additive variant's row blocks, cosine's scale and its zero vectors, multi-head scores per head,
and an unknown variant refused with every choice."""

from __future__ import annotations


import numpy as np
import pytest
from conftest import needed

from attncli.errors import BadInput


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
