"""Tests written for the mutants mutmut left alive in the transformer wing (docs/mutation.md (its git history)):
each states a documented behaviour the wing's other tests left open, against an independent reference
(torch, transformers' own modules, ``math``, or a hand-worked example). The survivors judged equivalent
are listed in that document, with the reason."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import needed

from attncli.transformer import ops


# --- ops.py -------------------------------------------------------------------------------------

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


def test_quick_gelu_by_its_formula():
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
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


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


# --- config_check.py ----------------------------------------------------------------------------

from attncli.errors import BadInput, RuntimeFailure  # noqa: E402
from attncli.transformer import config_check  # noqa: E402


def nested(levels: int) -> list:
    """A list nested ``levels`` deep: [[...[]...]] (levels = 1 is [])."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_depth_counts_nesting_by_hand():
    assert config_check.depth(3) == 0 and config_check.depth("text") == 0
    assert config_check.depth([]) == 1 and config_check.depth({}) == 1
    assert config_check.depth([1, 2, [3]]) == 2
    assert config_check.depth({"a": {"b": [1]}, "c": 2}) == 3
    assert config_check.depth(nested(32)) == 32
    assert config_check.depth(nested(33)) == 33  # one past the limit: its depth, found without going deeper
    assert config_check.depth(nested(5000)) > 32  # no recursion: no RecursionError


def test_read_json_takes_32_levels_and_refuses_33(tmp_path):
    ok, deep = tmp_path / "ok.json", tmp_path / "deep.json"
    ok.write_text("[" * 32 + "]" * 32)
    deep.write_text("[" * 33 + "]" * 33)
    assert config_check.depth(config_check.read_json(ok)) == 32
    with pytest.raises(RuntimeFailure, match=r"^damaged model: deep\.json: its JSON nests more than 32 deep$"):
        config_check.read_json(deep)
    deeper = tmp_path / "deeper.json"
    deeper.write_text("[" * 100_000 + "]" * 100_000)  # past the JSON parser's own recursion limit
    with pytest.raises(RuntimeFailure, match=r"^damaged model: deeper\.json: its JSON nests more than 32 deep$"):
        config_check.read_json(deeper)


def test_read_json_refuses_nan_infinity_and_broken_json_naming_the_file(tmp_path):
    path = tmp_path / "config.json"
    for constant in ("NaN", "Infinity", "-Infinity"):
        path.write_text('{"a": %s}' % constant)
        with pytest.raises(RuntimeFailure) as caught:
            config_check.read_json(path)
        assert str(caught.value) == f"damaged model: config.json: it is not valid JSON ({constant} is not a JSON number)"
    path.write_text('{"a": ')
    with pytest.raises(RuntimeFailure, match=r"^damaged model: config\.json: it is not valid JSON \(Expecting value"):
        config_check.read_json(path)


