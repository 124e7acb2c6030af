"""Tests written for the mutants left alive in the sampled run of the transformer wing's remaining
modules (bert, numpy_backend, weights, llama, mpnet, torch_backend, seq2seq, pretrained, source,
chat; docs/mutation.md (its git history), "Sampled run"). Each states a documented behaviour against an
independent reference: transformers' own output or config classes, safetensors' own reader, or a
hand-worked example. The survivors judged equivalent are listed in that document, with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needed
from test_mutation_kills_transformer import PAIR_TEXTS, every_parameter_drawn

from attncli.errors import BadInput, RuntimeFailure

TEXT = PAIR_TEXTS[0]


# --- torch_backend.py: --show norms / scores on the torch backend ----------------------------------
# tests/test_value_norms.py checks BERT and GPT-2 there, but outside the wing's tests (its MiniLM
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
    from attncli.transformer import load

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
        np.testing.assert_allclose(A, want, rtol=0, atol=1e-5)
        bias = reference.get_submodule(output.format(l=l)).bias.detach().numpy()
        np.testing.assert_allclose(np.einsum("hij,hjd->id", A, f) + bias, seen[l], rtol=0, atol=1e-4)
        np.testing.assert_allclose(softmax_rows(ours.scores(enc, l)), want, rtol=0, atol=1e-5)


@pytest.fixture(scope="module")
def torch_gpt2(tiny_gpt2_dir):
    needed("torch")
    from attncli.transformer import load

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
    from attncli.transformer import load

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


# --- seq2seq.py ----------------------------------------------------------------------------------

def test_an_encoder_that_overflows_is_damage_naming_the_encoders_output(tmp_path):
    """A T5 whose final encoder RMSNorm weight is finite but huge (3e38): its float32 output
    overflows to infinity; embed() says so ("damaged model: infinity in the encoder's output")."""
    needed("torch")
    from _seq2seq_fixtures import BUILDERS
    from safetensors.numpy import load_file, save_file

    from attncli.transformer import load

    path = BUILDERS["t5"](tmp_path / "t5")
    tensors = load_file(str(path / "model.safetensors"))
    tensors["encoder.final_layer_norm.weight"] = np.full_like(tensors["encoder.final_layer_norm.weight"], 3e38)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    model = load(str(path))
    with pytest.raises(RuntimeFailure) as caught:
        model.embed([TEXT])
    assert str(caught.value) == "damaged model: infinity in the encoder's output"


# --- pretrained.py -------------------------------------------------------------------------------

def test_max_positions_takes_a_tokenizer_limit_of_one(tmp_path):
    """max_positions: the tokenizer's model_max_length when smaller than the position table, for
    every positive limit (1 included); 0 and absurd limits (>= 10**7, transformers' 'no limit'
    placeholder is 1e30) are ignored."""
    from attncli.transformer.pretrained import max_positions

    config = {"model_type": "bert", "max_position_embeddings": 512}
    for limit, want in ((1, 1), (2, 2), (511, 511), (600, 512), (0, 512), (10**7, 512)):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": limit}))
        assert max_positions(config, tmp_path) == want, limit


def test_mean_pooling_of_one_token_is_that_token_exactly():
    """pool: mean = sum over the real tokens / their number; a row with one real token is that
    token's vector itself (float64, exactly); mean_sqrt_len divides by sqrt(n)."""
    from attncli.transformer.pretrained import pool

    rng = np.random.default_rng(5)
    hidden = rng.normal(size=(2, 3, 4))  # (B, T, d) float64
    mask = np.array([[True, False, False], [True, True, True]])
    got = pool(hidden, mask, ("mean", "mean_sqrt_len"))
    np.testing.assert_array_equal(got[0, :4], hidden[0, 0])
    np.testing.assert_array_equal(got[0, 4:], hidden[0, 0])
    np.testing.assert_allclose(got[1, :4], hidden[1].sum(axis=0) / 3, rtol=1e-15)
    np.testing.assert_allclose(got[1, 4:], hidden[1].sum(axis=0) / np.sqrt(3), rtol=1e-15)


# --- chat.py -------------------------------------------------------------------------------------

