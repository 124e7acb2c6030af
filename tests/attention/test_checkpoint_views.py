"""The view of a pretrained model (attncli.attention.checkpoint_views and model_view): select's blocks and
head weights, the view's JSON meta, the pretrained document's words, the layer range and the model
view's JSON against transformers, checked by plain indexing or hand-worked cases."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from _tolerance import f32_close

from attncli.errors import BadInput


SENTENCE = "time flies like an arrow"


# --- the model view --------------------------------------------------------------------------------


def test_layer_range_is_inclusive_of_both_ends():
    """'A-B' covers layers A..B, both included: (A, B + 1) as a Python range; 'A' is (A, A + 1)."""
    from attncli.attention.model_view import layer_range

    assert layer_range("1-2", 4) == (1, 3) and layer_range("3", 4) == (3, 4) and layer_range(None, 4) == (0, 4)
    assert list(range(*layer_range("0-3", 4))) == [0, 1, 2, 3]
    with pytest.raises(BadInput):
        layer_range("2-4", 4)


def test_model_view_json_of_one_layer_of_a_pair_against_transformers(tiny_bert_dir):
    """--model-view --layers 1-1 --json on a pair: layer_range [1, 1], that layer's heads equal to
    transformers' output_attentions, and the documented per-row segments and special flags equal
    to the tokenizer's own token_type_ids and special-tokens mask."""
    torch = needed("torch")
    from transformers import AutoModel, AutoTokenizer

    pair = "fruit flies like a banana"
    result = CliRunner().invoke(__import__("attncli.cli.main", fromlist=["app"]).app,
                                ["matrix", SENTENCE, "--pair", pair, "--transformer", str(tiny_bert_dir),
                                 "--model-view", "--layers", "1-1", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    tok = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    model = AutoModel.from_pretrained(str(tiny_bert_dir), attn_implementation="eager").eval()
    enc = tok(SENTENCE, pair, return_tensors="pt", return_special_tokens_mask=True)
    special = enc.pop("special_tokens_mask")[0].bool().tolist()
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions[1][0].double().numpy()  # (h, T, T)
    assert doc["layer_range"] == [1, 1] and len(doc["classes"]) == 1 and len(doc["classes"][0]) == att.shape[0]
    f32_close(np.array(doc["attentions"]), att, depth=2, length=37, per_element=True, printed=5e-7)  # tiny BERT, layer 1
    types = enc["token_type_ids"][0].tolist()
    assert doc["special"] == special
    assert doc["segments"] == [None if s else "ab"[t] for s, t in zip(special, types)]


def test_select_of_one_query_row_keeps_each_of_two_heads_and_their_mean():
    """A block with one query row (sentence A = one token) of a 2-head layer: the view's weights are
    the heads' mean and head_weights the 2 heads, taken here by plain indexing; the same for the
    words view (one query word). Without --filter no block note is added."""
    from attncli.attention.checkpoint_views import select

    rng = np.random.default_rng(5)
    A = rng.random((1, 2, 3, 3))  # (L, h, T, T)
    A /= A.sum(axis=-1, keepdims=True)
    kw = dict(layer=0, tokens=["x", "y", "z"], segments=["a", "b", "b"], special=[False] * 3,
              word_ids=[0, 1, 2], word_texts=["x", "y", "z"])
    view = select(A, block="a-b", words=True, **kw)
    block = A[0][:, :1, 1:]  # (h, 1, 2): query 0, keys 1 and 2
    assert np.allclose(view.weights, (block[0] + block[1]) / 2, rtol=1e-12, atol=0)
    assert view.head_weights is not None and np.array_equal(view.head_weights, block)
    assert view.words.head_weights is not None and np.allclose(view.words.head_weights, block, rtol=1e-12, atol=0)
    assert np.allclose(view.words.weights, (block[0] + block[1]) / 2, rtol=1e-12, atol=0)
    assert select(A, block="all", **kw).notes == []


def test_view_meta_names_hide_special_and_the_heads_kv_head():
    """The view's JSON meta (docs/transformers.md): 'hide_special' as given and 'kv_head', the
    key/value head a query head shares (head 3 of 4 over 2 kv heads: kv head 1), null without --head."""
    from attncli.attention.checkpoint_views import view_meta

    model = SimpleNamespace(name="m", model_type="llama", backend="numpy", is_decoder=True, layers=1, heads=4,
                            kv_heads=2, kv_head=lambda h: h // 2)
    enc = SimpleNamespace(truncated=False)
    meta = view_meta(model, enc, layer=0, head=3, rollout=False, block=None, hide_special=True, words=False)
    assert meta["hide_special"] is True and meta["kv_head"] == 1 and meta["kv_heads"] == 2
    assert view_meta(model, enc, layer=0, head=None, rollout=False, block=None, hide_special=False,
                     words=False)["kv_head"] is None


# --- the pretrained view --------------------------------------------------------------------------


def _cross_keys():
    from attncli.attention.checkpoint_views import KeySide

    return KeySide(["k0", "k1", "k2"], [None] * 3, [False] * 3, [0, 1, 2], ["k0", "k1", "k2"])


def test_select_of_cross_attention_without_rollout_or_filter_is_the_heads_mean():
    """Cross-attention (rows and columns different tokens): a plain layer view is allowed and is the
    heads' mean; only rollout, flow and --filter are refused."""
    from attncli.attention.checkpoint_views import select

    rng = np.random.default_rng(1)
    A = rng.random((1, 2, 2, 3))  # (L, h, T, S)
    A /= A.sum(axis=-1, keepdims=True)
    kw = dict(layer=0, tokens=["q0", "q1"], segments=[None, None], special=[False, False],
              word_ids=[0, 1], word_texts=["q0", "q1"], keys=_cross_keys())
    view = select(A, **kw)
    assert np.allclose(view.weights, (A[0, 0] + A[0, 1]) / 2, rtol=1e-12, atol=0)
    with pytest.raises(BadInput, match="rollout, flow and --filter"):
        select(A, rollout=True, **kw)


def test_select_names_the_bertviz_placement_of_special_tokens():
    """--filter a-b with bertviz's placement: the note says where the special tokens went."""
    from attncli.attention.checkpoint_views import select

    T = 5  # [CLS] x [SEP] y [SEP]
    A = np.full((1, 1, T, T), 1 / T)
    view = select(A, layer=0, block="a-b", block_specials="bertviz",
                  tokens=["[CLS]", "x", "[SEP]", "y", "[SEP]"], segments=[None, "a", None, "b", None],
                  special=[True, False, True, False, True], word_ids=[None, 0, None, 1, None], word_texts=["x", "y"])
    assert any(n.endswith("; special tokens placed as bertviz does ([CLS] and the first [SEP] in A, "
                          "the last [SEP] in B)") for n in view.notes), view.notes


def test_pretrained_document_words_carry_each_heads_weights():
    """--json --words of a 2-head layer: words.head_weights are the heads' word matrices (one token
    per word here, so the heads' own rows)."""
    from attncli.attention.checkpoint_views import document, select, to_json

    rng = np.random.default_rng(2)
    A = rng.random((1, 2, 3, 3))
    A /= A.sum(axis=-1, keepdims=True)
    view = select(A, layer=0, words=True, tokens=["x", "y", "z"], segments=[None] * 3, special=[False] * 3,
                  word_ids=[0, 1, 2], word_texts=["x", "y", "z"])
    doc = to_json(document(view, {}, segments=[None] * 3, special=[False] * 3))  # plain lists, 6 digits
    hw = doc["words"]["head_weights"]
    assert len(hw) == 2
    for hd in range(2):
        assert np.allclose(np.asarray(hw[hd], float), A[0, hd], rtol=1e-5, atol=0)  # fixed: to_json's 6 significant digits
