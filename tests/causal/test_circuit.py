"""Edge attribution patching and circuits (attncli/causal/circuit.py): each edge's score equals a
central finite difference of removing that edge through the edge-patched forward; the scores into
each reader add up to that reader's input change times its gradient, and over the graph to AtP's
estimates; on the hand-built induction Llama, EAP-IG's circuit holds the previous-token head -> the
induction head's keys edge and keeps 0.9 of the logit difference under exact edge patching; the
float32 tape's scores equal float64's within float32 rounding, and its circuit is searched in float64."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _tolerance import f32_close  # noqa: E402
from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.causal.attribution import attribute  # noqa: E402
from attncli.causal.circuit import edge_scores, find_circuit, patched_metric  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.edges import down_index, edge_mask, edge_patched_logits, node_outputs, up_index  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog ran to the log and the cat"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("eap")
    return load(every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=3), backend="numpy")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from _llama_head_fixtures import build_head_llama, induction_pair

    model = load(str(build_head_llama(tmp_path_factory.mktemp("llama") / "llama")), backend="numpy")
    return (model, *induction_pair(model))


def _pair(model):
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    return clean[:n], corrupt[:n]


def _finite_differences(scores, clean, corrupt, target, edges, eps=1e-4):
    ones = np.ones(scores.shape)
    for u, v in edges:
        got = []
        for s in (eps, -eps):
            w = ones.copy()
            w[u, v] += s
            got.append(float(target.metric(edge_patched_logits(clean, corrupt, w, target.position))))
        fd = (got[0] - got[1]) / (2 * eps)
        assert abs(scores[u, v] - fd) <= 1e-4 * max(1.0, abs(fd)), (u, v, scores[u, v], fd)  # fixed: a central difference's error (eps 1e-4)


@pytest.mark.parametrize("contrast", [None, 5])
def test_each_edge_score_is_the_derivative_of_removing_that_edge(gpt2, contrast):
    clean_ids, corrupt_ids = _pair(gpt2)
    target = Target(len(clean_ids) - 1, 7, "t", contrast, None if contrast is None else "c")
    scores, clean, corrupt = edge_scores(gpt2, clean_ids, corrupt_ids, target)
    edges = np.argwhere(edge_mask(gpt2.layers, gpt2.heads))
    rng = np.random.default_rng(0)
    h = gpt2.heads
    chosen = [edges[i] for i in rng.choice(len(edges), 10, replace=False)]
    chosen += [(up_index(0, 1, h), down_index(1, 3, c, h)) for c in "qkv"] + [(0, down_index(1, None, "", h))]
    _finite_differences(scores, clean, corrupt, target, chosen)
    assert np.all(scores[~edge_mask(gpt2.layers, h)] == 0)


def test_the_scores_add_up_to_each_readers_input_change_and_to_atp(gpt2):
    clean_ids, corrupt_ids = _pair(gpt2)
    target = Target(len(clean_ids) - 1, 7, "t", 5, "c")
    scores, clean, corrupt = edge_scores(gpt2, clean_ids, corrupt_ids, target)
    L, h = gpt2.layers, gpt2.heads
    m_c, m_k = (float(target.metric(t.logits(target.position))) for t in (clean, corrupt))
    # AtP with the texts swapped takes its gradient on the clean run, as EAP does:
    # atp[l, x] (m_c - m_k) = (resid_pre_clean - resid_pre_corrupt)[l, x] . d metric / d resid_pre[l, x] |clean,
    # and d resid_pre[l] reaches the metric through every reader at layer l or later: the edges from
    # the writers before layer l into the readers from layer l on
    resid = attribute(gpt2, corrupt_ids, clean_ids, target, where="resid", qk_fix=False).values * (m_c - m_k)  # (L, T)
    for l in range(L):
        before, after = 1 + l * (h + 1), l * (3 * h + 1)
        assert scores[:before, after:].sum() == pytest.approx(resid[l].sum(), rel=1e-9, abs=1e-9), l
    # a head's output reaches the metric through every reader after it: AtP's head cell is its row's sum
    heads = attribute(gpt2, corrupt_ids, clean_ids, target, where="head", qk_fix=False).values * (m_c - m_k)  # (L, h)
    for l in range(L):
        for x in range(h):
            assert scores[up_index(l, x, h)].sum() == pytest.approx(heads[l, x], rel=1e-9, abs=1e-9), (l, x)
    # one reader: the writers' changes add up to its input's change (the stream where it reads)
    grads = clean.backward(target.position, target.gradient(clean.logits(target.position)), inputs=True)
    change = clean.layers[1]["mid"] - corrupt.layers[1]["mid"]  # (T, d) the MLP of layer 1 reads resid_mid
    want = (change * grads["blocks.1.mlp_in"]).sum()
    assert scores[:, down_index(1, None, "", h)].sum() == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_eap_ig_with_one_step_is_eap_and_more_steps_differ(gpt2):
    clean_ids, corrupt_ids = _pair(gpt2)
    target = Target(len(clean_ids) - 1, 7, "t", 5, "c")
    eap = edge_scores(gpt2, clean_ids, corrupt_ids, target)[0]
    assert np.array_equal(edge_scores(gpt2, clean_ids, corrupt_ids, target, steps=1)[0], eap)
    ig = edge_scores(gpt2, clean_ids, corrupt_ids, target, steps=4)[0]
    assert np.abs(ig - eap).max() > 1e-3


def test_on_the_induction_llama_the_circuit_holds_the_k_composition_edge(llama):
    model, clean_ids, corrupt_ids, target = llama
    res = find_circuit(model, clean_ids, corrupt_ids, target, steps=5, faithfulness=0.9)
    h = model.heads
    edge = (up_index(0, 1, h), down_index(1, 0, "k", h))  # previous-token head -> the induction head's keys
    assert edge in res.kept, [(res.up[u], res.down[v]) for u, v in res.kept]
    assert len(res.kept) < res.edge_count() // 4
    # exact edge patching, afresh: every edge outside the circuit carries the corrupted run's value
    _, clean, corrupt = edge_scores(model, clean_ids, corrupt_ids, target)
    kept = patched_metric(clean, corrupt, target, res.kept)
    assert kept == pytest.approx(res.patched, abs=1e-9)
    assert (kept - res.corrupt) / (res.clean - res.corrupt) >= 0.9
    # and the circuit is the shortest prefix: one edge fewer falls short
    order = res.kept[:-1]
    short = patched_metric(clean, corrupt, target, order)
    assert (short - res.corrupt) / (res.clean - res.corrupt) < 0.9


def test_the_llama_scores_are_derivatives_too(llama):
    """Grouped-query attention and RoPE: a key or value input is its key-value head's columns."""
    model, clean_ids, corrupt_ids, target = llama
    scores, clean, corrupt = edge_scores(model, clean_ids, corrupt_ids, target)
    h = model.heads
    edges = [(up_index(0, 1, h), down_index(1, x, c, h)) for x in (0, 3) for c in "qkv"]
    _finite_differences(scores, clean, corrupt, target, edges + [(0, down_index(0, 2, "k", h))])
    assert np.abs(node_outputs(clean) - node_outputs(corrupt)).max() > 0


