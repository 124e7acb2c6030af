"""Tests written for the attention wing's mutants left alive by the sampled run of 2026-11-25
(docs/mutation.md (its git history), "Sampled run"): the views of a pretrained model (explain_cell,
value norms, model view), the per-cell explanation of each variant, the matrix's head and mask
checks, the projections' registry and weights, the head labels and the worked example's entropy.
Each checks a documented behaviour against a formula written here, a hand-worked case, torch or
transformers."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.attention import projection
from attncli.attention.explain import explain
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MatrixRequest, _heads, compute
from attncli.attention.projection import Projected
from attncli.errors import BadInput
from attncli.vectors import store

WORDS = "the time flies like an arrow fruit a banana".split()
DIM = 12
SENTENCE = "time flies like an arrow"


@pytest.fixture
def tiny(attn_home):
    """A small word-vector model 'tiny' (the vectors of test_matrix_cli.py's fixture)."""
    rng = np.random.default_rng(0)
    store.save_vectors("tiny", WORDS, rng.standard_normal((len(WORDS), DIM)).astype(np.float32))
    return "tiny"


def _torch_softmax(row):
    torch = needed("torch")
    return torch.softmax(torch.tensor(row, dtype=torch.float64), dim=-1).numpy()


def _steps(steps) -> dict:
    return {s["name"]: s["value"] for s in steps}


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
            score = float(sum(q[i, m] * p["W"][m, n] * k[j, n] for m in range(DIM) for n in range(DIM)))
            return score, {"q . k (for comparison)": float(np.dot(q[i], k[j])), "score = q^T W k": score}
        cos = float(np.dot(q[i], k[j])) / (math.sqrt(np.dot(q[i], q[i])) * math.sqrt(np.dot(k[j], k[j])))
        return p["scale"] * cos, {"q . k": float(np.dot(q[i], k[j])), "cos(q, k) = q . k / (|q| |k|)": cos,
                                  "beta": p["scale"], "score = beta cos": p["scale"] * cos}

    i, j = 3, 1
    score, terms = score_of(i, j)
    ex = explain(res, i, j)
    steps = _steps(ex["steps"])
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
        steps = _steps(e["steps"])
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
    from attncli.attention.pretrained import explain_cell

    rng = np.random.default_rng(3)
    h, T, d_head = 2, 4, 4
    q, k = rng.standard_normal((h, T, d_head)), rng.standard_normal((h, T, d_head))
    scale = 0.5  # 1/sqrt(4)
    weights = np.stack([[_torch_softmax([float(np.dot(q[hd, i], k[hd, jj])) * scale for jj in range(T)])
                         for i in range(T)] for hd in range(h)])  # (h, T, T)
    i, j = 2, 3
    doc = explain_cell(q, k, scale, False, weights, list("abcd"), i, j, head=1)
    steps = _steps(doc["steps"])
    dot = float(np.dot(q[1, i], k[1, j]))
    assert [s["name"] for s in doc["steps"]][:5] == ["q_I", "k_J", "q . k", "scale", "score"]
    assert steps["q . k"] == pytest.approx(dot, rel=1e-12)
    assert steps["scale"] == 0.5 and doc["steps"][3]["note"] == "1/sqrt(d_head) = 1/sqrt(4)"
    assert steps["score"] == pytest.approx(dot * 0.5, rel=1e-12) and doc["score"] == pytest.approx(dot * 0.5)
    assert steps["weight = exp / sum"] == pytest.approx(weights[1, i, j], rel=1e-12) == doc["weight"]
    other = explain_cell(q, k, 0.3, False, weights, list("abcd"), i, j, head=0)
    assert _steps(other["steps"])["scale"] == 0.3 and other["steps"][3]["note"] == "the model's own scale"


# --- value norms -----------------------------------------------------------------------------------


def _norm_case():
    """2 heads, 2 x 2 weights, f(x) of lengths 5 and 13 (3-4-5 and 5-12-13 triangles)."""
    weights = np.array([[[0.75, 0.25], [0.5, 0.5]], [[0.25, 0.75], [0.875, 0.125]]])  # (h, T, S)
    fx = np.array([[[1.0, 0.0], [3.0, 4.0]], [[0.0, 2.0], [5.0, 12.0]]])  # (h, S, d)
    return weights, fx


def test_explain_norm_of_one_head_by_hand():
    """--explain I J --head H of the norms view: alpha = A[H, I, J], ||f(x_J)|| and their product;
    no score (a norm has none); the view's name. Worked by hand: head 1, cell (0, 1): 0.75 x 13."""
    from attncli.attention.value_norms import explain_norm

    weights, fx = _norm_case()
    doc = explain_norm(weights, fx, ["a", "b"], 0, 1, head=1)
    assert doc["show"] == "norms" and doc["variant"] == "pretrained"
    assert "score" in doc and doc["score"] is None
    assert doc["weight"] == 9.75 and "heads" not in doc
    assert [(s["name"], s["value"]) for s in doc["steps"]] == [("alpha", 0.75), ("||f(x_J)||", 13.0),
                                                               ("||alpha f(x_J)||", 9.75)]
    whole = explain_norm(weights, fx, ["a", "b"], 0, 1)
    assert [e["weight"] for e in whole["heads"]] == [0.25 * 5, 9.75]
    # the layer: ||0.25 (3, 4) + 0.75 (5, 12)|| = ||(4.5, 10)||
    assert whole["weight"] == pytest.approx(math.hypot(4.5, 10.0), rel=1e-15) and whole["score"] is None


@pytest.mark.parametrize("option, why", [("rollout", "--rollout (it multiplies weights through the layers)"),
                                         ("words", "--words (word rows sum and average weights)"),
                                         ("hide_special", "--hide-special (it renormalises rows of weights)"),
                                         ("model_view", "--model-view (it classifies the heads by their weights)")])
def test_show_norms_names_the_option_it_refuses(option, why):
    from attncli.attention.value_norms import check_norms_options

    flags = dict(rollout=False, words=False, hide_special=False, model_view=False)
    check_norms_options(**flags)
    with pytest.raises(BadInput) as caught:
        check_norms_options(**{**flags, option: True}, show="scores")
    assert str(caught.value) == f"--show scores draws one layer's heads token by token: drop {why}"


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
    np.testing.assert_allclose(np.array(doc["attentions"]), att, atol=1e-5)
    types = enc["token_type_ids"][0].tolist()
    assert doc["special"] == special
    assert doc["segments"] == [None if s else "ab"[t] for s, t in zip(special, types)]


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


# --- the matrix's heads and mask label -------------------------------------------------------------


def _projected(d_k: int, heads: int | None = None) -> Projected:
    z = np.zeros((1, d_k))
    return Projected(q=z, k=z, v=z, label="test", heads=heads)


def test_head_count_refusals_name_the_heads_they_were_given():
    with pytest.raises(BadInput) as caught:
        _heads(MatrixRequest(text="a", projection="trained"), _projected(8, heads=2), 1, 1)
    assert str(caught.value) == ("the trained projection has 2 heads: add --variant multihead, "
                                 "or pick one head with --head H")
    with pytest.raises(BadInput) as caught:  # 6 = d_k, so 4 heads do not divide it
        _heads(MatrixRequest(text="a", variant="multihead"), _projected(6), 1, 1)
    assert str(caught.value).startswith("the default of 4 heads does not divide the dimension (d_k = 6, d_v = 6)")
    with pytest.raises(BadInput) as caught:
        _heads(MatrixRequest(text="a", variant="multihead", heads=5), _projected(6), 1, 1)
    assert str(caught.value) == ("--heads 5 does not divide the dimension (d_k = 6, d_v = 6): "
                                 "try --heads with one of 1, 2, 3, 6")


def test_too_many_head_cells_are_refused_with_their_size_in_gib():
    # 5 heads x 4096 x 4096 = 83,886,080 float64 cells = 671,088,640 bytes = 0.625 GiB
    with pytest.raises(BadInput) as caught:
        _heads(MatrixRequest(text="a", variant="multihead", heads=5), _projected(10), 4096, 4096)
    assert str(caught.value) == ("--heads 5 on 4096 x 4096 tokens needs 83,886,080 cells per (heads, T, S) array "
                                 "(0.6 GiB each); attn matrix allows 67,108,864 (4 heads at 4,096 tokens): "
                                 "use fewer heads or a shorter text")


def test_local_variant_names_its_window_and_only_the_masks_added_to_it(tiny):
    """The title's mask: the local variant's window (default 2), then ' + ' and any mask added."""
    plain = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny))
    causal = compute(MatrixRequest(text=SENTENCE, variant="local", model=tiny, mask=MaskSpec(causal=True)))
    assert plain.mask_label() == "local window 2"
    assert causal.mask_label() == "local window 2 + causal"


