"""``attn lookup --encoder``'s model directory (attncli/lookup/encoder.py): which Pooling config the
sentence-transformers files name (only a plain folder name inside the model directory is read;
other folders are refused), the messages of an encoder that is a decoder, has no
sentence-transformers files or names a pooling attn lacks, and the flags handed to the transformer
wing.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from _tolerance import f32_close, f32_size
from attncli.errors import BadInput, RuntimeFailure
from attncli.lookup.encoder import EncoderIndex, load_encoder, pooling_modes

CLS = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}  # a config that, read, says "cls"


def _modules(model: Path, pooling_path) -> None:
    entries = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    if pooling_path is not None:
        entries.append({"idx": 1, "name": "1", "path": pooling_path, "type": "sentence_transformers.models.Pooling"})
    (model / "modules.json").write_text(json.dumps(entries), encoding="utf-8")


def _config(folder: Path, flags: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(flags), encoding="utf-8")


def test_the_pooling_config_is_the_folder_modules_json_names_else_1_pooling(tmp_path):
    model = tmp_path / "m"
    _config(model / "1_Pooling", CLS)  # no modules.json: sentence-transformers' default folder
    assert pooling_modes(model) == ("cls",)
    _modules(model, None)  # a modules.json without a Pooling module: the default folder too
    assert pooling_modes(model) == ("cls",)
    _config(model / "2_Pool", {"pooling_mode_max_tokens": True})
    _modules(model, "2_Pool")  # the folder modules.json names for sentence_transformers.models.Pooling
    assert pooling_modes(model) == ("max",)
    (model / "modules.json").write_text(json.dumps([{"path": "2_Pool", "type": "Dense"}]), encoding="utf-8")
    assert pooling_modes(model) == ("cls",)  # another module's folder is not the Pooling one


@pytest.mark.parametrize("folder", ["", ".", "..", "sub/pool", "a\\b", 5, ["2_Pool"]])
def test_a_pooling_folder_that_is_not_a_plain_name_inside_the_model_is_not_read(tmp_path, folder):
    model = tmp_path / "m"
    model.mkdir()
    # each place the folder could lead to holds a config saying "cls": read, it would show
    _config(model, CLS)  # "" and "." lead to the model directory itself
    _config(tmp_path, CLS)  # ".." to its parent
    _config(model / "sub" / "pool", CLS)
    _config(model / "a\\b", CLS)  # on POSIX a backslash is a plain character of a file name
    _config(model / "2_Pool", CLS)
    _modules(model, folder)
    assert pooling_modes(model) == ("mean",)


def test_a_modules_json_that_is_not_a_list_is_damage_naming_the_file(tmp_path):
    (tmp_path / "modules.json").write_text('{"path": "1_Pooling"}', encoding="utf-8")
    with pytest.raises(RuntimeFailure) as info:
        pooling_modes(tmp_path)
    assert str(info.value) == "damaged model: modules.json: it is not a list of modules"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_decoder_is_refused_with_the_way_out(tiny_gpt2_dir):
    with pytest.raises(BadInput) as info:
        load_encoder(str(tiny_gpt2_dir))
    assert str(info.value) == (f"--encoder '{tiny_gpt2_dir}' is a decoder (gpt2), not an encoder: "
                               "give a sentence encoder such as all-MiniLM-L6-v2")


def test_the_warnings_of_an_encoder_not_trained_for_sentences_or_with_a_pooling_attn_lacks(tiny_bert_dir, tmp_path, capsys):
    load_encoder(str(tiny_bert_dir))
    assert _flat(capsys.readouterr().err) == _flat(
        f"warning: '{tiny_bert_dir}' has no sentence-transformers files (modules.json): it is an encoder, "
        "but not one trained for sentence similarity, so its cosines may mean little")
    model = tmp_path / "st"
    shutil.copytree(tiny_bert_dir, model)
    _modules(model, "1_Pooling")
    _config(model / "1_Pooling", {"pooling_mode_weightedmean_tokens": True, "pooling_mode_lasttoken": True})
    load_encoder(str(model))
    assert _flat(capsys.readouterr().err) == _flat(
        f"warning: '{model}' was trained with weightedmean, lasttoken pooling, which attn does not have; "
        "attn uses mean pooling")


def test_allow_missing_weights_reaches_the_loader(tiny_bert_dir, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    model = tmp_path / "extra"
    shutil.copytree(tiny_bert_dir, model)
    tensors = load_file(str(model / "model.safetensors"))
    tensors["encoder.layer.0.attention.self.distance_embedding.weight"] = np.ones((79, 8), np.float32)
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(RuntimeFailure, match="distance_embedding"):  # by default a weight it does not use is refused
        load_encoder(str(model))
    assert load_encoder(str(model), allow_missing_weights=True).path == model  # asked: loaded, with a warning
    assert "distance_embedding" in capsys.readouterr().err


def test_pieces_are_the_encoders_tokens_truncated_to_its_positions(tiny_bert_dir):
    from transformers import AutoTokenizer

    text = " ".join(["time flies like an arrow"] * 30)  # 150 words: past the 40 positions of the tiny BERT
    reference = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    ids = reference(text, truncation=True, max_length=40)["input_ids"]
    index = EncoderIndex(load_encoder(str(tiny_bert_dir)), ["color"], ngram_weight=0.0)
    assert index.pieces(text) == reference.convert_ids_to_tokens(ids)
    assert len(ids) == 40


def test_unit_divides_each_row_by_its_norm_in_float64_and_leaves_a_zero_row_zero():
    import warnings

    from attncli.lookup.encoder import unit

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 warning, no NaN
        got = unit(np.array([[3, 4], [0, 0]]))  # integers: by hand, (3, 4) / 5
        assert got.dtype == np.float64 and got.tolist() == [[0.6, 0.8], [0.0, 0.0]]
        assert unit(np.array([[0.0, 2.0]], dtype=np.float32)).dtype == np.float64
        batch = np.arange(24, dtype=np.float64).reshape(2, 3, 4)  # rows along the last axis
        batch[1, 2] = 0.0
        expected = [[[x / math.sqrt(sum(y * y for y in row)) if any(row) else 0.0 for x in row] for row in block]
                    for block in batch.tolist()]
        np.testing.assert_allclose(unit(batch), expected, rtol=1e-15, atol=0)


def test_an_encoder_index_blends_with_the_weight_given_else_the_encoders_own(tiny_bert_dir, tmp_path):
    from attncli.lookup.encoder import unit

    model = tmp_path / "all-mpnet-base-v2"  # params.ENCODER_NGRAM_WEIGHTS names it: 0.15
    shutil.copytree(tiny_bert_dir, model)
    encoder = load_encoder(str(model))
    keys = ["brand", "model", "color"]
    assert EncoderIndex(encoder, keys).ngram_weight == 0.15
    for weight in (0.0, 0.15, 1.0):
        index = EncoderIndex(encoder, keys, ngram_weight=weight)
        _, cosine, ngram, similarity = index.score("colour")
        e = unit(encoder.embed(keys + ["colour"]))
        f32_close(cosine, e[:3] @ e[3], *f32_size(model), scale=1.0)  # float32 forward passes, batched otherwise
        np.testing.assert_allclose(similarity, (1 - weight) * cosine + weight * ngram, rtol=0, atol=1e-12)


def test_an_encoder_refuses_a_query_with_no_word_by_name(tiny_bert_dir):
    index = EncoderIndex(load_encoder(str(tiny_bert_dir)), ["color"])
    with pytest.raises(BadInput) as info:
        index.check_query(" ?! ")
    assert str(info.value) == "the query ' ?! ' has no word in it (letters or digits) to look up"
    assert index.check_query("Top speed!") == ["top", "speed"]
