"""The NumPy pieces of the pretrained forward passes against math and torch (float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import needed
from _tolerance import f32_atol

from attncli.hf.kernels import ops

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
    threadpoolctl = needed("threadpoolctl")
    from attncli.hf.kernels import blas
    from attncli.hf import load

    def threads() -> set[int]:
        return {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    for name in blas.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if not threads():
        pytest.skip("threadpoolctl finds no BLAS under this NumPy: one_thread() does nothing")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with blas.one_thread():
            assert threads() == {1}
        assert threads() == {2}
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # the user's choice stands
        with blas.one_thread():
            assert threads() == {2}
        monkeypatch.delenv("OPENBLAS_NUM_THREADS")
        model = load(str(tiny_bert_dir), backend="numpy")
        enc = model.encode("time flies like an arrow", "fruit flies like a banana")
        one = model.attentions(enc)
        monkeypatch.setattr(blas, "SMALL_ROWS", 0)
        monkeypatch.setattr(blas, "free_cores", lambda: 2)
        np.testing.assert_array_equal(model.attentions(enc), one)


def test_every_activation_name_computes_what_transformers_computes_under_that_name():
    """ACTIVATIONS maps transformers' ACT2FN names to NumPy functions: each, in float64, agrees with
    ACT2FN[name] (quick_gelu, x sigmoid(1.702 x), had no test at all)."""
    torch = needed("torch")
    activations = needed("transformers.activations")
    x = np.linspace(-12, 12, 4001)  # float64
    for name, fn in ops.ACTIVATIONS.items():
        want = activations.ACT2FN[name](torch.from_numpy(x)).numpy()
        # gelu_fast is the same tanh GELU with sqrt(2/pi) written as 0.7978845608: 1e-12 apart at |x| = 12
        atol = 2e-12 if name == "gelu_fast" else 1e-14
        np.testing.assert_allclose(fn(x), want, rtol=0, atol=atol, err_msg=name)


def test_quick_gelu_is_x_times_sigmoid_of_1_702_x():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    np.testing.assert_allclose(ops.quick_gelu(x), [v / (1 + math.exp(-1.702 * v)) for v in x], rtol=1e-15)


def test_erf_of_integers_and_float32_is_the_float64_erf():
    """The docstring: vectorised, float64. Integer and float32 inputs are computed in float64 (an
    integer array computed in its own dtype would truncate every value to 0 or 1)."""
    ints = np.array([0, 1, -1, 2, 3, -5])
    got = ops.erf(ints)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [math.erf(v) for v in ints], rtol=0, atol=2e-15)
    halves = np.array([0.1, 0.7, 1.3, 2.5, -4.2], dtype=np.float32)
    got = ops.erf(halves)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [math.erf(float(v)) for v in halves], rtol=0, atol=2e-15)


def test_gelu_keeps_float32_as_torch_does():
    """The numpy backend runs in float32; gelu returns the dtype it was given, as torch's F.gelu."""
    torch = needed("torch")
    x = np.linspace(-6, 6, 1001, dtype=np.float32)
    want = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    got = ops.gelu(x)
    assert got.dtype == want.dtype == np.float32
    assert (np.abs(got - want) <= f32_atol(1.0) * np.abs(x)).all()  # a few float32 operations, at each x's size


def test_linear_without_and_with_bias_is_torchs_linear():
    torch = needed("torch")
    rng = np.random.default_rng(3)
    x, w, b = rng.normal(size=(2, 3, 5)), rng.normal(size=(4, 5)), rng.normal(size=4)  # W (out, in)
    F = torch.nn.functional
    np.testing.assert_allclose(ops.linear(x, w, None), F.linear(torch.from_numpy(x), torch.from_numpy(w)).numpy(),
                               rtol=0, atol=1e-13)
    np.testing.assert_allclose(ops.linear(x, w, b),
                               F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)).numpy(),
                               rtol=0, atol=1e-13)


def test_conv1d_is_transformers_conv1d_with_a_nonzero_bias():
    """GPT-2's Conv1D (W stored (in, out)); the tiny test models are saved with zero biases, so a
    sign error on the bias only shows with a bias drawn here."""
    torch = needed("torch")
    pytorch_utils = needed("transformers.pytorch_utils")
    rng = np.random.default_rng(4)
    x, w, b = rng.normal(size=(2, 3, 5)), rng.normal(size=(5, 4)), rng.normal(size=4)
    layer = pytorch_utils.Conv1D(4, 5).double()
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(w))
        layer.bias.copy_(torch.from_numpy(b))
        want = layer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ops.conv1d(x, w, b), want, rtol=0, atol=1e-13)


def test_softmax_shifts_each_row_by_its_own_max():
    """Rows of very different size (one near 0, one near 1000, one of -inf with a finite entry):
    each row's own max is subtracted, so none underflows to 0/0; torch.softmax is the reference."""
    torch = needed("torch")
    scores = np.array([[0.0, -1.0, -2.0], [1000.0, 999.0, 990.0], [-np.inf, -800.0, -801.0]])
    got = ops.softmax(scores)
    want = torch.softmax(torch.from_numpy(scores), dim=-1).numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert got[2, 0] == 0.0