def test_multihead_output_goes_through_the_random_projections_w_o(tiny):
    """--variant multihead --proj random: output = concat_h softmax(Q_h K_h^T / sqrt(d_k/h)) V_h @ W_o,
    W_o the projection's (random_weights); checked with torch from the projected Q, K, V."""
    torch = needed("torch")
    h, d_k, seed = 2, 6, 4
    res = compute(MatrixRequest(text=SENTENCE, variant="multihead", model=tiny, projection="random", d_k=d_k,
                                heads=h, seed=seed))
    Q, K, V = (torch.tensor(a, dtype=torch.float64) for a in (res.projected.q, res.projected.k, res.projected.v))
    T, dh = Q.shape[0], d_k // h
    split = lambda x: x.reshape(T, h, dh).transpose(0, 1)  # noqa: E731  (h, T, dh)
    heads = torch.softmax(split(Q) @ split(K).transpose(1, 2) / dh**0.5, dim=-1) @ split(V)  # (h, T, dh)
    w_o = torch.tensor(projection.random_weights(DIM, d_k, seed)["W_o"])
    np.testing.assert_allclose(res.attention.output, (heads.transpose(0, 1).reshape(T, d_k) @ w_o).numpy(),
                               rtol=1e-10, atol=1e-12)


# --- projections -----------------------------------------------------------------------------------


