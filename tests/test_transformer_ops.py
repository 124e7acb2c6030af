"""The NumPy pieces of the pretrained forward passes against math and torch (float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import needed

from attncli.transformer import ops

GRID = np.concatenate([np.linspace(-40, 40, 100_001), [0.0, -0.0, 2.0, -2.0, 1.9999999999, 2.0000000001, 1e-300, 1e300]])


def test_erf_matches_math_erf_everywhere():
    want = np.array([math.erf(v) for v in GRID])
    assert np.abs(ops.erf(GRID) - want).max() < 2e-15
    assert ops.erf(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    assert ops.erf(np.zeros((2, 3))).shape == (2, 3)


def test_activations_match_torch():
    torch = needed("torch")
    x = GRID[np.abs(GRID) < 30]
    t = torch.from_numpy(x)
    F = torch.nn.functional
    assert np.abs(ops.gelu(x) - F.gelu(t).numpy()).max() < 1e-14
    assert np.abs(ops.gelu_new(x) - F.gelu(t, approximate="tanh").numpy()).max() < 1e-13
    assert np.abs(ops.silu(x) - F.silu(t).numpy()).max() < 1e-13
    assert np.abs(ops.relu(x) - F.relu(t).numpy()).max() == 0


def test_layer_norm_matches_torch():
    torch = needed("torch")
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(2, 5, 8)) * 3, rng.normal(size=8), rng.normal(size=8)
    want = torch.nn.functional.layer_norm(torch.from_numpy(x), (8,), torch.from_numpy(w), torch.from_numpy(b), 1e-12)
    assert np.abs(ops.layer_norm(x, w, b, 1e-12) - want.numpy()).max() < 1e-13


def test_masked_keys_get_exactly_zero_and_rows_sum_to_one():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 3, 4, 5)) for _ in range(3))  # (B, h, T, d_head)
    mask = np.array([[True, True, True, True], [True, True, False, False]])  # text 2 is padded
    allowed = ops.key_mask(mask, causal=True)  # (B, 1, T, T)
    assert allowed.shape == (2, 1, 4, 4)
    context, weights = ops.attention(q, k, v, 0.5, allowed)
    assert context.shape == (2, 3, 4, 5) and weights.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-15)
    assert np.all(weights[:, :, np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0.0)
    assert np.all(weights[1, :, :2, 2:] == 0.0)  # no real query sees padding
    assert np.all(weights[1, :, 3, 2] == 0.0) and np.all(weights[1, :, 2:, 2:].diagonal(0, -2, -1) > 0)  # padding: itself only
    assert weights[0, 0, 0, 0] == 1.0
    s = q[0, 1] @ k[0, 1].T * 0.5
    s = np.where(np.tril(np.ones((4, 4), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(weights[0, 1], e / e.sum(-1, keepdims=True), atol=1e-15)


def test_heads_split_and_merge_back():
    x = np.arange(2 * 3 * 8, dtype=float).reshape(2, 3, 8)  # (B, T, d)
    heads = ops.split_heads(x, 4)  # (B, h, T, d_head)
    assert heads.shape == (2, 4, 3, 2)
    np.testing.assert_array_equal(heads[1, 2, 0], x[1, 0, 4:6])
    np.testing.assert_array_equal(ops.merge_heads(heads), x)


def test_one_blas_thread_is_set_and_restored_and_changes_no_result(monkeypatch, tiny_bert_dir):
    from attncli.transformer import blas, load, numpy_backend

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    found = blas._openblas()
    if found is None:
        pytest.skip("NumPy's BLAS is not a bundled OpenBLAS: one_thread() does nothing")
    get, put = found
    put(2)
    with blas.one_thread():
        assert get() == 1
    assert get() == 2
    with blas.one_thread(enabled=False):
        assert get() == 2
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # the user's choice stands
    with blas.one_thread():
        assert get() == 2
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    model = load(str(tiny_bert_dir), backend="numpy")
    enc = model.encode("time flies like an arrow", "fruit flies like a banana")
    one = model.attentions(enc)
    monkeypatch.setattr(numpy_backend, "ONE_THREAD_TOKENS", 0)
    np.testing.assert_array_equal(model.attentions(enc), one)