def test_chat_template_reads_special_tokens_saved_as_added_token_objects(tmp_path):
    """tokenizer_config.json may store bos_token as an AddedToken object ({"content": ..., ...}),
    as transformers writes it: the template sees its content."""
    from attncli.transformer.chat import render

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
                         "{{ eos_token }}",
        "bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True, "__type": "AddedToken"},
        "eos_token": "</s>"}))
    assert render(tmp_path, "m", "hello") == "<s>[user] hello</s>"


# --- source.py: the hub cache, in-process -----------------------------------------------------------

def test_offline_reads_hf_hub_offline(monkeypatch):
    from attncli.transformer.source import offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert offline() is False
    for value, want in (("1", True), (" TRUE ", True), ("yes", True), ("on", True), ("0", False), ("", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert offline() is want, value


def test_a_hub_id_resolves_to_its_cached_snapshot(tiny_bert_dir, tmp_path, monkeypatch):
    """resolve(hub id): the snapshot huggingface_hub's cache holds (models--org--name/snapshots/<sha>,
    refs/main naming it); an uncached id offline is RuntimeFailure saying HF_HUB_OFFLINE is set."""
    import shutil

    huggingface_hub = needed("huggingface_hub")
    from attncli.transformer.source import resolve

    root = tmp_path / "hub" / "models--attn-test--tiny-bert"
    sha = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(tiny_bert_dir, root / "snapshots" / sha)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(sha)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve("attn-test/tiny-bert").resolve() == (root / "snapshots" / sha).resolve()
    with pytest.raises(RuntimeFailure, match=r"^'attn-test/not-cached' is not a directory here, and no model by "
                                             r"that id is in the local Hugging Face cache; HF_HUB_OFFLINE is set"):
        resolve("attn-test/not-cached")


def test_a_directory_of_pickles_names_the_first_three_sorted(tmp_path):
    """check_model_dir: only pickled weights is BadInput naming at most three of them, sorted."""
    from attncli.transformer.source import check_model_dir

    (tmp_path / "config.json").write_text("{}")
    for name in ("e.bin", "d.pt", "c.pth", "b.ckpt", "a.bin"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(BadInput) as caught:
        check_model_dir(tmp_path)
    assert str(caught.value).startswith(f"'{tmp_path}' has only pickled weights (a.bin, b.ckpt, c.pth), which attn "
                                        "never loads (unpickling can run code)")


# --- llama.py ------------------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64, "num_hidden_layers": 2,
         "intermediate_size": 128, "vocab_size": 100}


def test_llama_hidden_size_must_be_a_whole_number_even_with_head_dim():
    from attncli.transformer.llama import unsupported

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
    from attncli.transformer.llama import windows

    ref = transformers.Qwen2Config(**fields)
    want = [ref.sliding_window if kind == "sliding_attention" else None for kind in ref.layer_types]
    assert windows(dict(fields, model_type="qwen2")) == want


# --- bert.py -------------------------------------------------------------------------------------

def test_a_bert_config_without_hidden_act_is_transformers_default_gelu():
    transformers = needed("transformers")
    from attncli.transformer.bert import unsupported

    assert transformers.BertConfig().hidden_act == "gelu"
    config = {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1}
    assert unsupported(config) is None
    assert unsupported(dict(config, hidden_act="swish_of_nothing")) == "hidden_act 'swish_of_nothing'"


# --- numpy_backend.py ----------------------------------------------------------------------------

def test_kv_cache_of_a_one_layer_gpt2_is_transformers_output(tiny_gpt2_dir, tmp_path):
    """logits_and_attentions with a cache (first a prefix, then the whole sequence) on a GPT-2 of
    one layer: transformers' logits and attentions of the whole sequence."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.transformer import load

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
    from attncli.transformer import load

    model = load(str(tiny_bert_dir), backend="numpy")
    monkeypatch.setattr(model, "arch", SimpleNamespace(layers=model.layers))
    with pytest.raises(BadInput) as caught:
        model.value_vectors(model.encode(TEXT), 0)
    assert str(caught.value) == ("--show norms reads each head's value vectors and output projection: attn's NumPy "
                                 "pass of 'bert' does not expose them")


# --- weights.py ----------------------------------------------------------------------------------

def save(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def test_rows_of_an_integer_table_are_its_rows(tmp_path):
    """Weights.rows on a table safetensors stores as integers (not a floating kind the file can be
    viewed in): the rows asked for, in the compute dtype, in the ids' shape; an id past the table
    is an IndexError."""
    needed("safetensors")
    from attncli.transformer.weights import Weights

    table = np.arange(5 * 3, dtype=np.int32).reshape(5, 3) * 7 - 20  # (V, d)
    w = Weights(save(tmp_path / "m.safetensors", {"model.wte.weight": table}), ("wte.weight",))
    ids = np.array([[4, 0, 4], [2, 2, 1]])
    got = w.rows("wte.weight", ids)
    assert got.dtype == np.float32 and got.shape == (2, 3, 3)
    np.testing.assert_array_equal(got, table[ids].astype(np.float32))
    with pytest.raises(IndexError):
        w.rows("wte.weight", np.array([5]))


def test_weights_as_float32_knows_the_same_exact_names(tmp_path):
    """WeightsAs (the float32 view for embed) answers has_exact as the file does: every full
    name safetensors' own reader lists, and no other."""
    needed("safetensors")
    from safetensors import safe_open

    from attncli.transformer.weights import Weights, WeightsAs

    path = save(tmp_path / "m.safetensors", {"transformer.wte.weight": np.ones((4, 2), np.float32),
                                             "lm_head.weight": np.ones((4, 2), np.float32)})
    w = WeightsAs(Weights(path, ("wte.weight",), np.float64), np.float32)
    with safe_open(str(path), framework="numpy") as f:
        for name in f.keys():
            assert w.has_exact(name), name
    assert not w.has_exact("wte.weight") and not w.has_exact("transformer.lm_head.weight")


def test_a_header_shape_of_2_to_the_40_is_damage(tmp_path):
    """read_header: a size of 2**40 or more in a shape is refused as damage naming the tensor
    (no file attn reads holds a tensor that long); 2**40 - 1 passes the header check."""
    import struct

    from attncli.transformer.weights import read_header

    def file_with(shape):
        header = json.dumps({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
        path = tmp_path / "h.safetensors"
        path.write_bytes(struct.pack("<Q", len(header)) + header)
        return path

    header, start = read_header(file_with([2**40 - 1]))
    assert header["t"]["shape"] == [2**40 - 1] and start == 8 + len(json.dumps(header).encode())
    for shape in ([2**40], [1, 3**39]):
        with pytest.raises(RuntimeFailure, match=r'tensor "t" has no valid shape'):
            read_header(file_with(shape))


def test_a_checkpoint_with_none_of_the_anchors_says_which_and_the_way_out():
    from attncli.transformer.weights import _prefix

    with pytest.raises(BadInput) as caught:
        _prefix(["encoder.foo", "bar"], ("wte.weight", "h.0.ln_1.weight"), Path("/m/model.safetensors"))
    assert str(caught.value) == ("/m/model.safetensors holds none of the tensors this architecture needs "
                                 "(wte.weight, h.0.ln_1.weight): use --backend torch")
    assert _prefix(["x.transformer.wte.weight", "wte.weight"], ("wte.weight",), Path("m")) == ""


def test_a_float8_tensor_is_refused_with_the_way_out(tmp_path):
    """A tensor of a kind safetensors' NumPy reader cannot give (float8, as quantised checkpoints
    store) is BadInput naming it and --backend torch, by get and by rows (it was an internal error:
    NumPy has no float8)."""
    import struct

    needed("safetensors")
    from attncli.transformer.weights import Weights

    entries = {"wte.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
               "ln_f.weight": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [16, 20]}}
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + np.ones(4, "<f4").tobytes() + bytes(4))
    w = Weights(path, ("wte.weight",))
    np.testing.assert_array_equal(w.get("wte.weight"), np.ones((2, 2), np.float32))
    for read in (lambda: w.get("ln_f.weight"), lambda: w.rows("ln_f.weight", np.array([0]))):
        with pytest.raises(BadInput) as caught:
            read()
        assert str(caught.value) == (f'{path}: tensor "ln_f.weight" is "F8_E4M3", which attn\'s NumPy pass does not '
                                     "read: use --backend torch")