def test_register_adds_a_projection_that_runs_its_function(monkeypatch):
    """projection.py's docstring: a projection is added with one line, ``register(name, fn, help)``;
    the kind runs ``fn`` and says whether it takes --d-k."""
    monkeypatch.setattr(projection, "PROJECTIONS", dict(projection.PROJECTIONS))
    seen = []

    def doubling(inp):
        seen.append(inp)
        return Projected(q=2 * inp.x_q, k=inp.x_kv, v=inp.x_kv, label="doubled")

    projection.register("doubled", doubling, "Q = 2 X", takes_d_k=True)
    projection.register("plain", doubling, "Q = 2 X")
    kind = projection.get_projection("doubled")
    assert (kind.name, kind.help, kind.takes_d_k) == ("doubled", "Q = 2 X", True)
    assert projection.get_projection("plain").takes_d_k is False
    x = np.eye(2)
    inp = projection.ProjectionInput(x_q=x, x_kv=x, words_q=x, words_kv=x, tokens=["a", "b"], key_tokens=["a", "b"],
                                     model=None)
    out = kind(inp)
    assert seen == [inp] and out.label == "doubled" and out.q.tolist() == [[2.0, 0.0], [0.0, 2.0]]


def test_random_projection_accepts_d_k_from_the_cli_and_refuses_beyond_4096(tiny):
    res = compute(MatrixRequest(text=SENTENCE, model=tiny, projection="random", d_k=5))
    assert res.projected.q.shape == (5, 5)
    for d_k in (0, 4097):
        with pytest.raises(BadInput, match=f"--d-k must be between 1 and 4096 \\(got {d_k}\\)"):
            compute(MatrixRequest(text=SENTENCE, model=tiny, projection="random", d_k=d_k))


