"""Gradients through attn's NumPy decoders (attncli/hf/methods/backward.py) equal torch autograd through
transformers' own modules in float64, at every site both can name: the embeddings, each layer's
residual stream in and out, the attention block's and the MLP's outputs, each head's z (the output
projection's input) and the pattern; on GPT-2 and the Llama family (GQA, RoPE of three kinds,
biases, sliding windows, Gemma's offset norms, Phi-3's fused projections) and Gemma 3 (norms on q, k
and each sublayer's output, a RoPE and a window per layer kind, capped logits)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _trace_reference import assert_gradients_close, autograd_sites, d_log_p  # noqa: E402
from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward import DecoderTape, forward_together, gradients  # noqa: E402

TEXT = "the cat sat on the mat and the dog sat"
KINDS = ("gpt2", "llama", "llama-bias", "llama3", "mistral", "qwen2", "gemma", "phi3", "qwen3", "gemma3",
         "gemma3-capped")


def _blocks(ref):
    return ref.transformer.h if hasattr(ref, "transformer") else ref.model.layers


def _parts(block):
    """(the module whose output is attn.out, the one whose output is mlp.out, output projection) of a
    transformers decoder layer: Gemma 3's are the norms on the attention's and the MLP's outputs."""
    if hasattr(block, "attn"):
        return block.attn, block.mlp, block.attn.c_proj
    if hasattr(block, "post_feedforward_layernorm"):
        return block.post_attention_layernorm, block.post_feedforward_layernorm, block.self_attn.o_proj
    return block.self_attn, block.mlp, block.self_attn.o_proj


def autograd(path, ids, position, target):
    """{site: d log p(target) / d site} and the logits at ``position``, by torch autograd."""
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager",
                                                            dtype=torch.float64).eval()

    def hook_sites(keep):
        handles = []
        for l, block in enumerate(_blocks(ref)):
            attn, mlp, o = _parts(block)
            handles.append(block.register_forward_pre_hook(
                lambda m, args, kw, l=l: keep(f"blocks.{l}.resid_pre", (args[0] if args else kw["hidden_states"])),
                with_kwargs=True))
            handles.append(attn.register_forward_hook(lambda m, a, out, l=l: keep(
                f"blocks.{l}.attn.out", out if isinstance(out, torch.Tensor) else out[0])))
            handles.append(mlp.register_forward_hook(lambda m, a, out, l=l: keep(f"blocks.{l}.mlp.out", out)))
            handles.append(o.register_forward_pre_hook(lambda m, args, l=l: keep(f"blocks.{l}.attn.z", args[0])))
        return handles

    return autograd_sites(ref, ids, position, target, hook_sites)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    @functools.cache
    def get(kind):
        d = tmp_path_factory.mktemp(kind)
        if kind == "gemma3-capped":  # final_logit_softcapping of the size of its logits: the tanh bites
            return build_decoder("gemma3", d / kind, final_logit_softcapping=1.5)
        return every_parameter_drawn(build_gpt2(d / "base"), d / kind) if kind == "gpt2" else build_decoder(kind, d / kind)
    return get


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_equal_torch_autograd(built, kind):
    path = built(kind)
    model = load(str(path), backend="numpy")
    ids = model.encode(TEXT).ids
    position, target = len(ids) - 1, 7
    ours, logits = gradients(model, ids, position, d_log_p(target))
    want, want_logits = autograd(path, ids, position, target)
    # transformers computes RoPE's cos and sin in float32 even in a float64 model (its rotary
    # embedding casts inv_freq and the positions to float); attn's tape keeps them in float64: the
    # two differ by float32's rounding of the angles' sines, ~1e-7 relative
    rope = 0 if kind == "gpt2" else 64 * 2.0 ** -23
    np.testing.assert_allclose(logits, want_logits, rtol=1e-9 + rope, atol=1e-9 + rope)
    assert len(want) == 5 * model.layers
    assert_gradients_close(ours, want, atol=(1e-6 + 4 * rope))
    # the embeddings: what layer 0's stream gets
    first = want["blocks.0.resid_pre"]
    np.testing.assert_allclose(ours["embed"], first, rtol=0, atol=(1e-6 + 4 * rope) * max(1.0, np.abs(first).max()))


def test_encoders_are_refused_by_name(tiny_bert_dir):
    model = load(str(tiny_bert_dir), backend="numpy")
    with pytest.raises(BadInput, match="GPT-2 and the Llama family"):
        gradients(model, model.encode("a b").ids, 0, lambda x: x)


@pytest.mark.parametrize("kind", KINDS)
def test_passes_run_side_by_side_equal_each_pass_alone(built, kind):
    """forward_together stacks the texts' rows in each product: every kept activation, the logits and
    the backward equal the separate passes' (float64: the same sums in another batch, 1e-12)."""
    model = load(str(built(kind)), backend="numpy")
    texts = [model.encode(TEXT).ids, model.encode(TEXT).ids[::-1][:-1]]  # two texts, lengths T and T - 1
    alone = [DecoderTape(model) for _ in texts]
    for tape, ids in zip(alone, texts):
        tape.forward(ids)
    together = [DecoderTape(model) for _ in texts]
    forward_together(together, texts)
    for a, b in zip(alone, together):
        assert b.unembedding is together[0].unembedding  # widened once for both
        for la, lb in zip(a.layers, b.layers):
            for key in ("x", "q", "k", "v", "p", "z", "mid", "up", "post"):
                np.testing.assert_allclose(lb[key], la[key], rtol=0, atol=1e-12 * max(1.0, np.abs(la[key]).max()))
        pos = a.embed.shape[0] - 1
        np.testing.assert_allclose(b.logits(pos), a.logits(pos), rtol=0, atol=1e-10)
        d_logits = np.eye(model.config["vocab_size"])[7]
        ga, gb = a.backward(pos, d_logits), b.backward(pos, d_logits)
        for name in ga:
            scale = max(1.0, np.abs(ga[name]).max())
            np.testing.assert_allclose(gb[name], ga[name], rtol=0, atol=1e-12 * scale, err_msg=name)
