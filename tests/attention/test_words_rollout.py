"""Word merging, hidden special tokens, pair blocks and attention rollout: hand-worked and properties."""

from __future__ import annotations

import numpy as np
import pytest

from attncli.attention.rollout import residual_attention, rollout
from attncli.attention.words import FILTERS, hide_special, merge_words, pair_block, word_groups, word_label
from attncli.errors import BadInput


def random_rows(rng, *shape):
    x = rng.random(shape) + 0.01
    return x / x.sum(-1, keepdims=True)


def test_word_groups_from_word_ids_restart_in_the_second_sentence():
    # [CLS] time fl ##ies [SEP] fruit fl ##ies [SEP]: B's word ids start at 0 again
    ids = [None, 0, 1, 1, None, 0, 1, 1, None]
    seg = [None, "a", "a", "a", None, "b", "b", "b", None]
    assert word_groups(ids, seg) == [[0], [1], [2, 3], [4], [5], [6, 7], [8]]
    assert word_groups([0, 0, 0]) == [[0, 1, 2]]
    assert word_groups([None, None]) == [[0], [1]]  # two special tokens stay two


def test_word_label():
    assert word_label(["fl", "##ies"]) == "flies"
    assert word_label(["Ġban", "ana"]) == "banana"
    assert word_label(["[CLS]"]) == "[CLS]"
    assert word_label(["##"]) == "##"


def test_merge_words_by_hand():
    A = np.array([[0.5, 0.3, 0.2],
                  [0.1, 0.6, 0.3],
                  [0.2, 0.2, 0.6]])
    M = merge_words(A, [[0], [1, 2]], [[0], [1, 2]])
    # row word 0 = row 0: key word 1 = 0.3 + 0.2; row word 1 = mean of rows 1, 2 summed over keys 1, 2
    np.testing.assert_allclose(M, [[0.5, 0.5], [(0.1 + 0.2) / 2, (0.9 + 0.8) / 2]])


def test_merge_words_properties():
    rng = np.random.default_rng(0)
    A = random_rows(rng, 3, 7, 7)  # (h, T, T)
    groups = [[0], [1, 2, 3], [4], [5, 6]]
    M = merge_words(A, groups, groups)
    assert M.shape == (3, 4, 4)
    np.testing.assert_allclose(M.sum(-1), 1.0)
    # a word of one piece keeps its weights: row 0 to key 4 and row 4 to key 0, exactly
    np.testing.assert_allclose(M[:, 0, 2], A[:, 0, 4])
    np.testing.assert_allclose(M[:, 2, 0], A[:, 4, 0])
    # every piece its own word: unchanged
    singles = [[t] for t in range(7)]
    np.testing.assert_allclose(merge_words(A, singles, singles), A)


def test_hide_special_by_hand():
    A = np.array([[0.7, 0.1, 0.1, 0.1],   # [CLS]
                  [0.2, 0.3, 0.1, 0.4],   # a
                  [0.1, 0.2, 0.2, 0.5],   # b
                  [0.25, 0.25, 0.25, 0.25]])  # [SEP]
    keep = np.array([False, True, True, False])
    out, dropped = hide_special(A, keep, keep)
    np.testing.assert_allclose(out, [[0.75, 0.25], [0.5, 0.5]])
    np.testing.assert_allclose(dropped, [0.6, 0.6])


def test_hide_special_rows_sum_to_one_and_zero_rows_stay_zero():
    rng = np.random.default_rng(1)
    A = random_rows(rng, 2, 6, 6)
    keep = np.array([False, True, True, True, True, False])
    out, dropped = hide_special(A, keep, keep)
    assert out.shape == (2, 4, 4)
    np.testing.assert_allclose(out.sum(-1), 1.0)
    np.testing.assert_allclose(dropped, A[:, 1:5][..., [0, 5]].sum(-1))
    B = np.array([[1.0, 0.0], [0.5, 0.5]])
    out, _ = hide_special(B, np.array([True, True]), np.array([False, True]))
    assert out.tolist() == [[0.0], [1.0]]  # no NaN for a row that only looked at a special token


def test_pair_block():
    seg = [None, "a", "a", None, "b", "b", "b", None]
    rows, cols = pair_block(seg, "a-b")
    assert rows.tolist() == [False, True, True, False, False, False, False, False]
    assert cols.tolist() == [False, False, False, False, True, True, True, False]
    rows, cols = pair_block(seg, "all")
    assert rows.all() and cols.all()
    with pytest.raises(BadInput, match="a-a"):
        pair_block(seg, "a-c")


def test_residual_attention_is_head_mean_plus_identity_renormalised():
    heads = np.array([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])  # mean [[1, 0], [.5, .5]]
    np.testing.assert_allclose(residual_attention(heads), [[1.0, 0.0], [0.25, 0.75]])