def test_random_projection_draws_every_weight_with_variance_one_over_fan_in():
    """projection.py: W_q, W_k, W_v (d x d_k) and W_o (d_k x d_k) are drawn from N(0, 1/fan_in):
    on 16,384 draws each, the sample variance x fan_in lies within 5% of 1 (its standard error is
    about 1.1%)."""
    d, d_k = 64, 256
    w = projection.random_weights(d, d_k, seed=0)
    for name, fan_in in (("W_q", d), ("W_k", d), ("W_v", d), ("W_o", d_k)):
        assert float(np.var(w[name]) * fan_in) == pytest.approx(1.0, abs=0.05), name
        assert abs(float(np.mean(w[name]))) < 4 / math.sqrt(w[name].size * fan_in), name


# --- the head labels' thresholds -------------------------------------------------------------------


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


# --- the worked example's entropy ------------------------------------------------------------------


def test_entropy_bits_of_a_batch_of_distributions():
    """entropy_bits takes (..., S) distributions: each row's -sum p log2 p (0 log 0 = 0), by hand."""
    from attncli.attention.example import entropy_bits

    p = np.array([[[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]],
                  [[1.0, 0.0, 0.0], [0.125, 0.375, 0.5]]])  # (2, 2, 3)
    want = [[1.0, 1.5], [0.0, -(0.125 * math.log2(0.125) + 0.375 * math.log2(0.375) + 0.5 * math.log2(0.5))]]
    np.testing.assert_allclose(entropy_bits(p), want, rtol=1e-15, atol=0)


# --- the JSON document's rows ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_rows_refuse_nan_and_infinity_and_say_why(bad):
    """document.py: NaN and infinity are refused (JSON has no such numbers), except where masked."""
    from attncli.attention.document import Rows

    with pytest.raises(ValueError) as caught:
        Rows(np.array([[0.5, bad]]))
    assert str(caught.value) == "a matrix holds NaN or infinity: refusing to write invalid JSON"
    assert list(Rows(np.array([[0.5, bad]]), np.array([[True, False]])).lines()) == ["[0.5,null]"]


# --- max flow: the cases that must end ---------------------------------------------------------------


@pytest.mark.timeout(60)  # the mutants of these loop forever: fail in a minute, not after the suite's 300 s
def test_max_flow_ends_when_the_sink_is_unreachable_and_after_a_dead_end():
    """Dinic's algorithm stops when the breadth-first search no longer reaches the sink: a sink
    with no way in gives 0. And a dead end met first (0 -> 1 leads nowhere) is backed out of, one
    neighbour at a time, so the one way through (0 -> 2 -> 4) is still found: flow 0.5, by hand."""
    from attncli.attention.flow import max_flow

    cap = np.zeros((3, 3))
    cap[0, 1] = cap[2, 1] = 1.0
    assert max_flow(cap, 0, 2) == 0.0
    cap = np.zeros((5, 5))
    cap[0, 1] = cap[0, 2] = cap[0, 3] = 1.0
    cap[2, 4] = 0.5
    assert max_flow(cap, 0, 4) == 0.5


# --- the second sample (seed 1): docs/mutation.md (its git history), "Second sample (seed 1)" ----------------


