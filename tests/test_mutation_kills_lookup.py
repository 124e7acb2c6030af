"""Tests that kill the mutants ``.ci/mutation lookup`` left alive (docs/mutation.md, issue 24).

Each checks a documented behaviour of the lookup core against a hand-worked value or a formula
written here: the dtypes the docstrings give, the messages a person reads, how an exact key
behaves like a dict when other words have no vector.
"""

from __future__ import annotations

import numpy as np
import pytest

from _lookup_fixtures import WORDS, save_fasttext_like, save_plain
from attncli.errors import BadInput, UnknownWord
from attncli.lookup import dictionary as core
from attncli.lookup.keyindex import KeyIndex, embed_tokens
from attncli.vectors.model import load_vectors


@pytest.fixture
def plain(attn_home):
    save_plain("plain")  # no subword vectors: a word outside WORDS has no vector at all
    return load_vectors("plain")


@pytest.fixture
def tiny(attn_home):
    save_fasttext_like("tiny")
    return load_vectors("tiny")


# ---------------------------------------------------------------- embed_tokens


def test_embed_tokens_gives_float32_rows_equal_to_the_stored_ones(plain, tiny):
    out = embed_tokens(plain, ["color", "brand", "color"])
    assert out.dtype == np.float32 and out.shape == (3, plain.dim)
    stored = np.asarray(plain.vectors)
    np.testing.assert_array_equal(out, stored[[WORDS.index("color"), WORDS.index("brand"), WORDS.index("color")]])
    assert embed_tokens(tiny, ["colour", "color"]).dtype == np.float32  # a subword row and a stored one


def test_an_unknown_word_in_a_model_without_subwords_names_the_model_and_the_way_out(plain):
    with pytest.raises(UnknownWord) as info:
        embed_tokens(plain, ["color", "colour"])
    message = str(info.value)
    assert message.startswith("unknown word 'colour': model 'plain' has no subword vectors")
    assert "--algorithm fasttext" in message
    missing: list[int] = []
    out = embed_tokens(plain, ["colour", "color", "zzqx"], missing=missing)  # collected, not raised
    assert missing == [0, 2]
    np.testing.assert_array_equal(out[[0, 2]], 0.0)
    np.testing.assert_array_equal(out[1], np.asarray(plain.vectors)[WORDS.index("color")])


# ---------------------------------------------------------------- a query word without a vector


def test_a_query_word_without_a_vector_is_bad_input_unless_it_is_an_exact_key(plain):
    index = KeyIndex(plain, ["colour", "brand"])  # the key 'colour' has no vector in this model
    with pytest.raises(BadInput, match="^query 'colour': unknown word 'colour': model 'plain' has no subword"):
        index.query_vector("colour")
    with pytest.raises(BadInput, match="^query 'colour': unknown word"):
        index.check_query("colour")  # what a batch checks before answering any query
    index.check_query("colour", allow_no_vector=True)  # an exact key: answered like a dict
    tokens, q = index.query_vector("colour", allow_no_vector=True)
    assert tokens == ["colour"] and q.shape == (plain.dim,) and not q.any()


def test_an_exact_key_without_a_vector_answers_like_a_dict(plain):
    res = core.lookup("colour", {"colour": 1, "brand": 2}, plain)
    assert res.exact and [(e.key, e.weight) for e in res.entries] == [("colour", 1.0), ("brand", 0.0)]
    assert res.cosine.tolist() == [0.0, 0.0]  # neither the query nor the key has c(text): cosine 0
    assert res.soft_value == 1.0
