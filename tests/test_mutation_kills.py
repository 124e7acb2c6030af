"""Tests written for the mutants mutmut found alive (docs/mutation.md): each states a behaviour the
other tests left open. The mutants judged equivalent are listed there, with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from attncli.attention import masks
from attncli.attention.rollout import residual_attention, rollout
from attncli.attention.words import FILTERS, hide_special, merge_words, pair_block, word_groups, word_label
from attncli.errors import BadInput


def _float32_rows(rng, *shape):
    x = rng.random(shape).astype(np.float32) + np.float32(0.01)
    return x / x.sum(-1, keepdims=True)


def test_the_views_compute_in_float64_from_float32_weights():
    """The weights of a pretrained model arrive as float32; the views (rollout multiplies L
    matrices) are computed and returned in float64."""
    rng = np.random.default_rng(0)
    att = _float32_rows(rng, 3, 2, 4, 4)  # (L, h, T, T)
    assert residual_attention(att[0]).dtype == np.float64
    assert rollout(att).dtype == np.float64
    assert merge_words(att[0, 0], [[0], [1, 2], [3]], [[0], [1, 2], [3]]).dtype == np.float64
    keep = np.array([False, True, True, False])
    out, share = hide_special(att[0, 0], keep, keep)
    assert out.dtype == np.float64 and share.dtype == np.float64
    # the values: each against the float64 computation written out (a float32 mean of the heads
    # is off by ~1e-8)
    heads = att[0].astype(np.float64).mean(axis=0)  # (T, T)
    def by_formula(layer):  # rownorm(mean of the heads + I), Abnar & Zuidema 2020
        M = layer.mean(axis=0) + np.eye(4)
        return M / M.sum(axis=-1, keepdims=True)

    np.testing.assert_allclose(residual_attention(att[0]), by_formula(att[0].astype(np.float64)), rtol=0, atol=1e-15)
    R = np.eye(4)
    for layer in att.astype(np.float64):
        R = by_formula(layer) @ R
    np.testing.assert_allclose(rollout(att), R, rtol=0, atol=1e-15)
    A = att[0, 0].astype(np.float64)
    np.testing.assert_allclose(out, A[1:3, 1:3] / A[1:3, 1:3].sum(-1, keepdims=True), rtol=0, atol=1e-15)


def test_a_pairs_second_sentence_starts_new_words_even_with_the_same_word_id():
    assert word_groups([0, 0], ["a", "b"]) == [[0], [1]]  # word 0 of A, then word 0 of B
    assert word_groups([0, 0], ["a", "a"]) == [[0, 1]]
    assert word_groups([0, 0]) == [[0, 1]]


def test_word_label_drops_only_the_space_marks():
    assert word_label(["ĠXylophone"]) == "Xylophone"
    assert word_label(["▁X", "X"]) == "XX"


def test_an_unknown_filter_names_every_choice():
    with pytest.raises(BadInput) as caught:
        pair_block(["a", "b"], "b-c")
    assert f"expected one of {', '.join(FILTERS)}" in str(caught.value)


def test_a_mask_with_nothing_masked_is_none():
    spec = masks.MaskSpec(causal=False, window=None)
    assert masks.build(spec, 3, 4, 4) is None  # every key real: no padding part
    assert masks.build(spec, 3, 4, 3)[:, 3].tolist() == [False] * 3


@pytest.mark.parametrize("i, j, n_real, expected", [
    (0, 1, 4, ["causal: key 1 comes after query 0"]),
    (1, 1, 4, []),  # a query sees itself
    (3, 0, 4, ["window: |0 - 3| = 3 > 2"]),
    (0, 2, 4, ["causal: key 2 comes after query 0"]),  # |2 - 0| = 2 is inside the window
    (0, 3, 3, ["causal: key 3 comes after query 0", "window: |3 - 0| = 3 > 2", "padding: key 3 is a pad token"]),
    (3, 2, 3, []),  # the last real key is not padding
    (4, 1, 5, ["window: |1 - 4| = 3 > 2"]),
])
def test_the_reasons_a_cell_is_masked_in_words(i, j, n_real, expected):
    spec = masks.MaskSpec(causal=True, window=2)
    assert masks.reasons(spec, i, j, n_real) == expected


def test_a_mask_describes_itself():
    assert masks.MaskSpec().describe() == "no mask"
    assert masks.MaskSpec(causal=True).describe() == "causal"
    assert masks.MaskSpec(causal=True, window=2, pad_to=8).describe() == "causal + window 2 + padding to 8"
    assert masks.MaskSpec(window=0).describe() == "window 0"


def test_a_row_with_no_attention_left_on_the_kept_keys_is_all_zero():
    A = np.array([[1.0, 0.0, 0.0], [0.2, 0.5, 0.3]])
    keep_rows, keep_cols = np.array([True, True]), np.array([False, True, True])
    for _ in range(20):  # fresh arrays each time: an uninitialised output would show garbage
        out, share = hide_special(A, keep_rows, keep_cols)
        assert out[0].tolist() == [0.0, 0.0] and share == pytest.approx([1.0, 0.2], abs=1e-15)
        np.testing.assert_allclose(out[1], [0.5 / 0.8, 0.3 / 0.8], rtol=0, atol=1e-15)