def test_select_of_one_query_row_keeps_each_of_two_heads_and_their_mean():
    """A block with one query row (sentence A = one token) of a 2-head layer: the view's weights are
    the heads' mean and head_weights the 2 heads, taken here by plain indexing; the same for the
    words view (one query word). Without --filter no block note is added."""
    from attncli.attention.pretrained import select

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
    from attncli.attention.pretrained import view_meta

    model = SimpleNamespace(name="m", model_type="llama", backend="numpy", is_decoder=True, layers=1, heads=4,
                            kv_heads=2, kv_head=lambda h: h // 2)
    enc = SimpleNamespace(truncated=False)
    meta = view_meta(model, enc, layer=0, head=3, rollout=False, block=None, hide_special=True, words=False)
    assert meta["hide_special"] is True and meta["kv_head"] == 1 and meta["kv_heads"] == 2
    assert view_meta(model, enc, layer=0, head=None, rollout=False, block=None, hide_special=False,
                     words=False)["kv_head"] is None


def test_explain_cell_of_a_causally_masked_key_gives_weight_zero_and_says_why():
    """A decoder's key after the query: masked, no score, its weight step 0.0 with the reason."""
    from attncli.attention.pretrained import explain_cell

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


def test_additive_work_limit_holds_at_its_bound():
    """--variant additive refuses more than 2**29 tanh terms (T * S * d_k) and allows exactly 2**29."""
    from attncli.attention.matrix import _check_work

    req = MatrixRequest(text="x", variant="additive")
    _check_work(req, 512, 512, 2048)  # 2**9 * 2**9 * 2**11 = 2**29
    with pytest.raises(BadInput, match=r"needs 537,395,200 tanh terms; attn matrix allows at most 536,870,912"):
        _check_work(req, 512, 512, 2050)
    _check_work(MatrixRequest(text="x", variant="scaled"), 512, 512, 4096)


def test_heads_range_includes_256():
    from attncli.attention.matrix import check_request

    check_request(MatrixRequest(text="x", variant="multihead", heads=256))
    with pytest.raises(BadInput, match=r"^--heads must be between 1 and 256 \(got 257\)$"):
        check_request(MatrixRequest(text="x", variant="multihead", heads=257))


def test_json_settings_and_explanation(tiny):
    """--json's settings (docs/matrix.md's table): d_v the output's width, max_relative the relative
    variant's clipping distance as asked; with --explain the explanation is in the document."""
    from attncli.attention.document import to_json

    res = compute(MatrixRequest(text=SENTENCE, variant="relative", model=tiny, max_relative=3))
    doc = to_json(res, {"cell": [1, 2]})
    assert doc["settings"]["d_v"] == len(doc["output"][0]) == DIM
    assert doc["settings"]["max_relative"] == 3
    assert doc["explanation"] == {"cell": [1, 2]}


def test_head_norms_compute_in_float64_from_float32_inputs():
    """||A f(x)|| = A ||f(x)||, in float64 whatever the inputs' precision (the view's --json
    compares with the explanation's float64 numbers): float32 weights of 1/3 and 1/7 against
    norms 5 and 13 (3-4-5, 5-12-13), worked in Python floats."""
    from attncli.attention.value_norms import head_norms

    w = np.array([[[1 / 3, 1 / 7]]], dtype=np.float32)  # (h, T, S)
    fx = np.array([[[3.0, 4.0], [5.0, 12.0]]], dtype=np.float32)  # (h, S, d)
    got = head_norms(w, fx)
    assert got.dtype == np.float64
    assert got[0, 0].tolist() == [float(w[0, 0, 0]) * 5.0, float(w[0, 0, 1]) * 13.0]


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


def test_scale_sweep_max_weight_is_the_mean_of_each_rows_largest_weight():
    """attn scale's sweep: max_weight_raw is the mean over trials of a row's largest softmax weight;
    the rows redrawn here from the documented seed, the softmax by torch."""
    from attncli.attention.example import scale_experiment

    torch = needed("torch")
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((6, 1, 4)), rng.standard_normal((6, 5, 4))
    raw = torch.tensor((q @ k.transpose(0, 2, 1))[:, 0, :])  # (trials, S)
    want = float(torch.softmax(raw, dim=-1).max(dim=-1).values.mean())
    row = scale_experiment(seed=2, keys=5, trials=6, dims=(4,))["sweep"]["rows"][0]
    assert row["max_weight_raw"] == pytest.approx(want, rel=1e-12)
