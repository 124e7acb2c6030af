"""The float32 passes of every NumPy family (BERT, RoBERTa, ELECTRA, DistilBERT, MPNet, GPT-2,
Llama; all-MiniLM-L6-v2, whose exact GELU runs ``ops.erf32``) against the float64 pass, within a
tolerance made from float32 rounding: a float32 dot product of n terms is within n u of the exact
one (u = 2^-24, the unit roundoff), the largest sums of a layer are d (attention, projections) and
d_ff (the MLP), and a layer's error adds to the ones before it. So the final norm's output and the
scores are within 4 (d + d_ff) (L + 1) u of their float64 values, relative to their largest
magnitude (4: a layer's two products in a row and its two norms), and a softmax moves no weight
more than its scores moved. And ``ops.erf32`` against ``math.erf``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")

U32 = 2.0 ** -24  # float32's unit roundoff
TEXTS = ["the cat sat on the mat and the dog sat on the log", "time flies like an arrow", "a"]
KEEP = ["blocks.*.attn.scores", "blocks.*.attn.pattern", "final_norm"]


def _model(request, kind: str):
    from attncli.hf import load

    tmp = request.getfixturevalue("tmp_path_factory")
    if kind in ("llama", "mpnet", "electra"):
        needed("torch")
        needed("transformers")
        if kind == "llama":
            from _llama_fixtures import build_decoder
            path = build_decoder(kind, tmp.mktemp(kind) / kind)
        elif kind == "mpnet":
            from _llama_fixtures import build_mpnet
            path = build_mpnet(tmp.mktemp(kind) / kind)
        else:
            from _transformer_fixtures import BUILDERS
            path = BUILDERS[kind](tmp.mktemp(kind) / kind)
    else:
        path = request.getfixturevalue(f"{kind}_dir")
    return load(str(path), backend="numpy")


def tolerance(model) -> float:
    """4 (d + d_ff) (L + 1) u: see the module's docstring."""
    c = model.config
    d = c.get("hidden_size") or c.get("n_embd") or c.get("dim")
    d_ff = c.get("intermediate_size") or c.get("n_inner") or c.get("hidden_dim") or 4 * d
    return 4 * (d + d_ff) * (model.layers + 1) * U32


@pytest.mark.parametrize("kind", ["tiny_bert", "tiny_roberta", "electra", "tiny_distilbert", "mpnet", "tiny_gpt2",
                                  "llama", "minilm"])
def test_the_float32_pass_is_within_float32_rounding_of_the_float64_pass(request, kind):
    model = _model(request, kind)
    encs = [model.encode(t, truncate=True) for t in TEXTS]
    want = model.trace_batch(encs, KEEP, precision="float64")
    got = model.trace_batch(encs, KEEP, precision="float32")
    tol = tolerance(model)
    for w, g in zip(want, got):
        h64, h32 = w["final_norm"], g["final_norm"]
        assert h32.dtype == np.float32 or model.arch.w.dtype == np.float32  # really another pass
        assert np.abs(h32 - h64).max() <= tol * np.abs(h64).max(), kind
        s64, s32 = w.stack("attn.scores", model.layers), g.stack("attn.scores", model.layers)  # (L, h, T, T)
        seen = np.isfinite(s64)
        assert (seen == np.isfinite(s32)).all()  # the same keys masked
        moved = np.abs(s32[seen] - s64[seen]).max()
        assert moved <= tol * np.abs(s64[seen]).max(), kind
        a64, a32 = w.stack("attn.pattern", model.layers), g.stack("attn.pattern", model.layers)
        assert np.abs(a32 - a64).max() <= moved + 8 * U32, kind  # softmax: no weight moves more than its scores


def test_erf32_is_within_float32_rounding_of_math_erf():
    from attncli.hf.kernels import ops

    x = np.concatenate([np.linspace(-8, 8, 200_001), np.geomspace(1e-30, 1e-2, 200)]).astype(np.float32)
    want = np.array([math.erf(float(v)) for v in x])
    got = ops.erf32(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    # 0.6 epsilons of approximation and 14 roundings of half an epsilon (ops.erf32's docstring): 8 epsilons
    assert np.abs(got - want).max() <= 8 * 2 * U32
    tiny = np.abs(x) < 1e-2  # near 0 erf is ~ 2x/sqrt(pi): relative, not absolute
    assert (np.abs(got[tiny] - want[tiny]) <= 8 * 2 * U32 * np.abs(want[tiny])).all()
    assert ops.erf32(np.array([np.inf, -np.inf], dtype=np.float32)).tolist() == [1.0, -1.0]
    assert np.isnan(ops.erf32(np.array([np.nan], dtype=np.float32))).all()


def test_gelu_of_float32_matches_torchs_exact_gelu_within_float32_rounding():
    torch = needed("torch")
    from attncli.hf.kernels import ops

    x = np.linspace(-12, 12, 40_001).astype(np.float32)
    want = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64))).numpy()
    got = ops.gelu(x)
    assert got.dtype == np.float32
    # erf32's 8 epsilons times x/2, and a few roundings of the product
    assert (np.abs(got - want) <= (8 * np.abs(x) / 2 + 4 * np.abs(want)) * 2 * U32 + 1e-45).all()


def test_gelu_new_of_float32_matches_torchs_tanh_gelu_within_float32_rounding():
    """GPT-2's gelu_new on float32 (its own in-place float32 order of operations) against torch's
    tanh GELU in float64: a few roundings of x/2 (1 + tanh(t)), each half an epsilon of the size of
    the terms (|x| and |x|/2 tanh'), and tanh's own (4 ulp): within 8 (|x| + |y|) u."""
    torch = needed("torch")
    from attncli.hf.kernels import ops

    x = np.linspace(-12, 12, 40_001).astype(np.float32)
    want = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64)), approximate="tanh").numpy()
    got = ops.gelu_new(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert (np.abs(got - want) <= 8 * (np.abs(x) + np.abs(want)) * U32 + 1e-45).all()
    assert ops.gelu_new(x.astype(np.float64)).dtype == np.float64