def test_read_json_bounds_the_bytes_it_reads(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": "' + "x" * 100 + '"}')
    assert config_check.read_json(path, limit=200) == {"a": "x" * 100}
    with pytest.raises(RuntimeFailure, match=r"^damaged model: config\.json: "):
        config_check.read_json(path, limit=50)


def test_read_optional_json_absent_is_empty_and_a_non_object_is_empty(tmp_path):
    assert config_check.read_optional_json(tmp_path / "absent.json") == {}
    (tmp_path / "list.json").write_text("[1, 2]")
    assert config_check.read_optional_json(tmp_path / "list.json") == {}
    (tmp_path / "object.json").write_text('{"model_max_length": 7}')
    assert config_check.read_optional_json(tmp_path / "object.json") == {"model_max_length": 7}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_check_regular_refuses_a_fifo_and_a_file_past_its_limit(tmp_path):
    config_check.check_regular(tmp_path / "absent.txt", 10)  # absent: nothing to check
    fifo = tmp_path / "vocab.txt"
    os.mkfifo(fifo)
    with pytest.raises(RuntimeFailure, match=r"^damaged model: vocab\.txt: it is a FIFO, not a regular file$"):
        config_check.check_regular(fifo, 10)
    big = tmp_path / "merges.txt"
    big.write_bytes(b"x" * 1001)
    config_check.check_regular(big, None)  # no limit: any size
    config_check.check_regular(big, 1001)  # exactly the limit is allowed
    with pytest.raises(RuntimeFailure, match=r"^damaged model: merges\.txt: it is 1,001 bytes, more than the 1,000 "
                                             r"it can be$"):
        config_check.check_regular(big, 1000)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_check_files_checks_every_file_a_library_may_open_by_name(tmp_path):
    """Each kind of file transformers or safetensors opens by name is checked: a FIFO named
    tokenizer.json, vocab.txt, spiece.model, a .tiktoken, a chat template or weights is refused;
    a file of another kind (README.md) is not attn's concern."""
    os.mkfifo(tmp_path / "README.md")
    config_check.check_files(tmp_path)
    for name in ("tokenizer.json", "special_tokens_map.json", "vocab.txt", "spiece.model", "o200k.tiktoken",
                 "chat_template.jinja", "model.safetensors"):
        d = tmp_path / name.replace(".", "-")
        d.mkdir()
        os.mkfifo(d / name)
        with pytest.raises(RuntimeFailure, match=rf"^damaged model: {name}: "):
            config_check.check_files(d)


def test_check_files_bounds_tokenizer_json_by_its_own_limit_and_other_json_by_the_config_limit(tmp_path, monkeypatch):
    """tokenizer.json may be far larger than a config file (real ones are tens of MB)."""
    monkeypatch.setattr(config_check, "CONFIG_BYTES", 100)
    monkeypatch.setattr(config_check, "READ_BY_TRANSFORMERS", {**config_check.READ_BY_TRANSFORMERS, ".json": 100})
    (tmp_path / "tokenizer.json").write_bytes(b"{" + b" " * 500 + b"}")
    config_check.check_files(tmp_path)
    (tmp_path / "tokenizer_config.json").write_bytes(b"{" + b" " * 500 + b"}")
    with pytest.raises(RuntimeFailure, match=r"^damaged model: tokenizer_config\.json: it is 502 bytes"):
        config_check.check_files(tmp_path)


def damage(config: dict, tmp_path) -> str:
    with pytest.raises(RuntimeFailure) as caught:
        config_check.check_config(config, tmp_path)
    return str(caught.value)


def test_check_config_sizes_are_whole_numbers_within_range(tmp_path):
    real = {"vocab_size": 128256, "hidden_size": 16384, "num_hidden_layers": 126, "num_attention_heads": 128,
            "num_key_value_heads": 8, "intermediate_size": 53248, "max_position_embeddings": 131072,
            "type_vocab_size": 2, "head_dim": 128}  # Llama 3.1 405B's sizes (and BERT's type vocab)
    config_check.check_config(real, tmp_path)  # no weights in tmp_path: sizes not compared with bytes
    config_check.check_config({"vocab_size": 1, "hidden_size": 1, "num_hidden_layers": 1,
                               "num_attention_heads": 1, "n_inner": None}, tmp_path)  # smallest; null is a default
    assert damage({"vocab_size": 0}, tmp_path) == "damaged model: config.json: vocab_size: 0 is outside 1..16,777,216"
    assert damage({"n_layer": 2.0}, tmp_path) == "damaged model: config.json: n_layer: 2.0 is not a whole number"
    assert damage({"n_head": True}, tmp_path) == "damaged model: config.json: n_head: true is not a whole number"
    assert damage({"hidden_size": "768"}, tmp_path) == ("damaged model: config.json: hidden_size: '768' is not "
                                                        "a whole number")
    for field in ("vocab_size", "hidden_size", "n_embd", "dim", "d_model", "num_hidden_layers", "n_layers",
                  "num_attention_heads", "n_heads", "intermediate_size", "hidden_dim", "n_positions", "n_ctx"):
        assert f"{field}: {2**40} is outside 1.." in damage({field: 2**40}, tmp_path), field
        assert f"{field}: -1 is outside 1.." in damage({field: -1}, tmp_path), field


def test_check_config_token_ids(tmp_path):
    for ok in (None, 0, -1, 2**31 - 1, [0, 2, 3], []):
        config_check.check_config({"pad_token_id": ok, "bos_token_id": ok, "eos_token_id": ok}, tmp_path)
    for field in ("pad_token_id", "bos_token_id", "eos_token_id"):
        for bad, shown in ((-2, "-2"), (2**31, str(2**31)), (True, "true"), (1.0, "1.0"), ([1, "2"], '[1, "2"]'),
                           ("0", "'0'")):
            assert damage({field: bad}, tmp_path) == (f"damaged model: config.json: {field}: {shown} is not a token "
                                                      "id (an integer >= 0, or null)")


def test_check_config_epsilons_are_small_positive_numbers(tmp_path):
    for field in ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps"):
        config_check.check_config({field: 1e-12}, tmp_path)
        config_check.check_config({field: 0.5}, tmp_path)
        for bad, shown in ((0, "0"), (0.0, "0.0"), (1, "1"), (1.0, "1.0"), (-1e-5, "-1e-05"), (True, "true"),
                           ("1e-5", "'1e-5'"), (None, "null")):
            assert damage({field: bad}, tmp_path) == (f"damaged model: config.json: {field}: {shown} is not a small "
                                                      "positive number")


def test_check_config_flags_and_names(tmp_path):
    flags = ("is_decoder", "add_cross_attention", "tie_word_embeddings", "scale_attn_weights",
             "scale_attn_by_inverse_layer_idx", "is_encoder_decoder", "sinusoidal_pos_embds")
    config_check.check_config({flag: False for flag in flags}, tmp_path)
    for flag in flags:
        assert damage({flag: 1}, tmp_path) == f"damaged model: config.json: {flag}: 1 is not true or false"
    names = ("model_type", "hidden_act", "activation", "activation_function", "position_embedding_type")
    config_check.check_config({name: "x" for name in names}, tmp_path)
    for name in names:
        assert damage({name: ["gelu"]}, tmp_path) == f'damaged model: config.json: {name}: ["gelu"] is not a name (a string)'


def test_check_config_heads_divide_the_width_unless_head_dim_says_otherwise(tmp_path):
    for width, heads in (("hidden_size", "num_attention_heads"), ("n_embd", "n_head"), ("dim", "n_heads")):
        config_check.check_config({width: 12, heads: 4}, tmp_path)
        assert damage({width: 12, heads: 5}, tmp_path) == (f"damaged model: config.json: {heads}: 5 heads do not "
                                                           f"divide {width} 12")
        config_check.check_config({width: 12, heads: 5, "head_dim": 4}, tmp_path)  # width != heads * head_dim: allowed


def test_a_long_value_is_shown_cut_to_40_characters(tmp_path):
    message = damage({"model_type": list(range(100))}, tmp_path)
    shown = message.split("model_type: ", 1)[1].removesuffix(" is not a name (a string)")
    assert shown == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11..." and len(shown) == 40  # 37 characters and "..."
    assert config_check._show("x" * 38) == "'" + "x" * 38 + "'"  # 40 with its quotes: whole
    assert config_check._show("x" * 39) == "'" + "x" * 36 + "..."


def test_parameters_by_hand():
    """layers 4 d^2 (the attention projections) + (vocab + positions) d."""
    assert config_check.parameters({"hidden_size": 10, "num_hidden_layers": 3, "vocab_size": 100,
                                    "max_position_embeddings": 50}) == 3 * 4 * 100 + 150 * 10
    assert config_check.parameters({"n_embd": 8, "n_layer": 2, "vocab_size": 10, "n_positions": 6}) == 2 * 4 * 64 + 16 * 8
    assert config_check.parameters({"dim": 8, "n_layers": 2, "vocab_size": 10}) == 2 * 4 * 64 + 10 * 8
    assert config_check.parameters({"d_model": 8, "n_layers": 1, "vocab_size": 10}) == 4 * 64 + 10 * 8
    # rotary or relative positions have no table
    assert config_check.parameters({"hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10,
                                    "max_position_embeddings": 1000, "position_embedding_type": "rotary"}) == 4 * 64 + 80
    assert config_check.parameters({"hidden_size": 8.5, "n_embd": 8, "num_hidden_layers": True, "n_layer": 1,
                                    "vocab_size": "10"}) == 4 * 64  # a field that is no count is passed over
    assert config_check.parameters({}) == 0


def test_a_config_larger_than_its_weights_is_damage(tmp_path):
    config = {"hidden_size": 1024, "num_hidden_layers": 1, "vocab_size": 0 + 1, "max_position_embeddings": 1}
    claimed = 4 * 1024 * 1024 + 2 * 1024  # 4,196,352 parameters: 1,049,088 bytes at 2 bits each
    config_check.check_config(config, tmp_path)  # no weight file: nothing to compare
    (tmp_path / "model.safetensors").write_bytes(b"")
    config_check.check_config(config, tmp_path)  # empty: nothing to compare either
    (tmp_path / "model.safetensors").write_bytes(b"x" * (claimed // 4 - 2**20))  # 1 MiB of slack: just enough
    config_check.check_config(config, tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"x" * (claimed // 4 - 2**20 - 1))
    assert damage(config, tmp_path) == (f"damaged model: config.json: its sizes describe at least {claimed:,} "
                                        f"parameters, more than its {claimed // 4 - 2**20 - 1:,} bytes of weights can hold")
    (tmp_path / "model-00002.safetensors").write_bytes(b"x")  # the shards' bytes add up
    config_check.check_config(config, tmp_path)


def test_check_trust_refuses_an_auto_map_in_either_config(tmp_path):
    config_check.check_trust({"model_type": "bert"}, tmp_path)
    with pytest.raises(BadInput, match=r"needs custom code \(config\.json has an auto_map naming Python files in "
                                       r"the model directory\): attn never runs code that comes with a model$"):
        config_check.check_trust({"auto_map": {}}, tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"auto_map": {"AutoTokenizer": ["x.T", null]}}')
    with pytest.raises(BadInput, match=r"tokenizer_config\.json has an auto_map"):
        config_check.check_trust({"model_type": "bert"}, tmp_path)


# --- weight_check.py ----------------------------------------------------------------------------

from attncli import messages  # noqa: E402
from attncli.transformer import weight_check  # noqa: E402


def test_report_unused_names_four_tensors_sorted_then_how_many_more(monkeypatch):
    with pytest.raises(RuntimeFailure) as caught:
        weight_check.report_unused("m", missing=["e", "b", "a", "d", "c", "f"])
    assert str(caught.value) == ("model 'm': 6 weight(s) the model needs are not in the checkpoint (a, b, c, d and "
                                 "2 more: they would be random): attn will not show attention that is silently wrong "
                                 "(--allow-missing-weights runs it anyway, with a warning)")
    with pytest.raises(RuntimeFailure) as caught:
        weight_check.report_unused("m", unexpected=["z\x1b[2J", "y", "x", "w"], can_allow=False)
    assert str(caught.value) == ("model 'm': 4 weight(s) in the checkpoint are not used by the model (w, x, y, "
                                 "z\\x1b[2J: its attention would be computed without them): attn will not show "
                                 "attention that is silently wrong (attn's NumPy path cannot run without them; "
                                 "--backend torch --allow-missing-weights runs them random, with a warning)")
    weight_check.report_unused("m")  # nothing missing, nothing unused: silent
    warned = []
    monkeypatch.setattr(messages, "warn", warned.append)
    weight_check.report_unused("m", missing=["a"], allow=True)
    assert warned == ["model 'm': 1 weight(s) the model needs are not in the checkpoint (a: they would be random); "
                      "going on as --allow-missing-weights asks: the attention shown is not the trained model's"]
    with pytest.raises(RuntimeFailure):  # allowed, but the backend cannot run without them
        weight_check.report_unused("m", missing=["a"], allow=True, can_allow=False)


def test_check_shapes_by_hand():
    expected = {"wte": (50, 8), "wpe": (None, 8), "ln.bias": (8,), "absent": (3, 3)}
    weight_check.check_shapes({"wte": [50, 8], "wpe": [1024, 8], "ln.bias": [8], "other": [1]}, expected)
    for actual, message in (
            ({"wte": [51, 8]}, "damaged model: wte: shape (51, 8), but config.json implies (50, 8)"),
            ({"wpe": [1024, 9]}, "damaged model: wpe: shape (1024, 9), but config.json implies (any, 8)"),
            ({"wpe": [8]}, "damaged model: wpe: shape (8,), but config.json implies (any, 8)"),
            ({"ln.bias": [8, 1]}, "damaged model: ln.bias: shape (8, 1), but config.json implies (8,)"),
            ({"ln.bias": [7]}, "damaged model: ln.bias: shape (7,), but config.json implies (8,)")):
        with pytest.raises(RuntimeFailure) as caught:
            weight_check.check_shapes(actual, expected)
        assert str(caught.value) == message


def test_check_finite_names_nan_before_infinity():
    weight_check.check_finite(np.array([1.0, 2.0]), "x")
    weight_check.check_finite(np.array([1, 2]), "ints")  # integers hold neither
    for array, kind in ((np.array([np.inf, 1.0]), "infinity"), (np.array([np.inf, np.nan]), "NaN"),
                        (np.array([1.0, -np.inf], dtype=np.float32), "infinity"),
                        (np.array([1 + 1j, complex(np.nan, 0)]), "NaN")):
        with pytest.raises(RuntimeFailure) as caught:
            weight_check.check_finite(array, "layer 3's output")
        assert str(caught.value) == f"damaged model: {kind} in layer 3's output"


# --- encoding.py --------------------------------------------------------------------------------

from attncli.transformer import encoding  # noqa: E402


def test_too_long_says_how_long_the_limit_and_the_way_out():
    single, pair = encoding.too_long(600, 512, False), encoding.too_long(9, 8, True)
    assert isinstance(single, BadInput) and isinstance(pair, BadInput)
    assert str(single) == ("the text is 600 tokens long (special tokens included), more than the model's limit of "
                           "512: shorten it, or pass --truncate to cut it to 512 tokens")
    assert str(pair).startswith("the sentence pair is 9 tokens long (special tokens included), more than the "
                                "model's limit of 8: ")


def test_check_text_refuses_what_is_not_a_string():
    assert encoding.check_text("time flies") == "time flies"
    with pytest.raises(BadInput, match=r"^the text must be a string, not bytes$"):
        encoding.check_text(b"time flies")
    with pytest.raises(BadInput, match=r"^the pair must be a string, not NoneType$"):
        encoding.check_text(None, "pair")


def wordpiece_tokenizer():
    """A tokenizers WordPiece tokenizer with BERT's template: [CLS] A [SEP] (B [SEP])."""
    tokenizers = needed("tokenizers")
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "time", "fl", "##ies", "fruit", "like"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def test_from_tokenizers_by_hand():
    """A pair, worked by hand: special tokens have no segment and no word; "flies" is one word of
    two pieces in each sentence; words are the text as written; type ids only when asked for;
    not truncated unless said."""
    tok = wordpiece_tokenizer()
    texts = ["time  flies", "fruit flies"]
    enc = encoding.from_tokenizers(tok.encode(*texts), texts, use_type_ids=True)
    assert enc.tokens == ["[CLS]", "time", "fl", "##ies", "[SEP]", "fruit", "fl", "##ies", "[SEP]"]
    assert enc.ids == [2, 4, 5, 6, 3, 7, 5, 6, 3]
    assert enc.segments == [None, "a", "a", "a", None, "b", "b", "b", None]
    assert enc.special == [True, False, False, False, True, False, False, False, True]
    assert enc.word_ids == [None, 0, 1, 1, None, 2, 3, 3, None]
    assert enc.words == ["time", "flies", "fruit", "flies"]
    assert enc.type_ids == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert (enc.text, enc.pair, enc.truncated, len(enc)) == ("time  flies", "fruit flies", False, 9)
    single = encoding.from_tokenizers(tok.encode("flies like time"), ["flies like time"], use_type_ids=False,
                                      truncated=True)
    assert single.segments == [None, "a", "a", "a", "a", None] and single.words == ["flies", "like", "time"]
    assert single.type_ids == [0] * 6 and single.pair is None and single.truncated is True


# --- blas.py ------------------------------------------------------------------------------------

from attncli.transformer import blas  # noqa: E402


def test_library_paths_look_where_numpys_wheels_put_openblas(tmp_path, monkeypatch):
    """numpy.libs/ beside the package on Linux, numpy/.dylibs/ on macOS (blas.py's docstring), any
    file with openblas in its name, sorted."""
    numpy_dir = tmp_path / "site-packages" / "numpy"
    (numpy_dir / ".dylibs").mkdir(parents=True)
    (tmp_path / "site-packages" / "numpy.libs").mkdir()
    for name in ("numpy.libs/libscipy_openblas64_-ab.so", "numpy.libs/libgfortran.so", "numpy/.dylibs/libopenblas.dylib",
                 "numpy/libopenblas-not-here.so"):
        (tmp_path / "site-packages" / name).write_bytes(b"")
    monkeypatch.setattr(np, "__file__", str(numpy_dir / "__init__.py"))
    got = [os.path.relpath(os.path.normpath(p), tmp_path / "site-packages") for p in blas._library_paths()]
    assert got == ["numpy.libs/libscipy_openblas64_-ab.so", "numpy/.dylibs/libopenblas.dylib"]


class FakeOpenBLAS:
    """A library handle exposing only the thread functions of one build (symbols ``prefix + name + suffix``)."""

    def __init__(self, symbols: list[str]):
        self.threads = 2
        for symbol in symbols:
            fn = (lambda: self.threads) if "get" in symbol else (lambda n: setattr(self, "threads", n))
            setattr(self, symbol, _Function(fn))


class _Function:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)


@pytest.mark.parametrize("prefix, suffix", [("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"),
                                            ("openblas_", "")])
def test_openblas_is_found_under_each_builds_symbol_names(monkeypatch, prefix, suffix):
    """The wheels' scipy-openblas (64-bit ints or not) prefixes its symbols; a plain OpenBLAS
    build has openblas_set_num_threads; one_thread sets 1 and restores what was set before."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    lib = FakeOpenBLAS([f"{prefix}get_num_threads{suffix}", f"{prefix}set_num_threads{suffix}"])
    loaded = []
    monkeypatch.setattr(blas, "_found", False)  # not looked yet, in this test's process
    monkeypatch.setattr(blas, "_library_paths", lambda: ["/nowhere/libbroken.so", "/somewhere/libopenblas.so"])

    def cdll(path):
        loaded.append(path)
        if "broken" in path:
            raise OSError("cannot open")
        return lib

    monkeypatch.setattr(blas.ctypes, "CDLL", cdll)
    get, put = blas._openblas()
    assert loaded == ["/nowhere/libbroken.so", "/somewhere/libopenblas.so"]
    assert get() == 2
    with blas.one_thread():
        assert lib.threads == 1
    assert lib.threads == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's choice stands
    with blas.one_thread():
        assert lib.threads == 2


def test_no_openblas_found_is_remembered_and_one_thread_does_nothing(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(blas, "_found", False)
    looked = []
    monkeypatch.setattr(blas, "_library_paths", lambda: looked.append(1) or ["/x/libopenblas.so"])
    monkeypatch.setattr(blas.ctypes, "CDLL", lambda path: FakeOpenBLAS(["openblas_get_num_threads"]))  # no setter
    assert blas._openblas() is None
    assert blas._openblas() is None and looked == [1]  # looked once
    with blas.one_thread():
        pass


def test_this_numpys_own_openblas_is_found_afresh(monkeypatch):
    """On a NumPy wheel with its bundled OpenBLAS (the library this process mapped), a fresh look
    finds it and one_thread really sets one thread (the cached result of an earlier look is not
    what is tested)."""
    maps = Path("/proc/self/maps")
    mapped = {line.split()[-1] for line in maps.read_text().splitlines() if "openblas" in line} if maps.exists() else set()
    if not mapped:
        pytest.skip("no OpenBLAS mapped by this NumPy (another BLAS, or not Linux)")
    assert {os.path.realpath(p) for p in blas._library_paths()} & {os.path.realpath(p) for p in mapped}
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(blas, "_found", False)
    get, put = blas._openblas()
    before = get()
    with blas.one_thread():
        assert get() == 1
    assert get() == before


# --- bert.py, distilbert.py, gpt2.py: every parameter drawn -------------------------------------
# The tiny models of _transformer_fixtures are saved as transformers initialises them: every bias
# 0 and every LayerNorm weight 1, so a dropped bias, a bias added with the wrong sign or a LayerNorm
# weight read as its bias goes unseen. Here each parameter is drawn, and the numpy backend is
# compared with transformers on the same directory (float64, eager attention).

PAIR_TEXTS = ("time flies like an arrow", "fruit flies like a banana")


def every_parameter_drawn(src: Path, dst: Path, seed: int = 0, **config_changes) -> str:
    import shutil

    torch = needed("torch")
    transformers = needed("transformers")
    shutil.copytree(src, dst)
    config = transformers.AutoConfig.from_pretrained(src)
    for key, value in config_changes.items():
        setattr(config, key, value)
    cls = transformers.AutoModelForCausalLM if config.model_type == "gpt2" else transformers.AutoModel
    torch.manual_seed(seed)
    model = cls.from_config(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    model.eval().save_pretrained(dst)
    return str(dst)


def compare_with_transformers(path: str, texts: tuple[str, ...]) -> None:
    """Every layer's and head's attention for ``texts`` (float64, 1e-10), the mean of the last
    hidden state of texts[0] alone (``embed``, float32: 1e-4) and, for GPT-2, the logits."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.transformer import load

    tok = transformers.AutoTokenizer.from_pretrained(path)
    config = transformers.AutoConfig.from_pretrained(path)
    cls = transformers.AutoModelForCausalLM if config.model_type == "gpt2" else transformers.AutoModel
    reference = cls.from_pretrained(path, attn_implementation="eager").double().eval()
    ours = load(path, backend="numpy")
    with torch.no_grad():
        out = reference(**tok(*texts, return_tensors="pt"), output_attentions=True)
        single = tok(texts[0], return_tensors="pt")
        alone = reference(**single, output_hidden_states=True)
    want = np.stack([a[0].numpy() for a in out.attentions])  # (L, h, T, T)
    got = ours.attentions(ours.encode(*texts))
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-10
    hidden = alone.hidden_states[-1][0].numpy()  # (T, d): after ln_f for GPT-2
    np.testing.assert_allclose(ours.embed([texts[0]])[0], hidden.mean(axis=0), rtol=0, atol=1e-4)
    if config.model_type == "gpt2":
        logits, _ = ours.logits_and_attentions(single["input_ids"][0].tolist())
        np.testing.assert_allclose(logits, alone.logits[0].numpy(), rtol=0, atol=1e-9)


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
    from attncli.transformer import load

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


def test_expected_shapes_by_hand():
    """The shape of every tensor each forward pass reads, from config.json, worked by hand (GPT-2's
    Conv1D stores (in, out); n_inner null means 4 * n_embd; ELECTRA's embeddings are
    embedding_size wide; a size config.json leaves out is transformers' default for the family)."""
    from attncli.transformer import bert, distilbert, gpt2

    g = gpt2.expected({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "vocab_size": 10, "n_positions": 6, "n_inner": None})
    assert g == {"wte.weight": (10, 8), "wpe.weight": (6, 8), "ln_f.weight": (8,), "ln_f.bias": (8,),
                 "h.0.ln_1.weight": (8,), "h.0.ln_1.bias": (8,), "h.0.ln_2.weight": (8,), "h.0.ln_2.bias": (8,),
                 "h.0.attn.c_attn.weight": (8, 24), "h.0.attn.c_attn.bias": (24,),
                 "h.0.attn.c_proj.weight": (8, 8), "h.0.attn.c_proj.bias": (8,),
                 "h.0.mlp.c_fc.weight": (8, 32), "h.0.mlp.c_fc.bias": (32,),
                 "h.0.mlp.c_proj.weight": (32, 8), "h.0.mlp.c_proj.bias": (8,)}
    assert gpt2.expected({"model_type": "gpt2", "n_embd": 8, "n_layer": 2, "n_inner": 5})["h.1.mlp.c_fc.weight"] == (8, 5)
    unstated = gpt2.expected({"model_type": "gpt2", "n_layer": 1})  # GPT2Config's defaults
    assert unstated["h.0.attn.c_attn.weight"] == (768, 2304) and unstated["h.0.mlp.c_fc.bias"] == (3072,)
    assert unstated["wte.weight"] == (50257, 768) and unstated["wpe.weight"] == (1024, 768)
    b = bert.expected({"model_type": "electra", "hidden_size": 8, "embedding_size": 4, "intermediate_size": 16,
                       "vocab_size": 10, "max_position_embeddings": 6, "type_vocab_size": 2, "num_hidden_layers": 1})
    assert b["embeddings.word_embeddings.weight"] == (10, 4) and b["embeddings.position_embeddings.weight"] == (6, 4)
    assert b["embeddings.token_type_embeddings.weight"] == (2, 4) and b["embeddings.LayerNorm.bias"] == (4,)
    assert b["embeddings_project.weight"] == (8, 4) and b["embeddings_project.bias"] == (8,)
    assert b["encoder.layer.0.attention.self.key.weight"] == (8, 8) and b["encoder.layer.0.attention.output.dense.bias"] == (8,)
    assert b["encoder.layer.0.intermediate.dense.weight"] == (16, 8) and b["encoder.layer.0.output.dense.weight"] == (8, 16)
    assert b["encoder.layer.0.output.LayerNorm.weight"] == (8,) and len(b) == 7 + 16
    assert bert.expected({"model_type": "bert", "hidden_size": 8, "embedding_size": 4,
                          "num_hidden_layers": 0})["embeddings.word_embeddings.weight"] == (30522, 8)
    d = distilbert.expected({"model_type": "distilbert", "dim": 8, "hidden_dim": 16, "vocab_size": 10, "max_position_embeddings": 6, "n_layers": 2})
    assert d["embeddings.word_embeddings.weight"] == (10, 8) and d["embeddings.position_embeddings.weight"] == (6, 8)
    assert d["transformer.layer.1.ffn.lin1.weight"] == (16, 8) and d["transformer.layer.1.ffn.lin2.weight"] == (8, 16)
    assert d["transformer.layer.1.attention.v_lin.bias"] == (8,) and d["transformer.layer.0.sa_layer_norm.weight"] == (8,)
    assert len(d) == 4 + 2 * 16


def test_a_gpt2_position_table_shorter_than_n_positions_is_damage(tiny_gpt2_dir, tmp_path):
    import json
    import shutil

    from attncli.transformer import load

    target = tmp_path / "gpt2"
    shutil.copytree(tiny_gpt2_dir, target)
    config = json.loads((target / "config.json").read_text())
    rows = config["n_positions"]
    config["n_positions"] = rows + 24
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeFailure, match=rf"^damaged model: wpe\.weight: shape \({rows}, 32\), but config\.json "
                                             rf"implies \({rows + 24}, 32\)$"):
        load(str(target), backend="numpy")


def test_check_regular_follows_a_symlink_as_the_hugging_face_cache_links_snapshots_to_blobs(tmp_path):
    blob = tmp_path / "blobs" / "5f3a"
    blob.parent.mkdir()
    blob.write_bytes(b"x" * 10)
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "vocab.txt").symlink_to(blob)
    (snapshot / "tokenizer.json").symlink_to(blob)
    config_check.check_regular(snapshot / "vocab.txt", 10)
    config_check.check_files(snapshot)
    with pytest.raises(RuntimeFailure, match=r"^damaged model: vocab\.txt: it is 10 bytes, more than the 9 it can be$"):
        config_check.check_regular(snapshot / "vocab.txt", 9)


def test_check_files_refuses_a_tokenizer_json_past_its_own_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(config_check, "TOKENIZER_BYTES", 100)
    (tmp_path / "tokenizer.json").write_bytes(b"{" + b" " * 200 + b"}")
    with pytest.raises(RuntimeFailure, match=r"^damaged model: tokenizer\.json: it is 202 bytes, more than the 100 "):
        config_check.check_files(tmp_path)


def test_report_unused_joins_both_problems():
    with pytest.raises(RuntimeFailure) as caught:
        weight_check.report_unused("m", missing=["a"], unexpected=["b"])
    assert str(caught.value) == ("model 'm': 1 weight(s) the model needs are not in the checkpoint (a: they would be "
                                 "random); 1 weight(s) in the checkpoint are not used by the model (b: its attention "
                                 "would be computed without them): attn will not show attention that is silently "
                                 "wrong (--allow-missing-weights runs it anyway, with a warning)")


def test_gpt2_unsupported_by_hand():
    from attncli.transformer import gpt2

    sizes = {"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1}
    assert gpt2.unsupported(sizes) is None  # activation_function absent: GPT-2's gelu_new
    assert gpt2.unsupported({**sizes, "activation_function": "relu"}) is None
    assert gpt2.unsupported({**sizes, "add_cross_attention": True}) == "cross-attention"
    assert gpt2.unsupported({**sizes, "activation_function": "swiglu"}) == "activation_function 'swiglu'"
    assert gpt2.unsupported({**sizes, "n_head": 3}) == "n_embd not a multiple of n_head"
    assert gpt2.unsupported({**sizes, "n_layer": 0}) == "n_embd not a multiple of n_head"


def test_each_size_accepts_its_smallest_and_largest_and_nothing_past_them(tmp_path):
    """SIZES holds (smallest, largest) allowed: both ends are allowed, one past either is damage."""
    for field, (low, high) in config_check.SIZES.items():
        config_check.check_config({field: low}, tmp_path)
        config_check.check_config({field: high}, tmp_path)
        assert damage({field: high + 1}, tmp_path) == f"damaged model: config.json: {field}: {high + 1} is outside {low}..{high:,}"
        assert damage({field: low - 1}, tmp_path) == f"damaged model: config.json: {field}: {low - 1} is outside {low}..{high:,}"


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


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_read_json_follows_the_caches_symlinks_refuses_a_fifo_and_keeps_its_limit(tmp_path):
    blob = tmp_path / "blob"
    blob.write_text('{"model_type": "bert", "padding": "' + "x" * 40 + '"}')
    (tmp_path / "config.json").symlink_to(blob)
    assert config_check.read_json(tmp_path / "config.json")["model_type"] == "bert"
    os.mkfifo(tmp_path / "tokenizer_config.json")
    with pytest.raises(RuntimeFailure, match=r"^damaged model: tokenizer_config\.json: it is a FIFO, not a regular file$"):
        config_check.read_json(tmp_path / "tokenizer_config.json")
    assert config_check.read_optional_json(tmp_path / "config.json", 100)["model_type"] == "bert"
    with pytest.raises(RuntimeFailure, match=r"^damaged model: config\.json: "):
        config_check.read_optional_json(tmp_path / "config.json", 20)


def test_distilbert_unsupported_by_hand():
    from attncli.transformer import distilbert

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
    from attncli.transformer import load

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
