"""The torch backend (attncli/hf/backends/torch_backend.py) against transformers' own modules:
``--show norms`` / ``scores`` on DistilBERT (q_lin ... out_lin, nn.Linear) and GPT-2 (joint c_attn,
Conv1D, scale_attn_by_inverse_layer_idx) with every parameter drawn, a model that needs more than
text, loading info judged by key, a slow tokenizer's segments and a missing projection named."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _tolerance import f32_close
from _transformer_fixtures import PAIR_TEXTS, SIZES, every_parameter_drawn
from conftest import needed

from attncli.errors import RuntimeFailure


TEXT = PAIR_TEXTS[0]
# the tiny models' float32 rounding (tests/_tolerance.py): their layers and their widest reduction
DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])


# --- torch_backend.py: --show norms / scores on the torch backend ----------------------------------
# tests/attention/test_value_norms.py checks BERT and GPT-2 there, but outside the wing's tests (its MiniLM
# case is slow): here DistilBERT (q_lin ... out_lin, nn.Linear) and GPT-2 (joint c_attn, Conv1D)
# with GPT-2's scale_attn_by_inverse_layer_idx, every parameter drawn.


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """softmax over the last axis, -inf -> weight 0 (the reference for q k^T * scale + mask)."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("kind, output, changes", [
    ("distilbert", "transformer.layer.{l}.attention.out_lin", {}),
    ("gpt2", "transformer.h.{l}.attn.c_proj", {"scale_attn_by_inverse_layer_idx": True}),
])
def test_torch_backend_value_vectors_and_scores_against_transformers(kind, output, changes, request, tmp_path):
    """value_vectors: A is transformers' output_attentions and sum_h sum_j A[h,i,j] f^h(x_j) + b_O
    is the output projection's own output (a hook); scores: softmax(scores) is output_attentions
    (GPT-2 with scale_attn_by_inverse_layer_idx: layer l's scores are divided by l + 1 too)."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.hf import load

    path = every_parameter_drawn(request.getfixturevalue(f"tiny_{kind}_dir"), tmp_path / kind, **changes)
    cls = transformers.AutoModelForCausalLM if kind == "gpt2" else transformers.AutoModel
    reference = cls.from_pretrained(path, attn_implementation="eager").double().eval()
    ours = load(path, backend="torch")
    assert ours.backend == "torch" and ours.layers == 2
    enc = ours.encode(TEXT)
    seen = {}
    handles = [reference.get_submodule(output.format(l=l)).register_forward_hook(
        lambda m, args, out, l=l: seen.__setitem__(l, out[0].numpy())) for l in range(ours.layers)]
    with torch.no_grad():
        out = reference(**transformers.AutoTokenizer.from_pretrained(path)(TEXT, return_tensors="pt"),
                        output_attentions=True)
    for handle in handles:
        handle.remove()
    for l in range(ours.layers):
        want = out.attentions[l][0].numpy()  # (h, T, T)
        A, f = ours.value_vectors(enc, l)  # (h, T, T), (h, T, d)
        f32_close(A, want, depth=DEPTH, length=WIDTH)
        bias = reference.get_submodule(output.format(l=l)).bias.detach().numpy()
        f32_close(np.einsum("hij,hjd->id", A, f) + bias, seen[l], depth=DEPTH, length=WIDTH)
        f32_close(softmax_rows(ours.scores(enc, l)), want, depth=DEPTH, length=WIDTH)


@pytest.fixture(scope="module")
def torch_gpt2(tiny_gpt2_dir):
    needed("torch")
    from attncli.hf import load

    return load(str(tiny_gpt2_dir), backend="torch")


def test_torch_backend_output_without_attentions_is_a_failure_not_a_crash(torch_gpt2):
    """_stacked: an output object with no ``attentions`` at all (an implementation that cannot
    return weights) is RuntimeFailure "returned none", like one whose attentions are None."""
    for out in (SimpleNamespace(), SimpleNamespace(attentions=None)):
        with pytest.raises(RuntimeFailure, match=r"returned none for its 2 layers' attentions"):
            torch_gpt2._stacked(out, 3)


def test_torch_backend_loading_info_without_mismatched_keys_is_clean(torch_gpt2):
    """_check_loading reads each list of transformers' loading info with .get: an info dict that
    leaves one out (no mismatched_keys here) means none of that kind; a mismatched key is damage
    naming it and both shapes."""
    assert torch_gpt2._check_loading({"missing_keys": [], "unexpected_keys": []}, False) is None
    want = r"damaged model: h\.0\.attn: shape \(2, 3\), but config\.json implies \(4, 5\)"
    with pytest.raises(RuntimeFailure, match=want):
        torch_gpt2._check_loading({"mismatched_keys": [("h.0.attn", (2, 3), (4, 5))]}, False)


def test_a_model_that_needs_more_than_text_reads_its_text_config_and_fails_to_run_cleanly(tiny_gpt2_dir, tmp_path):
    """CLIP, which transformers knows: layers and heads come from its text config (the top config
    has neither), and a pass on text alone (CLIP's forward needs pixel_values too) is RuntimeFailure
    "failed to run", exit 1, not an internal error (it was an AttributeError before)."""
    import shutil

    needed("torch")
    transformers = needed("transformers")
    from typer.testing import CliRunner

    from attncli.cli.main import app
    from attncli.hf import load

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_gpt2_dir)
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                         num_attention_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=0),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=8, patch_size=4), projection_dim=8)
    assert not hasattr(config, "num_hidden_layers")
    path = tmp_path / "clip"
    transformers.CLIPModel(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tiny_gpt2_dir) / name, path / name)
    model = load(str(path), backend="torch")
    assert (model.layers, model.heads) == (config.text_config.num_hidden_layers, config.text_config.num_attention_heads)
    with pytest.raises(RuntimeFailure, match=r"failed to run: "):
        model.attentions(model.encode(TEXT))
    result = CliRunner().invoke(app, ["matrix", TEXT, "--transformer", str(path), "--backend", "torch"])
    assert result.exit_code == 1, result.output
    assert "failed to run: " in " ".join(result.stderr.split()) and "internal error" not in result.output


def test_a_slow_tokenizers_pair_starts_its_second_segment_after_the_first_special_token():
    """[CLS] a b [SEP] c [SEP] for a pair: the second sentence (segment 1) starts after the first
    special token that follows the first's pieces; every piece is its own word."""
    from attncli.hf.backends.torch_backend import _slow_encoding

    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda ids: [f"t{i}" for i in ids])
    batch = {"input_ids": [101, 5, 6, 102, 7, 102], "special_tokens_mask": [1, 0, 0, 1, 0, 1],
             "token_type_ids": [0, 0, 0, 0, 1, 1]}
    enc = _slow_encoding(tokenizer, batch, 2)
    assert enc.ids == [101, 5, 6, 102, 7, 102]
    assert enc.tokens == ["t101", "t5", "t6", "t102", "t7", "t102"]
    assert enc.sequence_ids == [None, 0, 0, None, 1, None]
    assert enc.word_ids == [0, 1, 2, 3, 4, 5] and enc.type_ids == [0, 0, 0, 0, 1, 1]
    assert _slow_encoding(tokenizer, {"input_ids": [101, 5, 102, 6]}, 1).sequence_ids == [0, 0, 0, 0]


