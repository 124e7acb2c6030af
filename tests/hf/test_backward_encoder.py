"""Gradients through attn's NumPy post-LN encoders and their MLM heads (attncli/hf/methods/backward_encoder.py)
equal torch autograd through transformers' BertForMaskedLM, RobertaForMaskedLM, DistilBertForMaskedLM
and MPNetForMaskedLM (its relative position bias) in float64, at
every site both can name: the embeddings, each layer's stream in, between and out, q, k, v, the
pattern, each head's z, the attention block's and the MLP's outputs; on tiny models with every
parameter drawn (so a LayerNorm's weight read as its bias, or a dropped bias, shows)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")
needed("tokenizers")

from _tolerance import f32_close  # noqa: E402
from _trace_reference import FAMILIES, _base, _get, drawn_mlm  # noqa: E402
from _trace_reference import assert_gradients_close, autograd_sites, d_log_p  # noqa: E402

from attncli.causal.target import Target, mask_position, vocab_id  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward_encoder import EncoderTape, gradients  # noqa: E402
from attncli.hf.methods.layer_weights import layer_weights  # noqa: E402

TEXT = "the cat sat on the [MASK] and the dog ."
KINDS = ("bert", "roberta", "distilbert", "mpnet")


def autograd(path, kind, ids, position, target):
    """{site: d log p(target) / d site} (per-text shapes) and the logits at ``position``, by torch autograd."""
    ref = transformers.AutoModelForMaskedLM.from_pretrained(str(path), attn_implementation="eager",
                                                            dtype=torch.float64).eval()
    fam = FAMILIES[kind]

    def hook_sites(keep):
        handles = []

        def on(module, name, where):
            if where == "in":
                handles.append(module.register_forward_pre_hook(
                    lambda m, args, kw: keep(name, args[0] if args else next(iter(kw.values()))), with_kwargs=True))
            else:
                handles.append(module.register_forward_hook(lambda m, a, out: keep(name, out)))

        for l, layer in enumerate(fam["layers"](ref)):
            on(layer, f"blocks.{l}.resid_pre", "in")
            on(layer, f"blocks.{l}.resid_post", "out")
            for name in "qkv":
                on(_get(layer, fam[name]), f"blocks.{l}.attn.{name}", "out")
            on(_get(layer, fam["o"]), f"blocks.{l}.attn.z", "in")
            on(_get(layer, fam["o"]), f"blocks.{l}.attn.out", "out")
            on(_get(layer, fam["mid"][0]), f"blocks.{l}.resid_mid", "out")
            on(_get(layer, fam["mlp"]), f"blocks.{l}.mlp.out", "out")
        on(_base(ref).embeddings, "embed", "out")
        return handles

    return autograd_sites(ref, ids, position, target, hook_sites)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    @functools.cache
    def get(kind):
        return drawn_mlm(kind, tmp_path_factory.mktemp(kind) / kind)
    return get


@pytest.mark.parametrize("kind", KINDS)
def test_encoder_gradients_equal_torch_autograd(built, kind):
    path = built(kind)
    model = load(str(path), backend="numpy")
    ids = model.encode(TEXT.replace("[MASK]", "<mask>") if kind in ("roberta", "mpnet") else TEXT).ids
    position, target = mask_position(model, ids), 7
    assert 0 < position < len(ids) - 1  # a read position inside the text: the other rows' gradients are not 0
    ours, logits = gradients(model, ids, position, d_log_p(target))
    want, want_logits = autograd(path, kind, ids, position, target)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-9, atol=1e-9)
    assert len(want) == 10 * model.layers + 1
    assert [name for name, g in want.items() if not np.abs(g).max() > 1e-6] == []  # every site is on the metric's path
    assert_gradients_close(ours, want, atol=1e-12)  # float64 against autograd's float64: 3e-15 seen
    np.testing.assert_array_equal(ours["final_norm"], ours[f"blocks.{model.layers - 1}.resid_post"])


def test_the_stream_splits_into_the_residual_the_qk_and_the_value_paths(built):
    """d resid_pre = d attn.out (the residual path into LN_1) + blocks.l.qk_in (through W_Q and W_K)
    + the value path (through W_V), with qk_in made of autograd-checked d q and d k."""
    model = load(str(built("bert")), backend="numpy")
    ids = model.encode(TEXT).ids
    grads, _ = gradients(model, ids, ids.index(vocab_id(model, "[MASK]")), lambda logits: np.eye(len(logits))[7])
    flat = lambda d: d.transpose(1, 0, 2).reshape(len(ids), -1)  # noqa: E731  (h, T, d_head) -> (T, h d_head)
    for l in range(model.layers):
        W = layer_weights(model.arch, l)
        qk = flat(grads[f"blocks.{l}.attn.q"]) @ W["q"][0].T + flat(grads[f"blocks.{l}.attn.k"]) @ W["k"][0].T
        np.testing.assert_allclose(grads[f"blocks.{l}.qk_in"], qk, rtol=0, atol=1e-12)
        v_path = flat(grads[f"blocks.{l}.attn.v"]) @ W["v"][0].T
        np.testing.assert_allclose(grads[f"blocks.{l}.resid_pre"], grads[f"blocks.{l}.attn.out"] + qk + v_path,
                                   rtol=0, atol=1e-12)
        assert np.abs(qk).max() > 1e-6


def test_an_encoder_without_its_mlm_head_is_refused_by_name(tiny_bert_dir):
    model = load(str(tiny_bert_dir), backend="numpy")
    with pytest.raises(BadInput, match="masked-language-model head"):
        gradients(model, model.encode("a b").ids, 0, lambda x: x)


def test_the_float32_tape_is_float64_within_float32_rounding(built):
    """The tape in float32 (a float32 pass's, as attribute runs it where the model's pass is float32):
    every site within float32 rounding of float64's (tests/_tolerance.py: the forward, the head and
    the backward, 2L + 2 layers deep; the widest reduction the vocabulary's)."""
    model = load(str(built("bert")), backend="numpy")
    ids = model.encode(TEXT).ids
    position = mask_position(model, ids)
    tapes = [EncoderTape(model, dtype) for dtype in (np.float64, np.float32)]
    grads = []
    for tape in tapes:
        tape.forward(ids)
        logits = tape.logits(position)
        grads.append(tape.backward(position, Target(position, 7, "t").gradient(logits)))
    assert tapes[1].layers[0]["q"].dtype == np.float32
    for name, g in grads[0].items():
        assert grads[1][name].dtype == np.float32, name
        f32_close(grads[1][name], g, depth=2 * model.layers + 2, length=model.vocab_size, what=name)