def test_rollout_two_layers_by_hand():
    layer0 = np.array([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])  # Â_0 = [[1, 0], [.25, .75]]
    layer1 = np.array([[[0.5, 0.5], [0.0, 1.0]]] * 2)  # Â_1 = [[.75, .25], [0, 1]]
    R = rollout(np.stack([layer0, layer1]))
    # Â_1 Â_0 = [[.75 + .25 * .25, .25 * .75], [.25, .75]]
    np.testing.assert_allclose(R, [[0.8125, 0.1875], [0.25, 0.75]])
    np.testing.assert_allclose(rollout(np.stack([layer0, layer1]), upto=0), [[1.0, 0.0], [0.25, 0.75]])


def test_rollout_properties():
    rng = np.random.default_rng(2)
    A = random_rows(rng, 4, 3, 6, 6)  # (L, h, T, T)
    R = rollout(A)
    np.testing.assert_allclose(R.sum(-1), 1.0)
    assert (R >= 0).all()
    identity = np.broadcast_to(np.eye(5), (3, 2, 5, 5))
    np.testing.assert_allclose(rollout(identity), np.eye(5))
    # the product order: with a causal first layer and a uniform second, R = Â_1 Â_0 (not Â_0 Â_1)
    A2 = np.stack([np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]] * 3)
    U = np.full((3, 6, 6), 1 / 6)
    expected = residual_attention(U) @ residual_attention(A2)
    np.testing.assert_allclose(rollout(np.stack([A2, U])), expected)
    assert not np.allclose(expected, residual_attention(A2) @ residual_attention(U))


def test_select_composes_hide_filter_and_words_by_hand():
    from attncli.attention.checkpoint_views import select

    # [CLS] fl ##ies [SEP] ban ##ana [SEP]: A = "flies", B = "banana"
    tokens = ["[CLS]", "fl", "##ies", "[SEP]", "ban", "##ana", "[SEP]"]
    segments = [None, "a", "a", None, "b", "b", None]
    special = [True, False, False, True, False, False, True]
    word_ids = [None, 0, 0, None, 1, 1, None]
    rng = np.random.default_rng(3)
    A = random_rows(rng, 2, 3, 7, 7)  # (L, h, T, T)
    kw = dict(tokens=tokens, segments=segments, special=special, word_ids=word_ids, word_texts=["flies", "banana"])
    v = select(A, layer=1, head=2, hide_special=True, block="a-b", words=True, **kw)
    keep = ~np.array(special)
    hidden, _ = hide_special(A[1, 2], keep, keep)  # (4, 4): fl ##ies ban ##ana
    assert v.rows.tolist() == [1, 2] and v.cols.tolist() == [4, 5] and v.tokens == ["fl", "##ies"]
    np.testing.assert_allclose(v.weights, hidden[:2, 2:])
    assert v.words.tokens == ["flies"] and v.words.key_tokens == ["banana"] and v.words.groups == [[1, 2]]
    # words: [CLS] flies [SEP] banana [SEP] are words 0-4; a word keeps its number when others are dropped
    assert v.words.rows == [1] and v.words.cols == [3]
    hidden_words = select(A, layer=1, hide_special=True, words=True, **kw).words
    assert hidden_words.tokens == ["flies", "banana"] and hidden_words.rows == hidden_words.cols == [1, 3]
    assert select(A, layer=1, words=True, **kw).words.rows == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(v.words.weights, [[hidden[:2, 2:].sum(-1).mean()]])
    whole = select(A, layer=0, **kw)  # every head of layer 0 and their mean
    assert whole.head_weights.shape == (3, 7, 7)
    np.testing.assert_allclose(whole.weights, A[0].mean(0))


def test_explain_cell_flags_a_matrix_that_disagrees():
    from attncli.attention.checkpoint_views import explain_cell

    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((2, 2, 5, 4))  # (h, T, d_head) each
    scale = 0.5
    s = np.einsum("htd,hsd->hts", q, k) * scale
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    tokens = list("abcde")
    good = explain_cell(q, k, scale, False, w, tokens, 3, 1, head=1)
    assert "MISMATCH" not in str(good) and good["weight"] == pytest.approx(w[1, 3, 1])
    bad = w.copy()
    bad[1, 3, 1] += 0.01
    assert "MISMATCH" in str(explain_cell(q, k, scale, False, bad, tokens, 3, 1, head=1))
    causal = explain_cell(q, k, scale, True, np.tril(w), tokens, 1, 3, head=0)
    assert causal["masked"] and causal["weight"] == 0.0


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


def test_a_row_with_no_attention_left_on_the_kept_keys_is_all_zero():
    A = np.array([[1.0, 0.0, 0.0], [0.2, 0.5, 0.3]])
    keep_rows, keep_cols = np.array([True, True]), np.array([False, True, True])
    for _ in range(20):  # fresh arrays each time: an uninitialised output would show garbage
        out, share = hide_special(A, keep_rows, keep_cols)
        assert out[0].tolist() == [0.0, 0.0] and share == pytest.approx([1.0, 0.2], abs=1e-15)
        np.testing.assert_allclose(out[1], [0.5 / 0.8, 0.3 / 0.8], rtol=0, atol=1e-15)
