"""--explain, a cell worked step by step (attncli.attention.explain, and explain_cell of a pretrained
layer): every step of each variant against its formula written here (torch's softmax, a hand-worked
norm), the heads of a multi-head cell, masked keys and their reasons, float64 from float32 inputs,
and the explanation in the --json document."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _attention_fixtures import VIEW_DIM, save_view_words, step_values
from conftest import needed

from attncli.attention import projection
from attncli.attention.explain import explain
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MatrixRequest, compute
from attncli.attention.projection import Projected
from attncli.errors import BadInput

SENTENCE = "time flies like an arrow"


@pytest.fixture
def tiny(attn_home):
    """The small word-vector model 'tiny' (tests/_attention_fixtures.py)."""
    return save_view_words("tiny")


def _torch_softmax(row):
    torch = needed("torch")
    return torch.softmax(torch.tensor(row, dtype=torch.float64), dim=-1).numpy()


# --- explain: every step of the variants with weights of their own ---------------------------------


@pytest.mark.parametrize("variant", ["additive", "multiplicative", "cosine"])
def test_explain_steps_of_variants_with_weights_equal_their_formulas(tiny, variant):
    """--explain I J: the steps from q_I, k_J to the weight (docs/matrix.md; README: checked against
    the matrix): q_I, k_J, the variant's terms, the score, then the softmax of row I. Each step's name and value against the variant's formula worked out here from the
    projected q, k and the variant's weights, and the softmax against torch's."""
    res = compute(MatrixRequest(text=SENTENCE, variant=variant, model=tiny, mask=MaskSpec(causal=True)))
    q, k, p = res.projected.q, res.projected.k, res.params

    def score_of(i, j):  # the variant's score of cell (i, j) and its named terms, by its formula
        if variant == "additive":
            a, b = p["W_1"] @ q[i], p["W_2"] @ k[j]
            score = float(sum(vv * math.tanh(x + y) for vv, x, y in zip(p["v"], a, b)))
            return score, {"W_1 q_I": a.tolist(), "W_2 k_J": b.tolist(), "score = v^T tanh(W_1 q + W_2 k)": score}
        if variant == "multiplicative":
            score = float(sum(q[i, m] * p["W"][m, n] * k[j, n] for m in range(VIEW_DIM) for n in range(VIEW_DIM)))
            return score, {"q . k (for comparison)": float(np.dot(q[i], k[j])), "score = q^T W k": score}
        cos = float(np.dot(q[i], k[j])) / (math.sqrt(np.dot(q[i], q[i])) * math.sqrt(np.dot(k[j], k[j])))
        return p["scale"] * cos, {"q . k": float(np.dot(q[i], k[j])), "cos(q, k) = q . k / (|q| |k|)": cos,
                                  "beta": p["scale"], "score = beta cos": p["scale"] * cos}

    i, j = 3, 1
    score, terms = score_of(i, j)
    ex = explain(res, i, j)
    steps = step_values(ex["steps"])
    assert list(steps)[:2] == ["q_I", "k_J"] and steps["q_I"] == q[i].tolist() and steps["k_J"] == k[j].tolist()
    assert list(steps)[2:2 + len(terms)] == list(terms)
    for name, want in terms.items():
        np.testing.assert_allclose(steps[name], want, rtol=1e-12, atol=1e-14, err_msg=name)
    # the softmax over row I's visible keys (the causal mask keeps keys 0..I)
    row = [score_of(i, jj)[0] for jj in range(i + 1)]
    assert steps["the matrix's score"] == pytest.approx(score, rel=1e-12)
    assert steps["weight = exp / sum"] == pytest.approx(_torch_softmax(row)[j], rel=1e-12)
    assert ex["weight"] == pytest.approx(_torch_softmax(row)[j], rel=1e-12)


def test_explain_of_a_multihead_cell_walks_each_head_and_names_a_masked_one(tiny):
    """Multihead: each head's steps start from its slice of q_I and k_J, scale by 1/sqrt(d_k/h) and
    end with its softmax (against torch); a causally masked cell's heads each end with weight 0."""
    h, d_k = 3, 6
    res = compute(MatrixRequest(text=SENTENCE, variant="multihead", model=tiny, projection="random", d_k=d_k,
                                heads=h, mask=MaskSpec(causal=True)))
    q, k = res.projected.q, res.projected.k
    i, j, dh = 2, 1, d_k // h
    ex = explain(res, i, j)
    assert [e["head"] for e in ex["heads"]] == list(range(h))
    for e in ex["heads"]:
        cols = slice(e["head"] * dh, (e["head"] + 1) * dh)
        steps = step_values(e["steps"])
        assert list(steps)[:4] == ["q_I", "k_J", "q . k", "scale 1/sqrt(d_k/h)"]
        assert steps["q_I"] == q[i, cols].tolist() and steps["k_J"] == k[j, cols].tolist()
        row = [float(np.dot(q[i, cols], k[jj, cols])) / math.sqrt(dh) for jj in range(i + 1)]
        assert steps["scale 1/sqrt(d_k/h)"] == pytest.approx(1 / math.sqrt(dh), rel=1e-15)
        assert e["score"] == pytest.approx(row[j], rel=1e-12)
        assert steps["weight = exp / sum"] == pytest.approx(_torch_softmax(row)[j], rel=1e-12)
    masked = explain(res, 1, 3)
    assert masked["masked"] and masked["score"] is None
    for e in masked["heads"]:
        assert e["steps"][-1] == {"name": "weight", "value": 0.0, "note": "masked"} and e["weight"] == 0.0


