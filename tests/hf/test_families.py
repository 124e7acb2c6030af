"""Each model family (BERT, RoBERTa, ELECTRA, DistilBERT, GPT-2, Llama and its kin) in attn's NumPy
pass against transformers, on tiny models with every parameter drawn (tests/_transformer_fixtures.py),
and each family's config read as transformers reads it: defaults, stored LM heads, value vectors,
the KV cache, and the configurations refused."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _transformer_fixtures import PAIR_TEXTS, compare_with_transformers, every_parameter_drawn
from conftest import needed
from _tolerance import f32_close

from attncli.errors import BadInput, RuntimeFailure


# --- bert.py, distilbert.py, gpt2.py: every parameter drawn -------------------------------------
# The tiny models of _transformer_fixtures are saved as transformers initialises them: every bias
# 0 and every LayerNorm weight 1, so a dropped bias, a bias added with the wrong sign or a LayerNorm
# weight read as its bias goes unseen. Here each parameter is drawn, and the numpy backend is
# compared with transformers on the same directory (float64, eager attention).


def test_bert_with_every_parameter_drawn(tiny_bert_dir, tmp_path):
    compare_with_transformers(every_parameter_drawn(tiny_bert_dir, tmp_path / "bert", layer_norm_eps=1e-3), PAIR_TEXTS)


def test_roberta_with_every_parameter_drawn(tiny_roberta_dir, tmp_path):
    compare_with_transformers(every_parameter_drawn(tiny_roberta_dir, tmp_path / "roberta"), PAIR_TEXTS)


def test_electra_with_every_parameter_drawn(tmp_path):
    from _transformer_fixtures import build_electra

    electra = build_electra(tmp_path / "electra-init")
    compare_with_transformers(every_parameter_drawn(electra, tmp_path / "electra"), PAIR_TEXTS)


def test_distilbert_with_every_parameter_drawn(tiny_distilbert_dir, tmp_path):
    compare_with_transformers(every_parameter_drawn(tiny_distilbert_dir, tmp_path / "distilbert"), PAIR_TEXTS)


@pytest.mark.parametrize("changes", [dict(scale_attn_by_inverse_layer_idx=True, layer_norm_epsilon=1e-3),
                                     dict(scale_attn_weights=False), dict(tie_word_embeddings=False),
                                     dict(activation_function="relu")],
                         ids=["inverse-layer-idx", "unscaled", "untied-lm-head", "relu"])
def test_gpt2_with_every_parameter_drawn(tiny_gpt2_dir, tmp_path, changes):
    compare_with_transformers(every_parameter_drawn(tiny_gpt2_dir, tmp_path / "gpt2", **changes), (PAIR_TEXTS[0],))


def test_gpt2_reads_a_stored_lm_head_that_differs_from_wte_as_transformers_does(tiny_gpt2_dir, tmp_path):
    """A checkpoint with its own lm_head.weight and a config that ties it (tie_word_embeddings
    absent: true by default): transformers 5 keeps the stored head (it ties only equal values), so
    attn must too. (attn used wte here before this test: its logits differed from transformers'.)"""
    import json

    path = Path(every_parameter_drawn(tiny_gpt2_dir, tmp_path / "gpt2", tie_word_embeddings=False))
    config = json.loads((path / "config.json").read_text())
    config.pop("tie_word_embeddings")
    (path / "config.json").write_text(json.dumps(config))
    compare_with_transformers(str(path), (PAIR_TEXTS[0],))


def test_gpt2_untied_by_its_config_with_no_stored_lm_head_is_refused(tiny_gpt2_dir, tmp_path):
    """tie_word_embeddings false and no lm_head.weight in the checkpoint: transformers would draw a
    random head; attn must not quietly use wte in its place (it did): the head is missing, exit 1."""
    import json

    from safetensors.numpy import load_file, save_file
    from typer.testing import CliRunner

    from attncli.cli.main import app

    path = Path(every_parameter_drawn(tiny_gpt2_dir, tmp_path / "gpt2", tie_word_embeddings=False))
    tensors = load_file(str(path / "model.safetensors"))
    assert tensors.pop("lm_head.weight", None) is not None
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    assert json.loads((path / "config.json").read_text())["tie_word_embeddings"] is False
    result = CliRunner().invoke(app, ["generate", "a cat", "--transformer", str(path), "-n", "1", "--backend", "numpy"])
    assert result.exit_code == 1, result.output
    assert "no tensor 'lm_head.weight'" in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


@pytest.mark.parametrize("kind, output", [("bert", "encoder.layer.{l}.attention.output.dense"),
                                          ("distilbert", "transformer.layer.{l}.attention.out_lin"),
                                          ("gpt2", "transformer.h.{l}.attn.c_proj")])
def test_value_vectors_rebuild_transformers_attention_output(kind, output, request, tmp_path):
    """value_vectors' docstring: the layer's attention output is sum_h sum_j A[h, i, j] f^h(x_j) + b_O
    (Kobayashi et al. 2020). The attention output is transformers' own (a hook on the output
    projection), on a model with every parameter drawn."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.hf import load

    path = every_parameter_drawn(request.getfixturevalue(f"tiny_{kind}_dir"), tmp_path / kind)
    cls = transformers.AutoModelForCausalLM if kind == "gpt2" else transformers.AutoModel
    reference = cls.from_pretrained(path, attn_implementation="eager").double().eval()
    text = PAIR_TEXTS[0]
    ours = load(path, backend="numpy")
    enc = ours.encode(text)
    for l in range(ours.layers):
        seen = []
        module = reference.get_submodule(output.format(l=l))
        handle = module.register_forward_hook(lambda m, args, out: seen.append(out[0].numpy()))
        with torch.no_grad():
            reference(**transformers.AutoTokenizer.from_pretrained(path)(text, return_tensors="pt"))
        handle.remove()
        bias = module.bias.detach().numpy()
        A, f = ours.value_vectors(enc, l)  # (h, T, T), (h, T, d)
        np.testing.assert_allclose(np.einsum("hij,hjd->id", A, f) + bias, seen[0], rtol=0, atol=1e-9)


def test_a_gpt2_position_table_shorter_than_n_positions_is_damage(tiny_gpt2_dir, tmp_path):
    import json
    import shutil

    from attncli.hf import load

    target = tmp_path / "gpt2"
    shutil.copytree(tiny_gpt2_dir, target)
    config = json.loads((target / "config.json").read_text())
    rows = config["n_positions"]
    config["n_positions"] = rows + 24
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeFailure, match=rf"^damaged model: wpe\.weight: shape \({rows}, 32\), but config\.json "
                                             rf"implies \({rows + 24}, 32\)$"):
        load(str(target), backend="numpy")


def test_a_gpt2_config_attn_cannot_run_names_what_it_lacks():
    from attncli.hf.families import gpt2

    sizes = {"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1}
    assert gpt2.unsupported(sizes) is None  # activation_function absent: GPT-2's gelu_new
    assert gpt2.unsupported({**sizes, "activation_function": "relu"}) is None
    assert gpt2.unsupported({**sizes, "add_cross_attention": True}) == "cross-attention"
    assert gpt2.unsupported({**sizes, "activation_function": "swiglu"}) == "activation_function 'swiglu'"
    assert gpt2.unsupported({**sizes, "n_head": 3}) == "n_embd not a multiple of n_head"
    assert gpt2.unsupported({**sizes, "n_layer": 0}) == "n_embd not a multiple of n_head"


def test_gpt2_config_without_the_optional_fields_takes_transformers_defaults(tiny_gpt2_dir, tmp_path):
    """An older GPT-2 config.json names neither scale_attn_weights nor scale_attn_by_inverse_layer_idx
    (nor, here, layer_norm_epsilon and activation_function): transformers then scales by
    1/sqrt(d_head) and not by the layer, with eps 1e-5 and gelu_new, and so must attn."""
    import json

    path = Path(every_parameter_drawn(tiny_gpt2_dir, tmp_path / "gpt2"))
    config = json.loads((path / "config.json").read_text())
    config.pop("scale_attn_weights", None)
    config.pop("scale_attn_by_inverse_layer_idx", None)
    config.pop("layer_norm_epsilon", None)
    config.pop("activation_function", None)
    (path / "config.json").write_text(json.dumps(config))
    compare_with_transformers(str(path), (PAIR_TEXTS[0],))


def test_a_distilbert_config_attn_cannot_run_names_what_it_lacks():
    from attncli.hf.families import distilbert

    sizes = {"model_type": "distilbert", "dim": 8, "n_heads": 2, "n_layers": 1}
    assert distilbert.unsupported(sizes) is None  # activation absent: DistilBERT's gelu
    assert distilbert.unsupported({**sizes, "activation": "relu"}) is None
    assert distilbert.unsupported({**sizes, "activation": "swiglu"}) == "activation 'swiglu'"
    assert distilbert.unsupported({**sizes, "n_heads": 3}) == "dim not a multiple of n_heads"
    assert distilbert.unsupported({**sizes, "n_layers": 0}) == "dim not a multiple of n_heads"


@pytest.mark.parametrize("activation", [None, "relu"], ids=["absent", "relu"])
def test_distilbert_activation_as_transformers_reads_it(tiny_distilbert_dir, tmp_path, activation):
    """activation absent from config.json: transformers' default gelu; relu when it says so."""
    import json

    path = Path(every_parameter_drawn(tiny_distilbert_dir, tmp_path / "distilbert",
                                      **({"activation": activation} if activation else {})))
    if activation is None:
        config = json.loads((path / "config.json").read_text())
        config.pop("activation", None)
        (path / "config.json").write_text(json.dumps(config))
    compare_with_transformers(str(path), PAIR_TEXTS)


def test_distilbert_keys_are_transformers_keys(tiny_distilbert_dir, tmp_path):
    """qk's k is k_lin(x), bias included (a key bias leaves the softmax unchanged, not the keys)."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.hf import load

    path = every_parameter_drawn(tiny_distilbert_dir, tmp_path / "distilbert")
    reference = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").double().eval()
    ours = load(path, backend="numpy")
    enc = ours.encode(PAIR_TEXTS[0])
    seen = []
    handle = reference.transformer.layer[1].attention.k_lin.register_forward_hook(
        lambda m, args, out: seen.append(out[0].numpy()))
    with torch.no_grad():
        reference(**transformers.AutoTokenizer.from_pretrained(path)(PAIR_TEXTS[0], return_tensors="pt"))
    handle.remove()
    _, k = ours.qk(enc, 1)  # (h, T, d_head)
    T, d = seen[0].shape
    np.testing.assert_allclose(k, seen[0].reshape(T, ours.heads, -1).transpose(1, 0, 2), rtol=0, atol=1e-10)


TEXT = PAIR_TEXTS[0]


LLAMA = {"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64, "num_hidden_layers": 2,
         "intermediate_size": 128, "vocab_size": 100}


def test_llama_hidden_size_must_be_a_whole_number_even_with_head_dim():
    from attncli.hf.families.llama import unsupported

    assert unsupported(dict(LLAMA, head_dim=16)) is None
    with pytest.raises(TypeError, match=r"'hidden_size' \(64\.5: a positive integer is needed\)"):
        unsupported(dict(LLAMA, hidden_size=64.5, head_dim=16))


@pytest.mark.parametrize("fields", [
    dict(num_hidden_layers=30, use_sliding_window=True, sliding_window=4),  # max_window_layers: 28 by default
    dict(num_hidden_layers=4, use_sliding_window=True, sliding_window=4, max_window_layers=1),
    dict(num_hidden_layers=4, use_sliding_window=False, sliding_window=4, max_window_layers=1),
    dict(num_hidden_layers=4, use_sliding_window=False, sliding_window=None),
    dict(num_hidden_layers=4, sliding_window=4),  # use_sliding_window: false by default
])
def test_qwen2_windows_are_transformers_layer_types(fields):
    """windows(config) for Qwen2 is what transformers' Qwen2Config makes of the same fields: the
    sliding window on each layer its layer_types marks sliding_attention, None elsewhere."""
    transformers = needed("transformers")
    from attncli.hf.families.llama import windows

    ref = transformers.Qwen2Config(**fields)
    want = [ref.sliding_window if kind == "sliding_attention" else None for kind in ref.layer_types]
    assert windows(dict(fields, model_type="qwen2")) == want


def test_a_bert_config_without_hidden_act_is_transformers_default_gelu():
    transformers = needed("transformers")
    from attncli.hf.families.bert import unsupported

    assert transformers.BertConfig().hidden_act == "gelu"
    config = {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1}
    assert unsupported(config) is None
    assert unsupported(dict(config, hidden_act="swish_of_nothing")) == "hidden_act 'swish_of_nothing'"


def test_kv_cache_of_a_one_layer_gpt2_is_transformers_output(tiny_gpt2_dir, tmp_path):
    """logits_and_attentions with a cache (first a prefix, then the whole sequence) on a GPT-2 of
    one layer: transformers' logits and attentions of the whole sequence."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.hf import load

    path = every_parameter_drawn(tiny_gpt2_dir, tmp_path / "gpt2-1", n_layer=1)
    reference = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").double().eval()
    ours = load(path, backend="numpy")
    ids = ours.encode(TEXT).ids
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True)
    cache = ours.new_cache()
    ours.logits_and_attentions(ids[:2], cache)
    logits, attentions = ours.logits_and_attentions(ids, cache)
    assert attentions.shape == (1, ours.heads, len(ids), len(ids))
    np.testing.assert_allclose(attentions[0], out.attentions[0][0].numpy(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(logits, out.logits[0].numpy(), rtol=0, atol=1e-9)


def test_value_vectors_of_an_architecture_without_output_projection_say_so(tiny_bert_dir, monkeypatch):
    from attncli.hf import load

    model = load(str(tiny_bert_dir), backend="numpy")
    monkeypatch.setattr(model, "arch", SimpleNamespace(layers=model.layers))
    with pytest.raises(BadInput) as caught:
        model.value_vectors(model.encode(TEXT), 0)
    assert str(caught.value) == ("--show norms reads each head's value vectors and output projection: attn's NumPy "
                                 "pass of 'bert' does not expose them")


def test_gemma_residual_stream_starts_with_transformers_scaled_embeddings_in_float32(tmp_path):
    """Gemma multiplies the embeddings by sqrt(hidden_size) in the embeddings' own dtype
    (transformers' GemmaModel); residual_stream is documented float32, as embed."""
    torch = needed("torch")
    transformers = needed("transformers")
    from _llama_fixtures import build_decoder

    from attncli.hf import load

    path = build_decoder("gemma", tmp_path / "gemma")
    ids = [2, 5, 7, 11]
    reference = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        want = reference(torch.tensor([ids]), output_hidden_states=True).hidden_states[0][0].numpy()  # (T, d)
    stream = load(path).residual_stream(ids)  # (L + 1, T, d)
    assert stream.dtype == np.float32
    f32_close(stream[0], want)  # one float32 product (the embedding times sqrt(d)) on each side
