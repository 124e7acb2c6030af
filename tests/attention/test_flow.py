"""``attn matrix --transformer M --flow``: attention flow (Abnar & Zuidema 2020) by attn's own
max-flow, checked against networkx's ``maximum_flow`` on graphs built here independently."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needed
from typer.testing import CliRunner

from _tolerance import f32_close

from attncli.attention.flow import MAX_TOKENS, attention_flow, max_flow
from attncli.cli.main import app

nx = needed("networkx")
SENTENCE, PAIR = "time flies like an arrow", "fruit flies like a banana"


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args))


def nx_flow(attentions, upto):
    """F[i, j] by networkx: nodes (l, t); edge (l-1, j) -> (l, i) of capacity (mean_h A_l + I)[i, j] / 2."""
    L, h, T, _ = attentions.shape
    G = nx.DiGraph()
    for l in range(upto + 1):
        a_hat = (attentions[l].mean(axis=0) + np.eye(T)) / 2  # softmax rows sum to 1: (A + I) / 2 is row-stochastic
        for i in range(T):
            for j in range(T):
                G.add_edge((l, j), (l + 1, i), capacity=float(a_hat[i, j]))
    return np.array([[nx.maximum_flow_value(G, (0, j), (upto + 1, i)) for j in range(T)] for i in range(T)])


@pytest.mark.parametrize("seed", range(6))
def test_max_flow_equals_networkx_on_random_graphs_with_cycles(seed):
    rng = np.random.default_rng(seed)
    N = int(rng.integers(4, 25))
    cap = rng.random((N, N)) * (rng.random((N, N)) < 0.3)  # sparse, with cycles and two-way edges
    np.fill_diagonal(cap, 0)
    G = nx.DiGraph()
    G.add_nodes_from(range(N))
    for u, v in zip(*np.nonzero(cap)):
        G.add_edge(int(u), int(v), capacity=float(cap[u, v]))
    for s, t in [(0, N - 1), (N - 1, 0), (1, 2)]:
        assert max_flow(cap, s, t) == pytest.approx(nx.maximum_flow_value(G, s, t), abs=1e-12)


def test_max_flow_needs_reverse_edges():
    """Ford-Fulkerson's classic trap: the greedy path 0-1-2-3 must be undone through 2 -> 1."""
    cap = np.zeros((4, 4))
    cap[0, 1] = cap[0, 2] = cap[1, 3] = cap[2, 3] = 1.0
    cap[1, 2] = 1.0
    assert max_flow(cap, 0, 3) == 2.0


def test_flow_of_minilm_pair_equals_networkx(minilm_dir):
    from attncli.hf import load

    model = load(str(minilm_dir), backend="numpy")
    A = model.attentions(model.encode(SENTENCE, pair=PAIR))  # (6, 12, T, T)
    np.testing.assert_allclose(attention_flow(A), nx_flow(A, A.shape[0] - 1), atol=1e-10, rtol=0)


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_gpt2_dir"])
def test_flow_json_equals_networkx_on_transformers_attentions(request, fixture):
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = request.getfixturevalue(fixture)
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path), attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(**tok(SENTENCE, return_tensors="pt"), output_attentions=True)
    A = np.stack([a[0].double().numpy() for a in out.attentions])  # (L, h, T, T)
    for layer in (0, 1):
        result = run("matrix", SENTENCE, "--transformer", str(path), "--flow", "--layer", str(layer), "--json")
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        assert doc["flow"] is True and doc["head_weights"] is None
        f32_close(np.array(doc["weights"]), nx_flow(A, layer), depth=layer + 1, length=37, printed=5e-7)
    text = " ".join(run("matrix", SENTENCE, "--transformer", str(path), "--flow").stdout.split())  # lines wrap with the path
    assert "attention flow through layers 0-1 · max-flow" in text


def test_flow_is_bounded_in_tokens(tiny_bert_dir):
    long = " ".join(["time flies like an arrow"] * 6)  # 32 pieces + [CLS], [SEP]: over the bound, under 40 positions
    result = run("matrix", long, "--transformer", str(tiny_bert_dir), "--flow")
    assert result.exit_code == 2 and f"at most {MAX_TOKENS}" in result.stderr and "Traceback" not in result.stderr
    with pytest.raises(Exception, match="at most"):
        attention_flow(np.full((1, 1, MAX_TOKENS + 1, MAX_TOKENS + 1), 1.0 / (MAX_TOKENS + 1)))


@pytest.mark.parametrize("args", [["--head", "0"], ["--rollout"], ["--explain", "1", "1"], ["--show", "norms"],
                                  ["--words"], ["--hide-special"], ["--model-view"]])
def test_flow_refuses_what_it_does_not_combine_with(tiny_bert_dir, args):
    result = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--flow", *args)
    assert result.exit_code == 2 and "--flow" in result.stderr and "Traceback" not in result.stderr


def test_flow_needs_a_transformer():
    result = run("matrix", SENTENCE, "--flow")
    assert result.exit_code == 2 and "needs --transformer" in result.stderr


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


def test_max_flow_refuses_a_source_that_is_the_sink():
    """A flow from a node to itself has no meaning (not infinity, not 0): refused with a message."""
    from attncli.attention.flow import max_flow

    with pytest.raises(ValueError, match="^the source is the sink$"):
        max_flow(np.array([[0.0, 1.0], [0.0, 0.0]]), 1, 1)
