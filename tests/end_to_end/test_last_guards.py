"""Every last guard tested by itself (issue 24): each holds today only behind earlier guards, so
a test of the whole command never sees it fail. Here each is called directly with what the
earlier guards normally stop (NaN, infinity), and each pooling is compared unnormalised with its
formula, so a lost scale (mean_sqrt_len computed as a plain mean) cannot hide behind a unit
vector."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from _tolerance import f32_close, f32_size

BAD_NUMBERS = [math.nan, math.inf, -math.inf]


def _nested(x):
    return [{"value": x}, {"deep": [1.0, {"x": [0.5, x]}]}, x]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=["nan", "inf", "-inf"])
def test_emit_json_refuses_nan_and_infinity_and_writes_nothing(bad, capsys):
    from attncli.cli.common import emit_json

    for obj in _nested(bad):
        for lines in (False, True):
            with pytest.raises(ValueError):
                emit_json(obj, lines=lines)
            assert capsys.readouterr().out == ""  # refused before a byte reached stdout
    emit_json({"value": 1.5})
    assert json.loads(capsys.readouterr().out) == {"value": 1.5}


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=["nan", "inf", "-inf"])
def test_the_matrix_document_refuses_nan_and_infinity(bad):
    from attncli.attention.document import Rows, encode_json, write_value

    with pytest.raises(ValueError):
        encode_json({"scale": bad})  # the encoder of every scalar field of attn matrix --json
    with pytest.raises(ValueError, match="NaN or infinity"):
        Rows(np.array([[0.5, bad]]))
    masked = Rows(np.array([[0.5, bad]]), mask=np.array([[True, False]]))  # a masked cell prints as null
    out = io.StringIO()
    write_value(masked, out.write, "")
    assert json.loads(out.getvalue()) == [[0.5, None]]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=["nan", "inf", "-inf"])
def test_the_store_refuses_to_write_nan_into_meta_json(tmp_path, bad):
    from attncli.vectors.store import write_json

    path = tmp_path / "meta.json"
    with pytest.raises(ValueError):
        write_json(path, {"dim": 8, "loss": bad})
    assert not path.exists() or "NaN" not in path.read_text() and "Infinity" not in path.read_text()


# -- poolings, unnormalised, each against its formula ---------------------------------------------

# a hand-worked example: 2 sentences, T = 3 tokens, d = 2; the second has one padding token
HIDDEN = np.array([[[1.0, -2.0], [3.0, 4.0], [-5.0, 6.0]],
                   [[2.0, 0.0], [-4.0, 8.0], [100.0, 100.0]]])  # (2, 3, 2)
MASK = np.array([[True, True, True], [True, True, False]])  # (2, 3)
BY_HAND = {
    "cls": [[1.0, -2.0], [2.0, 0.0]],
    "max": [[3.0, 6.0], [2.0, 8.0]],  # the padding's 100s never count
    "mean": [[-1 / 3, 8 / 3], [-1.0, 4.0]],
    "mean_sqrt_len": [[-1 / math.sqrt(3), 8 / math.sqrt(3)], [-2 / math.sqrt(2), 8 / math.sqrt(2)]],
}


@pytest.mark.parametrize("mode", list(BY_HAND))
def test_each_pooling_equals_its_hand_worked_value(mode):
    from attncli.hf.backends.pretrained_base import pool

    np.testing.assert_allclose(pool(HIDDEN, MASK, (mode,)), BY_HAND[mode], rtol=0, atol=1e-12)


def test_several_poolings_concatenate_in_sentence_transformers_order():
    from attncli.hf.backends.pretrained_base import pool

    got = pool(HIDDEN, MASK, ("mean_sqrt_len", "cls", "max", "mean"))  # given in any order
    expected = np.concatenate([BY_HAND[m] for m in ("cls", "max", "mean", "mean_sqrt_len")], axis=1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", ["cls", "max", "mean", "mean_sqrt_len"])
def test_embed_is_each_pooling_of_transformers_hidden_state_unnormalised(tiny_bert_dir, mode):
    """attn's NumPy forward pass + pool, before any normalisation, against transformers' own last
    hidden state pooled by the formula written here."""
    from _lookup_fixtures import transformers_poolings
    from attncli.hf import load

    texts = ["colour", "top speed", "The price of a car, in US dollars (before taxes)."]
    expected = transformers_poolings(tiny_bert_dir, texts)[mode]  # (n, d)
    got = load(str(tiny_bert_dir)).embed(texts, (mode,))  # (n, d)
    assert np.abs(expected).max() > 0.1  # a scale to lose
    f32_close(got, expected, *f32_size(tiny_bert_dir))  # against transformers' float32 hidden state
