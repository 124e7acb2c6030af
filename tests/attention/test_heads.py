"""The shared head patterns (attncli.attention.heads) on hand-made attention."""

from __future__ import annotations
from types import SimpleNamespace

import numpy as np
import pytest

from attncli.attention import heads


def one_hot_rows(targets, T):
    A = np.zeros((T, T))
    A[np.arange(T), targets] = 1.0
    return A


def test_encoder_patterns_by_hand():
    T = 6
    prev = one_hot_rows([0] + list(range(T - 1)), T)
    nxt = one_hot_rows(list(range(1, T)) + [T - 1], T)
    sep = one_hot_rows([T - 1] * T, T)
    s = heads.row_scores(np.stack([prev, nxt, sep]), causal=False, window=1,
                         separators=np.array([False] * (T - 1) + [True]))
    np.testing.assert_allclose(s["previous_token"].mean(-1), [5 / 6, 0, 0])  # the separator head: row 4 is next-token
    np.testing.assert_allclose(s["next_token"].mean(-1), [0, 5 / 6, 1 / 6])
    np.testing.assert_allclose(s["separator"].mean(-1), [0, 2 / 6, 1.0])
    np.testing.assert_allclose(s["local"].mean(-1), [1.0, 1.0, 2 / 6])  # |i - j| <= 1 both ways
    np.testing.assert_allclose(s["entropy"], 0.0)
    assert "duplicate_token" not in s and "induction" not in s  # no token ids: not scored


def test_causal_model_has_no_next_token_and_no_separator_without_one():
    A = heads.uniform_weights(5, causal=True)
    s = heads.row_scores(A, causal=True, window=2)
    assert "next_token" not in s and "separator" not in s
    assert s["entropy"].shape == (1, 4)  # query 0 sees one key: not scored
    np.testing.assert_allclose(s["entropy"], 1.0)


def test_duplicate_and_induction_on_a_repeated_sequence():
    ids = [7, 3, 9, 5, 7, 3, 9, 5]  # a sequence of 4 repeated
    T = len(ids)
    induction = np.zeros((T, T))
    duplicate = np.zeros((T, T))
    for i in range(T):
        induction[i, i - 3 if i >= 4 else 0] = 1.0  # the token after the earlier copy of token i
        duplicate[i, i - 4 if i >= 4 else 0] = 1.0  # the earlier copy itself
    s = heads.row_scores(np.stack([induction, duplicate]), causal=True, window=1, token_ids=ids)
    # only queries 4..7 have an earlier copy: they are the ones scored
    assert s["induction"].shape == (2, 4) and s["duplicate_token"].shape == (2, 4)
    np.testing.assert_allclose(s["induction"].mean(-1), [1.0, 0.0])
    np.testing.assert_allclose(s["duplicate_token"].mean(-1), [0.0, 1.0])


def test_exclude_first_renormalises_over_the_other_keys():
    A = np.array([[[1.0, 0.0, 0.0], [0.8, 0.2, 0.0], [0.6, 0.3, 0.1]]])
    s = heads.row_scores(A, causal=True, window=1, exclude_first=True)
    assert "first_token" not in s
    # only query 2 still sees two keys (1 and 2): 0.3 and 0.1 renormalised to 0.75 and 0.25
    np.testing.assert_allclose(s["previous_token"], [[0.75]])
    np.testing.assert_allclose(s["self"], [[0.25]])


def test_label_rule():
    kw = dict(patterns=("previous_token", "first_token"), pattern_min=0.4, local_min=0.7, broad_min=0.7, margin=0.2)
    uniform = {"previous_token": 0.1, "first_token": 0.1, "local": 0.3, "entropy": 1.0}
    assert heads.label({"previous_token": 0.9, "first_token": 0.05, "local": 0.95, "entropy": 0.1}, uniform, **kw) == "previous_token"
    assert heads.label({"previous_token": 0.3, "first_token": None, "local": 0.9, "entropy": 0.1}, uniform, **kw) == "local"
    assert heads.label({"previous_token": 0.1, "first_token": 0.1, "local": 0.3, "entropy": 0.9}, uniform, **kw) == "broad"
    assert heads.label({"previous_token": 0.1, "first_token": 0.1, "local": 0.3, "entropy": 0.3}, uniform, **kw) == "mixed"


def test_tally_means_and_counts():
    t = heads.Tally(layers=2, heads=1)
    t.add_all_layers([{"self": np.array([[1.0, 0.0]])}, {"self": np.array([[0.5, 0.5]])}])
    t.add_all_layers([{"self": np.array([[1.0]])}, {"self": np.array([[0.0]])}])
    means = t.means()
    np.testing.assert_allclose(means["self"], [[2 / 3], [1 / 3]])
    assert means["induction"] is None
    with pytest.raises(KeyError):
        t.add(0, {"nonsense": np.zeros((1, 1))})


