"""The attention variants against independent references (torch, plain-Python loops) and their properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import needed

torch = needed("torch")
F = torch.nn.functional

from attncli.attention import masks  # noqa: E402
from attncli.attention.variants import VARIANTS, VariantConfig, attend, init_params, masked_softmax  # noqa: E402

T, S, D = 5, 7, 8


def _qkv(seed=0, t=T, s=S, d=D):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((t, d)), rng.standard_normal((s, d)), rng.standard_normal((s, d))


def _mask(name: str, t=T, s=S):
    """Masks that leave every row at least one key."""
    if name == "none":
        return None
    if name == "causal":
        return masks.causal(t, s)
    if name == "window":
        return masks.window(t, s, 1)
    if name == "padding":
        return masks.padding(t, s, s - 2)
    if name == "causal+window+padding":
        return masks.causal(t, s) & masks.window(t, s, 2) & masks.padding(t, s, s - 2)
    raise AssertionError(name)


MASKS = ["none", "causal", "window", "padding", "causal+window+padding"]


def _t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


def _torch_weights(scores: torch.Tensor, mask) -> torch.Tensor:
    if mask is not None:
        scores = scores.masked_fill(~torch.tensor(mask), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _params(name, d_k=D, d_v=D, seed=0, **cfg):
    return init_params(name, d_k, d_v, seed=seed, config=VariantConfig(**cfg))


@pytest.mark.parametrize("mask_name", MASKS)
def test_scaled_matches_torch_sdpa(mask_name):
    q, k, v = _qkv()
    mask = _mask(mask_name)
    res = attend("scaled", q, k, v, mask=mask, params={})
    tq, tk, tv = _t(q), _t(k), _t(v)
    attn_mask = None if mask is None else torch.tensor(mask)
    ref_out = F.scaled_dot_product_attention(tq[None], tk[None], tv[None], attn_mask=attn_mask)[0]
    ref_w = _torch_weights(tq @ tk.T / math.sqrt(D), mask)
    np.testing.assert_allclose(res.output, ref_out.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.weights, ref_w.numpy(), rtol=1e-10, atol=1e-12)


def test_scaled_causal_matches_sdpa_is_causal():
    q, k, v = _qkv(1, t=6, s=6)
    res = attend("scaled", q, k, v, mask=masks.causal(6, 6), params={})
    ref = F.scaled_dot_product_attention(_t(q)[None], _t(k)[None], _t(v)[None], is_causal=True)[0]
    np.testing.assert_allclose(res.output, ref.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mask_name", ["none", "causal"])
def test_dot_matches_torch(mask_name):
    q, k, v = _qkv(2)
    mask = _mask(mask_name)
    res = attend("dot", q, k, v, mask=mask, params={})
    w = _torch_weights(_t(q) @ _t(k).T, mask)
    np.testing.assert_allclose(res.weights, w.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.output, (w @ _t(v)).numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("mask_name", ["none", "causal", "padding"])
def test_multihead_matches_torch_multiheadattention(heads, mask_name):
    rng = np.random.default_rng(3)
    d, t = 8, 7
    x = rng.standard_normal((t, d))
    w_q, w_k, w_v, w_o = (rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(4))
    mask = _mask(mask_name, t, t)
    res = attend("multihead", x @ w_q, x @ w_k, x @ w_v, mask=mask, params={"heads": heads, "W_o": w_o})

    mha = torch.nn.MultiheadAttention(d, heads, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([_t(w_q).T, _t(w_k).T, _t(w_v).T]))  # torch computes x W^T
        mha.out_proj.weight.copy_(_t(w_o).T)
    blocked = None if mask is None else ~torch.tensor(mask)  # torch: True = not allowed
    tx = _t(x)[None]
    out, weights = mha(tx, tx, tx, attn_mask=blocked, need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(res.head_weights, weights[0].detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.output, out[0].detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.weights, weights[0].mean(dim=0).detach().numpy(), rtol=1e-9, atol=1e-12)


def test_multihead_cross_attention_matches_torch():
    rng = np.random.default_rng(4)
    d, h = 6, 3
    xq, xkv = rng.standard_normal((4, d)), rng.standard_normal((6, d))
    w_q, w_k, w_v, w_o = (rng.standard_normal((d, d)) for _ in range(4))
    res = attend("multihead", xq @ w_q, xkv @ w_k, xkv @ w_v, params={"heads": h, "W_o": w_o})
    mha = torch.nn.MultiheadAttention(d, h, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([_t(w_q).T, _t(w_k).T, _t(w_v).T]))
        mha.out_proj.weight.copy_(_t(w_o).T)
    out, weights = mha(_t(xq)[None], _t(xkv)[None], _t(xkv)[None], need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(res.head_weights, weights[0].detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.output, out[0].detach().numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mask_name", ["none", "causal+window+padding"])
def test_additive_matches_torch(mask_name):
    q, k, v = _qkv(5)
    mask = _mask(mask_name)
    p = _params("additive")
    res = attend("additive", q, k, v, mask=mask, params=p)
    a = _t(q) @ _t(p["W_1"]).T  # (T, d_a)
    b = _t(k) @ _t(p["W_2"]).T  # (S, d_a)
    scores = torch.tanh(a[:, None, :] + b[None, :, :]) @ _t(p["v"])  # (T, S)
    w = _torch_weights(scores, mask)
    np.testing.assert_allclose(res.scores, scores.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.weights, w.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.output, (w @ _t(v)).numpy(), rtol=1e-10, atol=1e-12)


def test_additive_row_blocks_do_not_change_the_result():
    # 300 x 300 keys forces several row blocks in the implementation
    q, k, v = _qkv(6, t=300, s=300, d=40)
    p = _params("additive", 40, 40)
    res = attend("additive", q, k, v, params=p)
    scores = torch.tanh((_t(q) @ _t(p["W_1"]).T)[:, None, :] + (_t(k) @ _t(p["W_2"]).T)[None]) @ _t(p["v"])
    np.testing.assert_allclose(res.scores, scores.numpy(), rtol=1e-10, atol=1e-12)


def test_multiplicative_matches_torch():
    q, k, v = _qkv(7)
    mask = _mask("causal")
    p = _params("multiplicative")
    res = attend("multiplicative", q, k, v, mask=mask, params=p)
    scores = torch.einsum("td,de,se->ts", _t(q), _t(p["W"]), _t(k))
    w = _torch_weights(scores, mask)
    np.testing.assert_allclose(res.weights, w.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.output, (w @ _t(v)).numpy(), rtol=1e-10, atol=1e-12)


def test_cosine_matches_torch_and_handles_zero_vectors():
    q, k, v = _qkv(8)
    k[2] = 0.0  # a zero key: cosine 0, not NaN
    p = _params("cosine")
    assert p["scale"] == pytest.approx(math.sqrt(D))
    res = attend("cosine", q, k, v, params=p)
    cos = F.cosine_similarity(_t(q)[:, None, :], _t(k)[None, :, :], dim=-1)  # (T, S)
    w = torch.softmax(p["scale"] * cos, dim=-1)
    np.testing.assert_allclose(res.weights, w.numpy(), rtol=1e-10, atol=1e-12)
    assert np.all(res.scores[:, 2] == 0.0)


def _relative_by_loops(q, k, v, a_k, a_v, clip, mask):
    """Shaw et al. 2018 eqs. 3-5, one pair at a time in plain Python."""
    t, s, d = len(q), len(k), q.shape[1]
    out, weights = np.zeros((t, v.shape[1])), np.zeros((t, s))
    for i in range(t):
        e = {}
        for j in range(s):
            if mask is None or mask[i, j]:
                r = max(-clip, min(clip, j - i)) + clip
                e[j] = sum(q[i, c] * (k[j, c] + a_k[r, c]) for c in range(d)) / math.sqrt(d)
        if not e:  # every key hidden: the row attends to nothing (weights and output 0)
            continue
        top = max(e.values())
        z = sum(math.exp(x - top) for x in e.values())
        for j, x in e.items():
            weights[i, j] = math.exp(x - top) / z
            r = max(-clip, min(clip, j - i)) + clip
            out[i] += weights[i, j] * (v[j] + a_v[r])
    return weights, out


@pytest.mark.parametrize("clip", [1, 3])
@pytest.mark.parametrize("mask_name", ["none", "causal", "window", "padding"])
@pytest.mark.parametrize("t,s", [(6, 6), (4, 7), (7, 3)])
def test_relative_matches_loops(clip, mask_name, t, s):
    q, k, v = _qkv(9, t=t, s=s)
    mask = _mask(mask_name, t, s)
    p = _params("relative", max_relative=clip)
    assert p["a_K"].shape == (2 * clip + 1, D)
    res = attend("relative", q, k, v, mask=mask, params=p)
    w, out = _relative_by_loops(q, k, v, p["a_K"], p["a_V"], clip, mask)
    np.testing.assert_allclose(res.weights, w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.output, out, rtol=1e-10, atol=1e-12)


def test_relative_clipping_makes_far_keys_share_a_table_row():
    # with identical keys, the scores of query 0 differ only by a^K: keys 1 and 4 are both
    # clipped to distance +1 with --max-relative 1, so they get the same score
    q = np.ones((5, 4))
    k = np.ones((5, 4))
    p = _params("relative", 4, 4, max_relative=1)
    res = attend("relative", q, k, k, params=p)
    assert res.scores[0, 1] == pytest.approx(res.scores[0, 4])
    assert res.scores[0, 0] != pytest.approx(res.scores[0, 1])


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding"])
@pytest.mark.parametrize("t,s", [(6, 6), (4, 7), (7, 5)])
def test_local_matches_loops(mask_name, t, s):
    """Window D = 2 around p_t = t, Gaussian sigma = D / 2 added to the score (Luong et al. 2015, local)."""
    q, k, v = _qkv(10, t=t, s=s)
    mask = _mask(mask_name, t, s)
    p = _params("local", local_window=2)
    res = attend("local", q, k, v, mask=mask, params=p)
    sigma = 1.0
    for i in range(t):
        e = {j: float(q[i] @ k[j]) / math.sqrt(D) - (j - i) ** 2 / (2 * sigma**2)
             for j in range(s) if abs(j - i) <= 2 and (mask is None or mask[i, j])}
        z = sum(math.exp(x) for x in e.values())
        out = sum((math.exp(x) / z * v[j] for j, x in e.items()), np.zeros(v.shape[1]))
        for j in range(s):
            assert res.weights[i, j] == pytest.approx(math.exp(e[j]) / z if j in e else 0.0, abs=1e-12)
        np.testing.assert_allclose(res.output[i], out, atol=1e-12)


def test_masked_softmax_is_stable_for_huge_scores():
    scores = np.array([[1e4, 1e4 - 1, -1e4], [1e300, 0.0, 5.0]])
    w = masked_softmax(scores, np.ones((2, 3), dtype=bool))
    assert np.isfinite(w).all()
    assert w[0, 0] == pytest.approx(1 / (1 + math.exp(-1)))
    assert w[1, 0] == 1.0


# --- properties over every variant x mask -------------------------------------------------------


def _run(name, mask, t=T, s=S):
    q, k, v = _qkv(11, t, s)
    return attend(name, q, k, v, mask=mask, params=_params(name, heads=2, local_window=3))


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("name", list(VARIANTS))
def test_rows_sum_to_one_and_masked_weights_are_exactly_zero(name, mask_name):
    mask = _mask(mask_name)
    res = _run(name, mask)
    assert res.weights.shape == (T, S) and res.output.shape == (T, D)
    assert np.isfinite(res.weights).all() and np.isfinite(res.output).all()
    np.testing.assert_allclose(res.weights.sum(axis=-1), 1.0, atol=1e-12)
    if mask is not None:
        assert np.all(res.weights[~mask] == 0.0)
        if res.head_weights is not None:
            assert np.all(res.head_weights[:, ~mask] == 0.0)
    assert np.all(res.weights[~res.mask] == 0.0)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_causal_upper_triangle_is_zero(name):
    res = _run(name, masks.causal(6, 6), 6, 6)
    assert np.all(np.triu(res.weights, k=1) == 0.0)
    assert np.all(np.diag(res.weights) > 0.0)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_row_with_every_key_masked_is_all_zero_not_nan(name):
    mask = np.ones((T, S), dtype=bool)
    mask[2] = False
    res = _run(name, mask)
    assert 2 in res.empty_rows
    assert np.all(res.weights[2] == 0.0) and np.all(res.output[2] == 0.0)
    assert np.isfinite(res.weights).all() and np.isfinite(res.output).all()
    other = [i for i in range(T) if i != 2]
    np.testing.assert_allclose(res.weights[other].sum(axis=-1), 1.0, atol=1e-12)


def test_window_must_be_positive():
    from attncli.errors import BadInput

    with pytest.raises(BadInput):
        masks.window(3, 3, 0)


def test_masks_combine_by_and():
    spec = masks.MaskSpec(causal=True, window=1, pad_to=5)
    m = masks.build(spec, 5, 5, n_real_keys=3)
    expected = np.array([[i >= j and i - j <= 1 and j < 3 for j in range(5)] for i in range(5)])
    assert np.array_equal(m, expected)
    assert masks.reasons(spec, 0, 4, 3) and not masks.reasons(spec, 2, 1, 3)


def test_masked_softmax_properties_on_random_masks():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import arrays

    @settings(max_examples=60, deadline=None)
    @given(st.integers(1, 6), st.integers(1, 6), st.data())
    def check(t, s, data):
        scores = data.draw(arrays(np.float64, (t, s), elements=st.floats(-1e6, 1e6)))
        mask = data.draw(arrays(np.bool_, (t, s)))
        w = masked_softmax(scores, mask)
        assert np.isfinite(w).all()
        assert np.all(w[~mask] == 0.0)
        full = mask.any(axis=1)
        np.testing.assert_allclose(w[full].sum(axis=1), 1.0, atol=1e-12)
        assert np.all(w[~full] == 0.0)

    check()


def test_multihead_with_biases_matches_torch():
    """A projection may fold torch's in_proj_bias into q, k, v and pass out_proj.bias as b_o."""
    rng = np.random.default_rng(12)
    d, h, t = 8, 2, 5
    x = rng.standard_normal((t, d))
    w_q, w_k, w_v, w_o = (rng.standard_normal((d, d)) for _ in range(4))
    b_in, b_o = rng.standard_normal(3 * d), rng.standard_normal(d)
    q, k, v = x @ w_q + b_in[:d], x @ w_k + b_in[d : 2 * d], x @ w_v + b_in[2 * d :]
    res = attend("multihead", q, k, v, mask=masks.causal(t, t), params={"heads": h, "W_o": w_o, "b_o": b_o})
    mha = torch.nn.MultiheadAttention(d, h, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([_t(w_q).T, _t(w_k).T, _t(w_v).T]))
        mha.in_proj_bias.copy_(_t(b_in))
        mha.out_proj.weight.copy_(_t(w_o).T)
        mha.out_proj.bias.copy_(_t(b_o))
    tx = _t(x)[None]
    out, weights = mha(tx, tx, tx, attn_mask=~torch.tensor(masks.causal(t, t)), need_weights=True,
                       average_attn_weights=False)
    np.testing.assert_allclose(res.head_weights, weights[0].detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.output, out[0].detach().numpy(), rtol=1e-9, atol=1e-12)
