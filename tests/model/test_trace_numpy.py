"""The traced NumPy pass (attncli/model/trace.py, record.py) against transformers run with
forward hooks on its own modules (tests/_trace_reference.py): every site of every layer, on tiny
random BERT (with its MLM head), DistilBERT, MPNet, GPT-2, Llama with grouped-query attention and
Qwen2, to 1e-5; interventions by name equal the same slice replaced by a hook; keep, rows and
start behave as trace.py says."""

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
from _transformer_fixtures import SIZES  # noqa: E402
from _trace_reference import bias_gpt2, build_mlm, hooked_logits, load_reference, reference_sites  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention, all_sites  # noqa: E402

torch.set_num_threads(1)
# the tiny models' float32 rounding (tests/_tolerance.py): their layers and their widest reduction
DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])
KINDS = ("bert", "distilbert", "mpnet", "gpt2", "llama", "qwen2")
TEXT = "the cat sat on the mat and the dog sat"


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("trace")

    @functools.lru_cache(maxsize=None)
    def get(kind):
        d = base / kind
        if kind in ("bert", "distilbert", "mpnet"):
            build_mlm(kind, d)
        elif kind == "gpt2":
            bias_gpt2(d)
        else:
            build_decoder(kind, d)
        return load(str(d), backend="numpy"), load_reference(d, kind)
    return get


@pytest.mark.parametrize("kind", KINDS)
def test_every_site_equals_transformers(models, kind):
    model, ref = models(kind)
    enc = model.encode(TEXT)
    tr = model.trace(enc, "*")
    want = reference_sites(ref, kind, enc.ids)
    names = all_sites(model.layers)
    assert set(tr) == set(names)
    for name in names:
        if name.endswith("attn.scores"):
            continue
        assert tr[name].shape == want[name].shape, name
        f32_close(tr[name], want[name], depth=DEPTH, length=WIDTH, what=name)
    for l in range(model.layers):  # the scores: q k^T * scale (+ MPNet's bias), their softmax the pattern
        scores = tr[f"blocks.{l}.attn.scores"]
        q, k = want[f"blocks.{l}.attn.q"], want[f"blocks.{l}.attn.k"]
        raw = q @ k.swapaxes(-1, -2) * model.scale(l)
        finite = np.isfinite(scores)
        if kind != "mpnet":
            f32_close(scores[finite], raw[finite], depth=DEPTH, length=WIDTH)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        f32_close(e / e.sum(-1, keepdims=True), want[f"blocks.{l}.attn.pattern"], depth=DEPTH, length=WIDTH)
        assert (~finite).any() == (kind in ("gpt2", "llama", "qwen2"))


@pytest.mark.parametrize("kind", KINDS)
def test_zeroing_a_heads_z_equals_a_pre_hook_on_the_output_projection(models, kind):
    model, ref = models(kind)
    ids = model.encode(TEXT).ids
    for l, h, pos in ((0, 1, None), (model.layers - 1, 2, 3)):
        iv = Intervention(f"blocks.{l}.attn.z", "zero", head=h, position=pos)
        got = model.trace(ids, "logits", interventions=[iv])["logits"]
        want = hooked_logits(ref, kind, ids, z={(l, h) if pos is None else (l, h, pos): 0.0})
        f32_close(got, want, depth=DEPTH, length=WIDTH)
        clean = model.trace(ids, "logits")["logits"]
        assert np.abs(clean - got).max() > 1e-3  # the head mattered: the check can fail


def test_keep_holds_only_what_is_named_and_rows_cut_the_pattern(models):
    model, _ = models("gpt2")
    ids = model.encode(TEXT).ids
    tr = model.trace(ids, ["blocks.1.attn.pattern", "blocks.0.resid_*"], rows=[0, 2])
    assert sorted(tr) == ["blocks.0.resid_mid", "blocks.0.resid_post", "blocks.0.resid_pre", "blocks.1.attn.pattern"]
    full = model.trace(ids, "blocks.1.attn.pattern")["blocks.1.attn.pattern"]
    np.testing.assert_array_equal(tr["blocks.1.attn.pattern"], full[:, [0, 2]])
    with pytest.raises(KeyError, match="not kept"):
        tr["blocks.1.attn.z"]
    assert len(model.trace(ids)) == 0


@pytest.mark.parametrize("kind", ("gpt2", "llama", "bert"))
def test_start_resumes_from_a_cached_stream(models, kind):
    model, _ = models(kind)
    ids = model.encode(TEXT).ids
    clean = model.trace(ids, ["blocks.*.resid_pre", "logits"])
    iv = Intervention("blocks.1.attn.z", "zero", head=0)
    full = model.trace(ids, "logits", interventions=[iv])["logits"]
    part = model.trace(ids, ["logits", "blocks.0.resid_pre"], interventions=[iv],
                       start=(1, clean["blocks.1.resid_pre"]))
    np.testing.assert_allclose(part["logits"], full, atol=1e-9, rtol=0)
    assert "blocks.0.resid_pre" not in part  # layer 0 never ran
    np.testing.assert_allclose(model.trace(ids, "logits", start=(0, clean["blocks.0.resid_pre"]))["logits"],
                               clean["logits"], atol=1e-9, rtol=0)


def test_replace_and_mean_take_a_value_and_bad_sites_are_refused(models):
    model, ref = models("llama")
    ids = model.encode(TEXT).ids
    other = list(ids)
    other[2], other[5] = ids[5], ids[2]  # another input of the same length
    donor = model.trace(other, "blocks.1.mlp.out")["blocks.1.mlp.out"]
    got = model.trace(ids, "logits", interventions=[Intervention("blocks.1.mlp.out", "replace", value=donor)])
    f32_close(got["logits"], hooked_logits(ref, "llama", ids, out={(1, "mlp"): donor}), depth=DEPTH, length=WIDTH)
    with pytest.raises(BadInput, match="layers 0..1"):
        model.trace(ids, interventions=[Intervention("blocks.7.attn.z", "zero", head=0)])
    with pytest.raises(BadInput, match="shape"):
        model.trace(ids, "logits", start=(1, donor[:3]))


def test_an_encoder_without_an_mlm_head_has_no_logits_and_says_so(tiny_bert_dir):
    model = load(str(tiny_bert_dir), backend="numpy")
    tr = model.trace(model.encode(TEXT), "blocks.0.attn.z")
    assert tr["blocks.0.attn.z"].shape[1:] == (model.heads, model.arch.d_head)
    with pytest.raises(BadInput, match="no masked-language-model head"):
        model.trace(model.encode(TEXT), "logits")


def test_generation_cache_still_matches_a_full_pass(models):
    for kind in ("gpt2", "llama"):
        model, _ = models(kind)
        ids = model.encode(TEXT).ids
        cache = model.new_cache()
        model.logits_and_attentions(ids[:4], cache)
        logits, att = model.logits_and_attentions(ids, cache)
        full_logits, full_att = model.logits_and_attentions(ids)
        f32_close(logits, full_logits, depth=DEPTH, length=WIDTH)  # Llama runs in float32
        f32_close(att, full_att, depth=DEPTH, length=WIDTH)