def test_a_missing_projection_module_is_named(tiny_bert_dir, monkeypatch):
    needed("torch")
    import dataclasses

    from attncli.hf import load
    from attncli.hf.backends import torch_trace

    model = load(tiny_bert_dir, backend="torch")
    bert = torch_trace.FAMILIES["bert"]
    monkeypatch.setitem(torch_trace.FAMILIES, "bert", dataclasses.replace(
        bert, qkv=(bert.qkv[0], "attention.self.no_such_module", bert.qkv[2])))
    with pytest.raises(RuntimeFailure) as caught:
        model.scores(model.encode("the cat sat"), 0)
    assert str(caught.value) == f"model '{model.name}' lacks the module 'encoder.layer.0.attention.self.no_such_module'"


def test_loading_info_keys_under_the_base_model_prefix_are_judged_without_it(tiny_bert_dir):
    """transformers names a head model's keys with its base_model_prefix ("bert."): a missing pooler
    (attn reads the last hidden state) is no problem with the prefix either; a layer's weight is."""
    needed("torch")
    from attncli.hf import load

    model = load(tiny_bert_dir, backend="torch")
    prefix = model.model.base_model_prefix + "."  # transformers' own attribute
    model._check_loading({"missing_keys": [prefix + "pooler.dense.weight", prefix + "pooler.dense.bias"]},
                         allow=False)  # nothing raised
    with pytest.raises(RuntimeFailure) as caught:
        model._check_loading({"missing_keys": [prefix + "encoder.layer.0.attention.self.query.weight"]}, allow=False)
    assert "encoder.layer.0.attention.self.query.weight" in str(caught.value)