def test_head_classes_carry_the_labels_score():
    """A head that puts 0.8 on the previous token and 0.2 on itself is a previous-token head of
    score 0.8 (the mean over the 3 word rows; [CLS] and [SEP] rows are not scored)."""
    from attncli.attention.model_view import head_classes

    T = 5  # [CLS] w1 w2 w3 [SEP]
    A = np.full((1, 1, T, T), 1 / T)  # (L, h, T, T)
    for i in (1, 2, 3):
        A[0, 0, i] = 0.0
        A[0, 0, i, i - 1], A[0, 0, i, i] = 0.8, 0.2
    model = SimpleNamespace(layers=1, heads=1, is_decoder=False)
    enc = SimpleNamespace(special=[True, False, False, False, True], ids=[101, 7, 8, 9, 102])
    classes = head_classes(model, enc, A)
    assert classes == [[{"label": "previous_token", "score": 0.8}]]


def test_label_thresholds_hold_at_equality():
    """heads.label's rules: a pattern 'if it is >= pattern_min and at least margin above a uniform
    head's score'; 'local' if local >= local_min (and the margin); 'broad' if entropy >= broad_min.
    Equality passes each test (0.5, 0.25, 0.75 are exact binary fractions)."""
    from attncli.attention.heads import label

    t = dict(pattern_min=0.5, local_min=0.75, broad_min=0.75, margin=0.25)
    uniform = {"previous_token": 0.25, "local": 0.5}
    base = {"previous_token": 0.25, "local": 0.5, "entropy": 0.5}
    assert label({**base, "previous_token": 0.5}, uniform, patterns=["previous_token"], **t) == "previous_token"
    assert label({**base, "previous_token": 0.4375}, uniform, patterns=["previous_token"], **t) == "mixed"
    assert label({**base, "local": 0.75}, uniform, patterns=["previous_token"], **t) == "local"
    assert label({**base, "entropy": 0.75}, uniform, patterns=["previous_token"], **t) == "broad"


def test_all_false_separators_add_no_separator_pattern():
    """A separator pattern applies only when some key is a separator (heads.py's docstring)."""
    from attncli.attention.heads import pattern_masks

    assert "separator" not in pattern_masks(4, causal=False, window=1, separators=np.zeros(4, bool))
    sep = pattern_masks(4, causal=False, window=1, separators=np.array([0, 0, 0, 1], bool))["separator"]
    assert sep.tolist() == [[False, False, False, True]] * 4


def test_head_classes_of_a_decoder_do_not_score_its_first_row():
    """A decoder's previous-token head scores 1.0: its first query sees only itself and is not
    scored (heads.py: rows with fewer than 2 visible keys); as an encoder the same head scores 3/4."""
    from attncli.attention.model_view import head_classes

    T = 4
    A = np.zeros((1, 1, T, T))  # (L, h, T, T)
    A[0, 0, 0, 0] = 1.0
    for i in range(1, T):
        A[0, 0, i, i - 1] = 1.0
    enc = SimpleNamespace(special=[False] * T, ids=[5, 6, 7, 8])
    decoder = SimpleNamespace(layers=1, heads=1, is_decoder=True)
    assert head_classes(decoder, enc, A) == [[{"label": "previous_token", "score": 1.0}]]
    encoder = SimpleNamespace(layers=1, heads=1, is_decoder=False)
    assert head_classes(encoder, enc, A) == [[{"label": "previous_token", "score": 0.75}]]


@pytest.mark.parametrize("decoder", [False, True])
def test_head_classes_hide_special_tokens_of_two_word_inputs(decoder):
    """The model view's labels with special tokens hidden (exactly 2 ordinary tokens, the least that
    is hidden): the same as the labels of the 2 x 2 matrix renormalised by hand (A'[i, j] =
    A[i, j] / sum of the row's kept weights), for an encoder ([CLS] a b [SEP]) and a decoder (<s> a b)."""
    from attncli.attention.model_view import head_classes

    if decoder:
        special, ids = [True, False, False], [1, 7, 8]
        A = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.5, 0.45, 0.05]])
        sub = np.array([[1.0, 0.0], [0.9, 0.1]])  # rows a, b over keys a, b
    else:
        special, ids = [True, False, False, True], [101, 7, 8, 102]
        A = np.array([[0.25] * 4, [0.5, 0.1, 0.4, 0.0], [0.5, 0.4, 0.1, 0.0], [0.25] * 4])
        sub = np.array([[0.2, 0.8], [0.8, 0.2]])
    model = SimpleNamespace(layers=1, heads=1, is_decoder=decoder)
    hidden = head_classes(model, SimpleNamespace(special=special, ids=ids), A[None, None], hide_special=True)
    plain = head_classes(model, SimpleNamespace(special=[False, False], ids=ids[1:3]), sub[None, None])
    assert hidden == plain
    assert hidden != head_classes(model, SimpleNamespace(special=special, ids=ids), A[None, None])
