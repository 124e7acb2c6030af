"""The numeric layer (attncli/numeric.py) against torch's own functions in float64 (softmax,
log_softmax, logsumexp, layer_norm, rms_norm, Categorical's entropy), its edge cases (a masked
entry exactly 0, an all-masked row all 0 and no NaN, a row with NaN or +inf left NaN, the dtype
kept, a tiny temperature), and that no other module of attn writes its own softmax or norm.

Tolerances: float64 rounding. exp(x - m) carries a relative error of about |x - m| eps (the
rounding of the subtraction, amplified by exp), a sum of S terms about log2(S) eps; the bound is
four times their sum."""

from __future__ import annotations

import ast
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import needed

import attncli
from attncli import numeric

EPS = np.finfo(np.float64).eps
PKG = Path(attncli.__file__).parent


def rtol(x: np.ndarray) -> float:
    """float64 bound for a softmax-like result of ``x`` (..., S): (spread + log2 S + 1) eps, x4."""
    finite = x[np.isfinite(x)]
    spread = float(finite.max() - finite.min()) if finite.size else 0.0
    return 4 * (spread + math.log2(x.shape[-1]) + 1) * EPS


@pytest.fixture
def torch():
    return needed("torch")


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning (overflow, 0/0, log 0) fails the test
        yield


def scores(*shape: int, scale: float = 3.0, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * scale


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("shape", [(7,), (3, 5, 11), (2, 4, 6, 300)])
def test_softmax_is_torch_softmax(torch, shape):
    x = scores(*shape)
    want = torch.softmax(torch.from_numpy(x), dim=-1).numpy()
    np.testing.assert_allclose(numeric.softmax(x), want, rtol=rtol(x), atol=0)


@pytest.mark.parametrize("temperature", [0.15, 0.7, 2.0, 3.0, 1000.0])
def test_softmax_with_a_temperature_is_torch_softmax_of_x_over_t(torch, temperature):
    x = scores(4, 50)
    want = torch.softmax(torch.from_numpy(x) / temperature, dim=-1).numpy()
    np.testing.assert_allclose(numeric.softmax(x, temperature), want, rtol=rtol(x / temperature), atol=0)


def test_a_masked_entry_is_exactly_zero_and_the_rest_is_torch_softmax(torch):
    x = scores(3, 6, 6)
    mask = np.tril(np.ones((6, 6), dtype=bool))  # causal: broadcast over the 3 heads
    got = numeric.softmax(x, mask=mask)
    want = torch.softmax(torch.from_numpy(x).masked_fill(torch.from_numpy(~mask), -math.inf), dim=-1).numpy()
    assert (got[:, ~mask] == 0.0).all()
    np.testing.assert_allclose(got, want, rtol=rtol(x), atol=0)
    np.testing.assert_array_equal(numeric.masked_softmax(x, mask), got)


def test_an_all_masked_row_is_all_zero_not_nan(no_warnings):
    x = scores(2, 3, 4)
    mask = np.array([[True, True, False, False], [False, False, False, False], [True, False, False, False]])
    got = numeric.softmax(x, mask=mask)  # (2, 3, 4)
    assert (got[:, 1] == 0.0).all()  # the row with no visible key
    np.testing.assert_array_equal(got[:, 2], [[1, 0, 0, 0]] * 2)  # one visible key: weight exactly 1
    np.testing.assert_allclose(got[:, 0].sum(axis=-1), 1.0, rtol=4 * EPS)
    minus = np.array([[-np.inf] * 3, [0.0, -np.inf, 1.0]])  # the same by -inf scores, without a mask
    got = numeric.softmax(minus)
    assert got[0].tolist() == [0.0, 0.0, 0.0] and got[1, 1] == 0.0
    np.testing.assert_allclose(got[1], [1 / (1 + math.e), 0.0, math.e / (1 + math.e)], rtol=4 * EPS)


def test_a_row_with_nan_or_plus_infinity_stays_nan():
    """Damage is not hidden: such a row is NaN (chunked_attention refuses it by ``check``); the
    other rows are untouched."""
    x = np.array([[0.0, np.nan, 1.0], [np.inf, 0.0, 1.0], [0.0, 1.0, 2.0]])
    with np.errstate(invalid="ignore"):
        got = numeric.softmax(x)
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all()
    np.testing.assert_allclose(got[2], numeric.softmax(x[2]), rtol=0)


def test_large_scores_do_not_overflow(no_warnings):
    """exp(1000) overflows: only differences from the row max are exponentiated."""
    got = numeric.softmax(np.array([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]]))
    total = 1 + math.exp(-1) + math.exp(-1000)
    np.testing.assert_allclose(got[0], [1 / total, math.exp(-1) / total, math.exp(-1000) / total], rtol=8 * EPS)
    np.testing.assert_allclose(got[1], got[0], rtol=8 * EPS)