def test_explain_of_float32_queries_and_keys_computes_in_float64(tiny, monkeypatch):
    """A projection may hand float32 q and k (the trained one does); the matrix computes in float64
    (compute casts them), and so must the explanation, or its cosine score misses the matrix's."""
    def float32_identity(inp):
        x, xk = inp.x_q.astype(np.float32), inp.x_kv.astype(np.float32)
        return Projected(q=x, k=xk, v=xk, label="float32")

    monkeypatch.setattr(projection, "PROJECTIONS", dict(projection.PROJECTIONS))
    projection.register("float32", float32_identity, "float32 Q = K = V")
    res = compute(MatrixRequest(text=SENTENCE, variant="cosine", model=tiny, projection="float32"))
    q, k = res.projected.q.astype(np.float64), res.projected.k.astype(np.float64)
    for i, j in [(0, 1), (2, 4), (4, 3)]:
        cos = float(np.dot(q[i], k[j])) / (math.sqrt(np.dot(q[i], q[i])) * math.sqrt(np.dot(k[j], k[j])))
        ex = explain(res, i, j)
        assert ex["score"] == pytest.approx(res.params["scale"] * cos, rel=1e-12, abs=0)
        assert "MISMATCH" not in json.dumps(ex)


# --- explain_cell of a pretrained layer ------------------------------------------------------------


def test_explain_cell_of_a_pretrained_layer_gives_every_step():
    """docs/transformers.md: the steps q_I, k_J, q . k, scale, score, softmax; hand-made q, k and
    the weights from torch's softmax, the scale 1/sqrt(d_head) named as such."""
    from attncli.attention.checkpoint_views import explain_cell

    rng = np.random.default_rng(3)
    h, T, d_head = 2, 4, 4
    q, k = rng.standard_normal((h, T, d_head)), rng.standard_normal((h, T, d_head))
    scale = 0.5  # 1/sqrt(4)
    weights = np.stack([[_torch_softmax([float(np.dot(q[hd, i], k[hd, jj])) * scale for jj in range(T)])
                         for i in range(T)] for hd in range(h)])  # (h, T, T)
    i, j = 2, 3
    doc = explain_cell(q, k, scale, False, weights, list("abcd"), i, j, head=1)
    steps = step_values(doc["steps"])
    dot = float(np.dot(q[1, i], k[1, j]))
    assert [s["name"] for s in doc["steps"]][:5] == ["q_I", "k_J", "q . k", "scale", "score"]
    assert steps["q . k"] == pytest.approx(dot, rel=1e-12)
    assert steps["scale"] == 0.5 and doc["steps"][3]["note"] == "1/sqrt(d_head) = 1/sqrt(4)"
    assert steps["score"] == pytest.approx(dot * 0.5, rel=1e-12) and doc["score"] == pytest.approx(dot * 0.5)
    assert steps["weight = exp / sum"] == pytest.approx(weights[1, i, j], rel=1e-12) == doc["weight"]
    other = explain_cell(q, k, 0.3, False, weights, list("abcd"), i, j, head=0)
    assert step_values(other["steps"])["scale"] == 0.3 and other["steps"][3]["note"] == "the model's own scale"


