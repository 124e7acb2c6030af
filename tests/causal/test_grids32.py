"""The causal grids run GPT-2, BERT and MPNet in float32 (causal.grids.in_float32, the model's
float32_pass) and agree with the same grids computed by the float64 pass within float32 rounding
(tests/_tolerance.py, at the scale of the logits a grid entry is a difference of): ablation
(zero, and mean at one position) and patching of heads and of the residual stream, on tiny random
models with an MLM head for the encoders. The Llama family's pass is float32 already: its
float32_pass is the model itself."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")
torch = needed("torch")
needed("transformers")

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close  # noqa: E402
from _trace_reference import bias_gpt2, build_mlm  # noqa: E402
from _transformer_fixtures import SIZES  # noqa: E402
from attncli.causal import grids  # noqa: E402
from attncli.causal.target import Target, vocab_id  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention, site  # noqa: E402

DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])
KINDS = ("gpt2", "bert", "mpnet")
TEXT = {"gpt2": "the cat sat on the mat and the dog", "bert": "the cat sat on the [MASK] and the dog .",
        "mpnet": "the cat sat on the <mask> and the dog ."}
MASK = {"bert": "[MASK]", "mpnet": "<mask>"}


@functools.lru_cache(maxsize=None)
def _model(kind: str, root: str):
    from pathlib import Path

    d = Path(root) / kind
    if not d.exists():
        {"gpt2": bias_gpt2, "llama": lambda p: build_decoder("llama", p)}.get(kind, lambda p: build_mlm(kind, p))(d)
    return load(str(d), backend="numpy")


@pytest.fixture(scope="module")
def model_of(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("grids32"))
    return lambda kind: _model(kind, root)


def setup(model, kind):
    ids = model.encode(TEXT[kind]).ids
    pos = ids.index(vocab_id(model, MASK[kind])) if kind in MASK else len(ids) - 1
    bad = list(ids)
    bad[1], bad[3] = ids[3], ids[1]
    return ids, bad, Target(pos, 7, "x", 11, "y"), Target(pos, 7, "x")


def grid64(model, ids, target, per_layer):
    """The grid of interventions ``per_layer(l)`` from the float64 pass itself: clean_run and
    run_from on the model as loaded (neither goes through in_float32)."""
    tr, clean = grids.clean_run(model, ids, target, [])
    rows = [grids.run_from(model, ids, l, tr[site(l, "resid_pre")], per_layer(l), target) for l in range(model.layers)]
    return np.stack(rows), clean


def scale_of(model, ids, target) -> float:
    logits = model.trace(ids, "logits")["logits"] if model.is_decoder else \
        model.unembed(model.trace(ids, "final_norm")["final_norm"])
    return max(float(np.abs(logits).max()), abs(float(target.metric(logits[target.position]))))


@pytest.mark.parametrize("kind", KINDS)
def test_the_float32_pass_is_float32_and_shares_the_weights(model_of, kind):
    model = model_of(kind)
    fast = model.float32_pass()
    assert model.pass_dtype == np.float64 and fast.pass_dtype == np.float32
    assert fast is model.float32_pass() and fast.arch is model.arch32 and fast.tokenizer is model.tokenizer
    ids, _, target, _ = setup(model, kind)
    rows = fast.rerun(ids, 1, fast.trace(ids, "blocks.1.resid_pre")["blocks.1.resid_pre"], [[]], target.position)
    assert rows.dtype == np.float32 and fast.unembed(rows).dtype == np.float32


def test_the_llama_family_is_its_own_float32_pass(model_of):
    model = model_of("llama")
    assert model.pass_dtype == np.float32 and model.float32_pass() is model


@pytest.mark.parametrize("kind", KINDS)
def test_ablation_in_float32_equals_the_float64_pass(model_of, kind):
    model = model_of(kind)
    ids, _, diff, logp = setup(model, kind)
    means = grids.head_means(model, [model.encode("a dog and a cat").ids])
    for t in (diff, logp):
        scale = scale_of(model, ids, t)
        got = grids.ablate(model, ids, t)
        want, clean = grid64(model, ids, t, lambda l: [[Intervention(site(l, "attn.z"), "zero", head=h)]
                                                       for h in range(model.heads)])
        f32_close(got.clean, clean, depth=DEPTH, length=WIDTH, scale=scale, what="clean")
        f32_close(got.values, want - clean, depth=DEPTH, length=WIDTH, scale=scale, what="zero ablation")
        assert np.abs(want - clean).max() > 1e-3
        got = grids.ablate(model, ids, t, mode="mean", means=means, position=1)
        want, clean = grid64(model, ids, t, lambda l: [[Intervention(site(l, "attn.z"), "mean", head=h, position=1,
                                                                     value=means[l, h])] for h in range(model.heads)])
        f32_close(got.values, want - clean, depth=DEPTH, length=WIDTH, scale=scale, what="mean ablation")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["head", "resid"])
def test_patching_in_float32_equals_the_float64_pass(model_of, kind, where):
    model = model_of(kind)
    ids, bad, diff, _ = setup(model, kind)
    got = grids.patch(model, ids, bad, diff, where=where)
    name = grids.PATCH_SITES[where]
    clean_tr, clean = grids.clean_run(model, ids, diff, [f"blocks.*.{name}"])

    def per_layer(l):
        value = clean_tr[site(l, name)]
        if where == "head":
            return [[Intervention(site(l, name), "replace", head=h, value=value[:, h])] for h in range(model.heads)]
        return [[Intervention(site(l, name), "replace", position=t, value=value[t])] for t in range(len(ids))]

    patched, corrupt = grid64(model, bad, diff, per_layer)
    scale = scale_of(model, ids, diff)
    f32_close([got.clean, got.corrupt], [clean, corrupt], depth=DEPTH, length=WIDTH, scale=scale)
    # the restored fraction's numerator: a difference of metrics, compared at their scale
    f32_close(got.values * (got.clean - got.corrupt), patched - corrupt, depth=DEPTH, length=WIDTH, scale=scale)
    assert np.abs(patched - corrupt).max() > 1e-3
