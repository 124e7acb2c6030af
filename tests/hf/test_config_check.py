"""A stranger's model directory checked before any library opens it (attncli/hf/checks/config_check.py):
JSON read with bounded depth and bytes and no NaN, every file a library may open checked by name
(regular files, symlinks as the Hugging Face cache makes them, FIFOs refused), every config field's
range at both ends, the parameter count against the weights, and trust_remote_code's auto_map refused."""

from __future__ import annotations

import os

import pytest

from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.checks import config_check


# --- config_check.py ----------------------------------------------------------------------------


def nested(levels: int) -> list:
    """A list nested ``levels`` deep: [[...[]...]] (levels = 1 is [])."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_json_depth_counts_nesting_without_recursing():
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


def test_the_parameter_count_is_the_projections_and_the_embedding_tables():
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


def test_each_size_accepts_its_smallest_and_largest_and_nothing_past_them(tmp_path):
    """SIZES holds (smallest, largest) allowed: both ends are allowed, one past either is damage."""
    for field, (low, high) in config_check.SIZES.items():
        config_check.check_config({field: low}, tmp_path)
        config_check.check_config({field: high}, tmp_path)
        assert damage({field: high + 1}, tmp_path) == f"damaged model: config.json: {field}: {high + 1} is outside {low}..{high:,}"
        assert damage({field: low - 1}, tmp_path) == f"damaged model: config.json: {field}: {low - 1} is outside {low}..{high:,}"


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