def test_a_tiny_temperature_is_the_argmax_and_ties_share(no_warnings):
    tiny = 5e-324
    np.testing.assert_array_equal(numeric.softmax(np.array([0.1, 2.5, -3.0, 2.4]), tiny), [0, 1, 0, 0])
    np.testing.assert_array_equal(numeric.softmax(np.array([1.0, 1.0, -np.inf]), tiny), [0.5, 0.5, 0])


def test_the_dtype_is_kept(torch):
    x = scores(3, 40)
    for dtype in (np.float32, np.float64):
        assert numeric.softmax(x.astype(dtype)).dtype == dtype
        assert numeric.masked_softmax(x.astype(dtype), np.tril(np.ones((3, 40), dtype=bool))).dtype == dtype
    got32 = numeric.softmax(x.astype(np.float32))
    want = torch.softmax(torch.from_numpy(x.astype(np.float32)).double(), dim=-1).numpy()
    np.testing.assert_allclose(got32, want, rtol=rtol(x) * np.finfo(np.float32).eps / EPS, atol=0)
    assert numeric.log_softmax(x.astype(np.float32)).dtype == np.float32
    w = np.ones(40, dtype=np.float32)
    assert numeric.layer_norm(x.astype(np.float32), w, w, 1e-5).dtype == np.float32
    assert numeric.rms_norm(x.astype(np.float32), w, 1e-5).dtype == np.float32


def test_out_writes_in_place_and_check_sees_the_row_sums():
    x = np.array([[0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf]])
    want = numeric.softmax(x)
    seen = []
    y = x.copy()
    got = numeric.softmax(y, out=y, check=lambda total: seen.append(total.copy()))
    assert got is y
    np.testing.assert_array_equal(got, want)
    assert len(seen) == 1 and seen[0].shape == (2, 1)
    np.testing.assert_allclose(seen[0][:, 0], [1 + math.exp(-1), 0.0], rtol=4 * EPS)  # the max's term is 1; empty: 0


# ---------------------------------------------------------------- log-softmax, logsumexp


def test_log_softmax_and_logsumexp_are_torch_s(torch):
    x = scores(3, 5, 40)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(numeric.logsumexp(x), torch.logsumexp(t, dim=-1).numpy(), rtol=rtol(x), atol=0)
    got = numeric.log_softmax(x)
    want = torch.log_softmax(t, dim=-1).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol(x) * np.abs(want).max())
    np.testing.assert_allclose(np.exp(got), numeric.softmax(x), rtol=rtol(x) * np.abs(want).max(), atol=0)


def test_log_softmax_of_masked_entries_and_rows_is_minus_infinity(no_warnings):
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    got = numeric.log_softmax(x)
    assert got[0, 1] == -np.inf and got[1].tolist() == [-np.inf] * 3
    np.testing.assert_allclose(got[0, [0, 2]], [-math.log1p(math.e), 1 - math.log1p(math.e)], rtol=4 * EPS)
    assert numeric.logsumexp(x)[1] == -np.inf
    np.testing.assert_allclose(numeric.logsumexp(np.array([1000.0, 1000.0])), 1000 + math.log(2), rtol=4 * EPS)


# ---------------------------------------------------------------- entropy


def test_entropy_is_categorical_entropy(torch):
    p = numeric.softmax(scores(4, 7, 30))
    p[..., :5] = 0.0  # zeros: 0 log 0 = 0
    p /= p.sum(axis=-1, keepdims=True)
    want = torch.distributions.Categorical(probs=torch.from_numpy(p)).entropy().numpy()
    np.testing.assert_allclose(numeric.entropy(p), want, rtol=64 * EPS, atol=0)
    np.testing.assert_allclose(numeric.entropy(p, base=2), want / math.log(2), rtol=64 * EPS, atol=0)
    np.testing.assert_allclose(numeric.entropy(p, base=10), want / math.log(10), rtol=64 * EPS, atol=0)


def test_entropy_by_hand(no_warnings):
    assert numeric.entropy(np.full(4, 0.25), base=2) == 2.0  # uniform over 4: two bits
    assert numeric.entropy(np.array([0.0, 1.0, 0.0])) == 0.0  # one-hot: nothing, and no log 0
    np.testing.assert_allclose(numeric.entropy(np.array([[0.5, 0.5, 0.0]])), [math.log(2)], rtol=EPS)


# ---------------------------------------------------------------- norms