def test_refusals(gpt2, tiny_bert_dir):
    clean, corrupt = _pair(gpt2)
    target = Target(len(clean) - 1, 7, "t")
    with pytest.raises(BadInput, match="same number of tokens"):
        find_circuit(gpt2, clean, corrupt[:-1], target)
    for f in (0.0, 1.5, float("nan")):
        with pytest.raises(BadInput, match="--faithfulness"):
            find_circuit(gpt2, clean, corrupt, target, faithfulness=f)
    with pytest.raises(BadInput, match="--steps"):
        find_circuit(gpt2, clean, corrupt, target, steps=0)
    with pytest.raises(BadInput, match="same"):
        find_circuit(gpt2, clean, clean, target)
    bert = load(str(tiny_bert_dir), backend="numpy")
    with pytest.raises(BadInput, match="GPT-2 and the Llama family"):
        find_circuit(bert, [1, 2], [2, 1], Target(1, 3, "x"))


@pytest.mark.parametrize("which", ["gpt2", "llama"])
@pytest.mark.parametrize("steps", [1, 3])
def test_float32_scores_equal_float64_within_float32_rounding(gpt2, llama, which, steps):
    """EAP on the float32 tape: every score within float32 rounding of the float64 tape's
    (tests/_tolerance.py: a forward and a backward pass, 2L + 1 layers deep, and the score's own
    reduction over T x d, about 1e-4 of the largest score here); measured on these tiny models: at most
    2.0e-6 of the largest score."""
    if which == "gpt2":
        model, (clean_ids, corrupt_ids) = gpt2, _pair(gpt2)
        target = Target(len(clean_ids) - 1, 7, "t", 5, "c")
    else:
        model, clean_ids, corrupt_ids, target = llama
    s64 = edge_scores(model, clean_ids, corrupt_ids, target, steps)[0]
    s32, clean, _ = edge_scores(model, clean_ids, corrupt_ids, target, steps, np.float32)
    assert clean.dtype == np.float32 and s32.dtype == np.float64
    assert np.abs(s32 - s64).max() > 0  # the float32 tape ran
    f32_close(s32, s64, depth=2 * model.layers + 1, length=len(clean_ids) * clean.embed.shape[1],
              scale=np.abs(s64).max(), what=f"{which} EAP scores, float32 against float64")


def test_a_float32_circuit_is_searched_in_float64(llama):
    model, clean_ids, corrupt_ids, target = llama
    res32 = find_circuit(model, clean_ids, corrupt_ids, target, steps=5, faithfulness=0.9, dtype=np.float32)
    res64 = find_circuit(model, clean_ids, corrupt_ids, target, steps=5, faithfulness=0.9)
    assert res32.clean == res64.clean and res32.corrupt == res64.corrupt
    _, clean, corrupt = edge_scores(model, clean_ids, corrupt_ids, target)  # float64 tapes
    assert patched_metric(clean, corrupt, target, res32.kept) == pytest.approx(res32.patched, abs=1e-12)
    assert (up_index(0, 1, model.heads), down_index(1, 0, "k", model.heads)) in res32.kept
    assert res32.faithfulness >= 0.9
