"""Tests written for the attention wing's mutants left alive by the third sampled run (seed 2;
docs/mutation.md (its git history), "Third sample (seed 2)"): the logit lens's first top layer, the
pretrained view's selection, model view and --json document, the head classes with special tokens
hidden, the matrix's head-cell limit and --pad-to check, and the --explain documents. Each checks a
documented behaviour against a formula written here or a hand-worked case."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from attncli.attention.explain import explain
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MAX_TOKENS, MatrixRequest, _heads, check_request, compute
from attncli.attention.projection import Projected
from attncli.errors import BadInput
from attncli.vectors import store

WORDS = "the time flies like an arrow fruit a banana".split()
SENTENCE = "time flies like an arrow"


@pytest.fixture
def tiny(attn_home):
    """A small word-vector model 'tiny' (12 dims, random vectors)."""
    rng = np.random.default_rng(0)
    store.save_vectors("tiny", WORDS, rng.standard_normal((len(WORDS), 12)).astype(np.float32))
    return "tiny"


def _steps(steps) -> dict:
    return {s["name"]: s["value"] for s in steps}


# --- logit lens -----------------------------------------------------------------------------------


def test_first_top_layer_by_hand():
    """The first layer from which the token stays the top prediction to the last layer."""
    from attncli.attention.logit_lens import first_top_layer

    assert first_top_layer(np.array([5, 5, 5, 5]), 5) == 0
    assert first_top_layer(np.array([5, 1, 5, 5]), 5) == 2
    assert first_top_layer(np.array([1, 5, 5, 5, 5]), 5) == 1
    assert first_top_layer(np.array([5, 5, 5, 1]), 5) is None


# --- the pretrained view --------------------------------------------------------------------------


def _cross_keys():
    from attncli.attention.pretrained import KeySide

    return KeySide(["k0", "k1", "k2"], [None] * 3, [False] * 3, [0, 1, 2], ["k0", "k1", "k2"])


def test_select_of_cross_attention_without_rollout_or_filter_is_the_heads_mean():
    """Cross-attention (rows and columns different tokens): a plain layer view is allowed and is the
    heads' mean; only rollout, flow and --filter are refused."""
    from attncli.attention.pretrained import select

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
    from attncli.attention.pretrained import select

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
    from attncli.attention.pretrained import document, select, to_json

    rng = np.random.default_rng(2)
    A = rng.random((1, 2, 3, 3))
    A /= A.sum(axis=-1, keepdims=True)
    view = select(A, layer=0, words=True, tokens=["x", "y", "z"], segments=[None] * 3, special=[False] * 3,
                  word_ids=[0, 1, 2], word_texts=["x", "y", "z"])
    doc = to_json(document(view, {}, segments=[None] * 3, special=[False] * 3))  # plain lists, 6 digits
    hw = doc["words"]["head_weights"]
    assert len(hw) == 2
    for hd in range(2):
        assert np.allclose(np.asarray(hw[hd], float), A[0, hd], rtol=1e-5, atol=0)


def test_explain_cell_of_every_head_notes_the_mean():
    """--explain I J without --head: the layer's weight is the mean of the heads' weights, said so."""
    from attncli.attention.pretrained import explain_cell

    rng = np.random.default_rng(3)
    h, T = 3, 3
    q, k = rng.standard_normal((h, T, 2)), rng.standard_normal((h, T, 2))
    s = np.einsum("hid,hjd->hij", q, k)
    weights = np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True)
    doc = explain_cell(q, k, 1.0, False, weights, list("abc"), 1, 2)
    assert doc["note"] == "weight = the mean of the 3 heads' weights"
    assert doc["weight"] == pytest.approx(weights[:, 1, 2].mean(), rel=1e-12)


# --- head classes with special tokens hidden -----------------------------------------------------


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


# --- the matrix ----------------------------------------------------------------------------------


def test_multihead_allows_exactly_the_head_cell_limit():
    """4 heads on MAX_TOKENS x MAX_TOKENS tokens is the limit itself (4 x 4096 x 4096 cells): allowed."""
    z = np.zeros((1, 8))
    proj = Projected(q=z, k=z, v=z, label="test")
    assert _heads(MatrixRequest(text="a", variant="multihead", heads=4), proj, MAX_TOKENS, MAX_TOKENS) == 4
    with pytest.raises(BadInput):
        _heads(MatrixRequest(text="a", variant="multihead", heads=4), proj, MAX_TOKENS, MAX_TOKENS + 1)


def test_pad_to_below_one_is_refused_with_its_value():
    with pytest.raises(BadInput) as err:
        check_request(MatrixRequest(text="a b", mask=MaskSpec(pad_to=0)))
    assert str(err.value) == "--pad-to must be at least 1 (got 0)"


def test_json_settings_name_the_local_window(tiny):
    """--json's settings.local_window: the local variant's window (default 2); null for other variants."""
    from attncli.attention.document import document

    assert document(compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny)))["settings"]["local_window"] == 2
    assert document(compute(MatrixRequest(text=SENTENCE, variant="scaled", model=tiny)))["settings"]["local_window"] is None


def test_explain_local_steps_by_formula(tiny):
    """--explain of the local variant: the window term -(j - i)^2 / (2 sigma^2), sigma = D / 2 with
    D = 2; the score equal to the matrix's; exp(score - row max) worked out here."""
    res = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny))
    i, j = 3, 2
    doc = explain(res, i, j)
    steps = _steps(doc["steps"])
    assert steps["window term -(j - i)^2 / (2 sigma^2)"] == pytest.approx(-((j - i) ** 2) / (2 * 1.0**2), rel=1e-12)
    score = float(res.attention.scores[i, j])
    assert steps["score"] == pytest.approx(score, rel=1e-9, abs=1e-12)
    row = np.asarray(res.attention.scores[i], float)[np.asarray(res.attention.mask[i], bool)]
    assert steps["exp(score - max)"] == pytest.approx(math.exp(score - row.max()), rel=1e-9)


def test_explain_multihead_notes_the_mean(tiny):
    """--explain of multihead: the cell's weight is the mean of the heads' weights, said so."""
    res = compute(MatrixRequest(text=SENTENCE, variant="multihead", heads=2, model=tiny))
    doc = explain(res, 1, 2)
    assert doc["note"] == "weight = the mean of the 2 heads' weights"
    assert doc["weight"] == pytest.approx(np.mean([hd["weight"] for hd in doc["heads"]]), rel=1e-12)


# --- value norms ---------------------------------------------------------------------------------


def test_explain_norm_names_the_value_and_output_matrices():
    """The norms view's ||f(x_J)|| step names f as Kobayashi et al. do: (x W_V + b_V) W_O."""
    from attncli.attention.value_norms import explain_norm

    weights = np.array([[[0.75, 0.25], [0.5, 0.5]]])  # (h, T, S)
    fx = np.array([[[1.0, 0.0], [3.0, 4.0]]])  # (h, S, d)
    doc = explain_norm(weights, fx, ["a", "b"], 0, 1, head=0)
    step = [s for s in doc["steps"] if s["name"] == "||f(x_J)||"][0]
    assert step["value"] == 5.0
    assert step["note"] == "f(x) = (x W_V + b_V) W_O, this head's rows of W_O"