def test_layer_norm_is_torch_layer_norm(torch):
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(2, 5, 64)) * 3 + 7, rng.normal(size=64), rng.normal(size=64)
    for eps in (1e-12, 1e-5):
        want = torch.nn.functional.layer_norm(torch.from_numpy(x), (64,), torch.from_numpy(w), torch.from_numpy(b), eps)
        np.testing.assert_allclose(numeric.layer_norm(x, w, b, eps), want.numpy(), rtol=0, atol=64 * EPS * 10)
        s = torch.sqrt(torch.from_numpy(x).var(dim=-1, unbiased=False, keepdim=True) + eps).numpy()
        np.testing.assert_allclose(numeric.norm_scale(x, eps, centred=True), s, rtol=64 * EPS, atol=0)


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_rms_norm_is_torch_rms_norm(torch, offset):
    """offset 1: Gemma's (1 + weight)."""
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(3, 4, 48)) * 2 + 1, rng.normal(size=48)
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), (48,), torch.from_numpy(w + offset), 1e-6).numpy()
    got = numeric.rms_norm(x, w, 1e-6, offset) if offset else numeric.rms_norm(x, w, 1e-6)  # offset 0 by default
    np.testing.assert_allclose(got, want, rtol=0, atol=48 * EPS * 10)
    s = torch.sqrt((torch.from_numpy(x) ** 2).mean(dim=-1, keepdim=True) + 1e-6).numpy()
    np.testing.assert_allclose(numeric.norm_scale(x, 1e-6, centred=False), s, rtol=48 * EPS, atol=0)


# ---------------------------------------------------------------- one place

LAYER = re.compile(r"softmax|logsumexp|layer_norm|rms_norm|entropy", re.IGNORECASE)
MATH = {"exp", "log", "log2", "sqrt"}
# functions outside numeric.py that may compute such a thing themselves, with the reason
ALLOWED = {
    "attention/explain.py:softmax_steps": "--explain's worked steps: exp(score - max), the sum and the "
                                           "weight of one cell, each number shown to the reader and checked "
                                           "against the weights numeric.softmax gave",
    "attention/example.py:softmax_gradient_norm": "the norm of the softmax's Jacobian (attn scale), not a softmax",
}


def _called(node: ast.AST) -> set[str]:
    """The attributes called in ``node`` (np.exp, x.max, math.sqrt: exp, max, sqrt); builtins are not."""
    return {call.func.attr for call in ast.walk(node) if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)}


def own_numerics(where: str, source: str) -> list[str]:
    """What ``source`` computes itself that attncli/numeric.py holds: a function named like one of
    its functions that calls exp / log / sqrt (a thin wrapper that casts and calls numeric is fine);
    a softmax written inline (exp and a max in one function); a norm written inline (sqrt of a mean)."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        key = f"{where}:{fn.name}"
        if key in ALLOWED:
            continue
        calls = _called(fn)
        if LAYER.search(fn.name) and calls & MATH:
            found.append(f"{key} computes its own {fn.name}")
        elif "exp" in calls and calls & {"max", "amax"}:
            found.append(f"{key} writes a softmax inline (exp after a max)")
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "sqrt" \
                    and "mean" in _called(ast.Module(body=[ast.Expr(a) for a in call.args], type_ignores=[])):
                found.append(f"{key} writes a norm inline (sqrt of a mean)")
    return sorted(set(found))


def test_no_other_module_writes_its_own_softmax_or_norm():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        where = path.relative_to(PKG).as_posix()
        if where != "numeric.py":
            found += own_numerics(where, path.read_text(encoding="utf-8"))
    assert found == [], "use attncli/numeric.py (softmax, log_softmax, logsumexp, entropy, layer_norm, rms_norm)"
    assert all(path_fn.split(":")[0] and (PKG / path_fn.split(":")[0]).is_file() for path_fn in ALLOWED)


def test_the_check_finds_the_copies_it_replaced():
    """The forms the eight copies had before numeric.py: each is found."""
    copies = {
        "def softmax(scores):\n    e = np.exp(scores - scores.max(axis=-1, keepdims=True))\n    return e / e.sum()\n":
            "computes its own softmax",
        "def softmax_in_place(shifted):\n    np.exp(shifted, out=shifted)\n    return shifted\n": "computes its own",
        "def attend(self, q, k):\n    s = np.exp(scores - scores.max(axis=-1, keepdims=True))\n    return s / s.sum()\n":
            "softmax inline",
        "def metric(self, x):\n    top = x.max(axis=-1)\n    return x - np.log(np.exp(x - top).sum(axis=-1))\n":
            "softmax inline",
        "def rms_norm(x, w, eps):\n    return x / np.sqrt((x * x).mean(axis=-1) + eps) * w\n": "computes its own rms_norm",
        "def run(x, eps):\n    s = np.sqrt(((x - x.mean()) ** 2).mean() + eps)\n    return s\n": "norm inline",
        "def entropy_bits(p):\n    return -(p * np.log2(p)).sum(axis=-1)\n": "computes its own entropy_bits",
    }
    for source, what in copies.items():
        found = own_numerics("somewhere.py", source)
        assert any(what in f for f in found), (source, found)
    assert own_numerics("somewhere.py", "def softmax(z):\n    return numeric.softmax(np.asarray(z, dtype=float))\n") == []
