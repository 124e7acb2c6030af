"""Encoding a text for a pretrained model (attncli/hf/text/encoding.py, pretrained.py): a text too
long or not a string, the encoding built from tokenizers' output by hand, the tokenizer's length
limit, the pooling modes, token ids outside the vocabulary and a text with no tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needed

from attncli.hf.text import encoding
from attncli.errors import BadInput


# --- encoding.py --------------------------------------------------------------------------------


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


def test_an_encoding_from_tokenizers_gives_segments_words_and_type_ids():
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


def test_max_positions_takes_a_tokenizer_limit_of_one(tmp_path):
    """max_positions: the tokenizer's model_max_length when smaller than the position table, for
    every positive limit (1 included); 0 and absurd limits (>= 10**7, transformers' 'no limit'
    placeholder is 1e30) are ignored."""
    from attncli.hf.backends.pretrained_base import max_positions

    config = {"model_type": "bert", "max_position_embeddings": 512}
    for limit, want in ((1, 1), (2, 2), (511, 511), (600, 512), (0, 512), (10**7, 512)):
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": limit}))
        assert max_positions(config, tmp_path) == want, limit


def test_mean_pooling_of_one_token_is_that_token_exactly():
    """pool: mean = sum over the real tokens / their number; a row with one real token is that
    token's vector itself (float64, exactly); mean_sqrt_len divides by sqrt(n)."""
    from attncli.hf.backends.pretrained_base import pool

    rng = np.random.default_rng(5)
    hidden = rng.normal(size=(2, 3, 4))  # (B, T, d) float64
    mask = np.array([[True, False, False], [True, True, True]])
    got = pool(hidden, mask, ("mean", "mean_sqrt_len"))
    np.testing.assert_array_equal(got[0, :4], hidden[0, 0])
    np.testing.assert_array_equal(got[0, 4:], hidden[0, 0])
    np.testing.assert_allclose(got[1, :4], hidden[1].sum(axis=0) / 3, rtol=1e-15)
    np.testing.assert_allclose(got[1, 4:], hidden[1].sum(axis=0) / np.sqrt(3), rtol=1e-15)


def test_an_unknown_pooling_mode_is_refused_even_beside_a_known_one():
    from attncli.errors import BadInput
    from attncli.hf.backends.pretrained_base import check_pooling

    assert check_pooling(["mean", "cls", "mean"]) == ("cls", "mean")  # POOLINGS order, once each
    for modes, named in ((["mean", "median"], "median"), ("median", "median"), ([], "none")):
        with pytest.raises(BadInput) as caught:
            check_pooling(modes)
        assert str(caught.value) == f"pooling must be one or more of cls, max, mean, mean_sqrt_len, not {named}"


def test_token_ids_outside_the_vocabulary_are_refused_naming_the_range(tiny_bert_dir):
    import json

    from attncli.errors import BadInput
    from attncli.hf import load

    vocab = json.loads((tiny_bert_dir / "config.json").read_text())["vocab_size"]
    model = load(tiny_bert_dir)
    np.testing.assert_array_equal(model.check_ids([0, vocab - 1]), [0, vocab - 1])
    for ids in ([vocab], [-1, 0]):
        with pytest.raises(BadInput) as caught:
            model.check_ids(ids)
        assert str(caught.value) == f"token ids must lie in 0..{vocab - 1}"


def test_a_text_with_no_tokens_is_refused_with_the_way_out(tiny_bert_dir):
    from attncli.errors import BadInput
    from attncli.hf import load

    with pytest.raises(BadInput) as caught:
        load(tiny_bert_dir).encode("   ", special=False)
    assert str(caught.value) == "the text gives no tokens: give the model something to read"
