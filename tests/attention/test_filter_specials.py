"""``--filter-specials bertviz``: a --filter block with the special tokens where bertviz puts them
([CLS] and the first [SEP] in sentence A, the last [SEP] in B), against a hand-worked token list
and transformers' own attentions; attn's default leaves them out of every block."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerance import f32_close, f32_size

from attncli.attention.words import bertviz_segments, pair_block
from test_transformer_cli import PAIR, SENTENCE, matrix_json, reference, run

# [CLS] time flies [SEP] fruit [SEP], segments as attncli.hf's Encoding gives them
SEGMENTS = [None, "a", "a", None, "b", None]


def test_bertviz_segments_by_hand():
    assert bertviz_segments(SEGMENTS) == ["a", "a", "a", "a", "b", "b"]
    # RoBERTa: <s> A </s> </s> B </s>: both separators between the sentences go to A
    assert bertviz_segments([None, "a", None, None, "b", None]) == ["a", "a", "a", "a", "b", "b"]


@pytest.mark.parametrize("block,specials,rows,cols", [
    ("a-b", "none", [1, 2], [4]),
    ("a-b", "bertviz", [0, 1, 2, 3], [4, 5]),
    ("b-a", "bertviz", [4, 5], [0, 1, 2, 3]),
    ("b-b", "bertviz", [4, 5], [4, 5]),
    ("all", "bertviz", [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]),
])
def test_pair_block_by_hand(block, specials, rows, cols):
    r, c = pair_block(SEGMENTS, block, specials)
    assert np.flatnonzero(r).tolist() == rows and np.flatnonzero(c).tolist() == cols


def test_bertviz_block_equals_the_reference(minilm_dir):
    att, tokens = reference(minilm_dir, SENTENCE, PAIR)
    first_b = tokens.index("fruit")
    doc = matrix_json(minilm_dir, SENTENCE, "--pair", PAIR, "--filter", "a-b", "--filter-specials", "bertviz",
                      "--layer", "3", "--head", "2")
    assert doc["tokens"] == ["[CLS]", *SENTENCE.split(), "[SEP]"] and doc["key_tokens"] == [*PAIR.split(), "[SEP]"]
    assert doc["rows"] == list(range(first_b)) and doc["cols"] == list(range(first_b, len(tokens)))
    rows = att[3, 2][:first_b].copy()  # (rows, T): the block inside its softmax rows, whose largest sizes it
    rows[:, first_b:] = doc["weights"]
    f32_close(rows, att[3, 2][:first_b], 4, f32_size(minilm_dir)[1], per_element=True,  # layer 3: depth 4
              printed=5e-6 * np.abs(rows), what="the a-b block")
    plain = matrix_json(minilm_dir, SENTENCE, "--pair", PAIR, "--filter", "a-b", "--layer", "3", "--head", "2")
    assert plain["tokens"] == SENTENCE.split() and plain["key_tokens"] == PAIR.split()


@pytest.mark.parametrize("args,needle", [
    (["--filter-specials", "bertviz"], "--filter a-a"),
    (["--pair", PAIR, "--filter-specials", "bertviz"], "--filter a-a"),
    (["--pair", PAIR, "--filter", "a-b", "--filter-specials", "cls"], "bertviz"),
])
def test_filter_specials_refusals(tiny_bert_dir, args, needle):
    result = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), *args)
    assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.stderr


def test_filter_specials_needs_transformer():
    result = run("matrix", SENTENCE, "--filter-specials", "bertviz")
    assert result.exit_code == 2 and "needs --transformer" in result.stderr