def test_explain_cell_of_a_causally_masked_key_gives_weight_zero_and_says_why():
    """A decoder's key after the query: masked, no score, its weight step 0.0 with the reason."""
    from attncli.attention.checkpoint_views import explain_cell

    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((1, 3, 2)), rng.standard_normal((1, 3, 2))
    weights = np.stack([np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]])  # (1, T, T)
    doc = explain_cell(q, k, 1.0, True, weights, list("abc"), 0, 2)
    assert doc["masked"] is True and doc["mask_reasons"] == ["causal: key 2 comes after query 0"]
    head = doc["heads"][0]
    assert head["score"] is None
    assert head["steps"][-1] == {"name": "weight", "value": 0.0, "note": "masked: the key comes after the query (causal)"}


def test_explain_softmax_steps_say_what_they_check(tiny):
    """The softmax steps' notes: the row max is 'subtracted before exp'; a weight
    recomputed equal to the matrix's 'matches the matrix'."""
    res = compute(MatrixRequest(text=SENTENCE, model=tiny))
    notes = {s["name"]: s["note"] for s in explain(res, 1, 2)["steps"]}
    assert notes["row max (visible keys)"] == "subtracted before exp"
    assert notes["weight = exp / sum"] == "matches the matrix"


def test_explain_outside_the_matrix_names_its_last_row_and_column(tiny):
    res = compute(MatrixRequest(text=SENTENCE, model=tiny))  # 5 x 5
    with pytest.raises(BadInput) as caught:
        explain(res, 5, 0)
    assert str(caught.value) == "--explain 5 0 is outside the 5 x 5 matrix: rows 0..4, columns 0..4 (0-based)"


def test_explain_of_the_local_variant_names_the_window_only_outside_it(tiny):
    """--variant local --window 1: a cell's reasons name the window exactly when |j - i| > 1."""
    res = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny, mask=MaskSpec(window=1)))
    for i in range(5):
        for j in range(5):
            why = [r for r in explain(res, i, j)["mask_reasons"] if r.startswith("local window")]
            assert why == ([f"local window: |{j} - {i}| = {abs(j - i)} > 1"] if abs(j - i) > 1 else []), (i, j)


def test_json_settings_and_explanation(tiny):
    """--json's settings (docs/matrix.md's table): d_v the output's width, max_relative the relative
    variant's clipping distance as asked; with --explain the explanation is in the document."""
    from attncli.attention.document import to_json

    res = compute(MatrixRequest(text=SENTENCE, variant="relative", model=tiny, max_relative=3))
    doc = to_json(res, {"cell": [1, 2]})
    assert doc["settings"]["d_v"] == len(doc["output"][0]) == VIEW_DIM
    assert doc["settings"]["max_relative"] == 3
    assert doc["explanation"] == {"cell": [1, 2]}


def test_explain_cell_of_every_head_notes_the_mean():
    """--explain I J without --head: the layer's weight is the mean of the heads' weights, said so."""
    from attncli.attention.checkpoint_views import explain_cell

    rng = np.random.default_rng(3)
    h, T = 3, 3
    q, k = rng.standard_normal((h, T, 2)), rng.standard_normal((h, T, 2))
    s = np.einsum("hid,hjd->hij", q, k)
    weights = np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True)
    doc = explain_cell(q, k, 1.0, False, weights, list("abc"), 1, 2)
    assert doc["note"] == "weight = the mean of the 3 heads' weights"
    assert doc["weight"] == pytest.approx(weights[:, 1, 2].mean(), rel=1e-12)


def test_explain_of_the_local_variant_gives_its_window_term_and_score(tiny):
    """--explain of the local variant: the window term -(j - i)^2 / (2 sigma^2), sigma = D / 2 with
    D = 2; the score equal to the matrix's; exp(score - row max) worked out here."""
    res = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny))
    i, j = 3, 2
    doc = explain(res, i, j)
    steps = step_values(doc["steps"])
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
