"""A circuit over a dataset of pairs (attncli/causal/pairs_circuit.py): the shortest prefix of the
edges ranked by mean |score| that keeps the asked fraction of the mean difference, every pair
patched exactly. Checked against a scan of every prefix written here, against the single-pair
circuit for one pair, and on the hand-built induction Llama (the previous-token head -> induction
head edge through K, 0.9 kept, checked by patching afresh)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.causal.circuit import edge_scores, find_circuit, patched_metric, ranked  # noqa: E402
from attncli.causal.pairs_circuit import find_pairs_circuit  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward import DecoderTape  # noqa: E402
from attncli.hf.methods.edges import down_index, edge_mask, up_index  # noqa: E402


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("pairs-circuit")
    return load(every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=3), backend="numpy")


def gpt2_items(model, n: int = 3, length: int = 7):
    """``n`` pairs of random token ids (one swapped), each with its own target and contrast."""
    rng = np.random.default_rng(5)
    V = model.vocab_size
    items = []
    for _ in range(n):
        clean = [int(i) for i in rng.integers(0, V, length)]
        corrupt = list(clean)
        corrupt[2] = int((clean[2] + 1 + rng.integers(V - 1)) % V)
        a, b = (int(i) for i in rng.choice(V, 2, replace=False))
        items.append((clean, corrupt, Target(length - 1, a, "a", b, "b")))
    return items


def mean_scores(model, items, steps=1):
    """(scores (U, D), clean, corrupt): each edge's mean score and the mean metrics, pair by pair."""
    scores, cleans, corrupts = [], [], []
    for c, k, t in items:
        s, ct, kt = edge_scores(model, c, k, t, steps)
        scores.append(s)
        cleans.append(float(t.metric(ct.logits(t.position))))
        corrupts.append(float(t.metric(kt.logits(t.position))))
    return np.mean(scores, axis=0), float(np.mean(cleans)), float(np.mean(corrupts))


def scan(model, items, scores, clean, corrupt):
    """Every prefix n = 0..E of the ranked edges: its faithfulness over the pairs, patched afresh."""
    order = [tuple(e) for e in ranked(scores, edge_mask(model.layers, model.heads))]
    tapes = [edge_scores(model, c, k, t)[1:] + (t,) for c, k, t in items]
    out = []
    for n in range(len(order) + 1):
        m = np.mean([patched_metric(ct, kt, t, order[:n]) for ct, kt, t in tapes])
        out.append((m - corrupt) / (clean - corrupt))
    return np.array(out)


@pytest.mark.parametrize("faithfulness", [0.5, 0.9])
def test_the_circuit_is_the_shortest_prefix_a_scan_of_every_prefix_finds(gpt2, faithfulness):
    items = gpt2_items(gpt2)
    scores, clean, corrupt = mean_scores(gpt2, items)
    found = find_pairs_circuit(gpt2, items, scores, clean, corrupt, faithfulness=faithfulness)
    curve = scan(gpt2, items, scores, clean, corrupt)  # (E + 1,)
    n = len(found.kept)
    assert curve[n] >= faithfulness and found.faithfulness == pytest.approx(curve[n], abs=1e-9)
    if n:
        assert curve[n - 1] < faithfulness  # one edge fewer falls short
    if np.all(np.diff(curve >= faithfulness) >= 0):  # met from some prefix on: the search finds the first
        assert n == int(np.argmax(curve >= faithfulness))
    assert found.checks <= int(np.ceil(np.log2(len(curve)))) + 1 and found.pairs == len(items)
    assert 0 < n < len(curve) - 1  # neither nothing nor everything: a search that means something


def test_one_pair_is_the_single_pair_circuit(gpt2):
    items = gpt2_items(gpt2, 1)
    c, k, t = items[0]
    single = find_circuit(gpt2, c, k, t, faithfulness=0.8)
    scores, clean, corrupt = mean_scores(gpt2, items)
    found = find_pairs_circuit(gpt2, items, scores, clean, corrupt, faithfulness=0.8)
    assert found.kept == single.kept and found.checks == single.checks
    assert found.patched == pytest.approx(single.patched, abs=1e-12)


def test_tapes_made_again_each_step_give_the_same_circuit(gpt2, monkeypatch):
    from attncli.causal import pairs_circuit

    items = gpt2_items(gpt2)
    scores, clean, corrupt = mean_scores(gpt2, items)
    kept = find_pairs_circuit(gpt2, items, scores, clean, corrupt)
    monkeypatch.setattr(pairs_circuit, "TAPE_BYTES", 0)
    again = find_pairs_circuit(gpt2, items, scores, clean, corrupt)
    assert again.kept == kept.kept and again.patched == kept.patched


def test_the_weights_are_widened_once_and_the_tapes_past_the_budget_made_again(gpt2, monkeypatch):
    """Every pair's tapes share one float64 copy of the weights (a copy a pair would be the whole
    model's weights in float64 per pair: 1.1 GB on SmolLM2-135M), and exactly the pairs whose tapes
    no longer fit TAPE_BYTES are made again at each step, the circuit unchanged."""
    from attncli.causal import pairs_circuit

    items = gpt2_items(gpt2)
    scores, clean, corrupt = mean_scores(gpt2, items)
    every = find_pairs_circuit(gpt2, items, scores, clean, corrupt)
    real_tape, real_pass = pairs_circuit.record_tape, DecoderTape.forward_pair
    widened, passes = [], []

    def widening(model, ids=None, embed=None, like=None, dtype=np.float64):
        widened.append(real_tape(model, ids, embed, like, dtype))
        return widened[-1]

    def recording(self, other, ids, other_ids):
        real_pass(self, other, ids, other_ids)
        passes.append((list(ids), self, other))

    shared = real_tape(gpt2, items[0][0])
    sizes = [pairs_circuit.held_bytes(run) for run in pairs_circuit._tapes(gpt2, items, shared)]
    monkeypatch.setattr(pairs_circuit, "record_tape", widening)
    monkeypatch.setattr(DecoderTape, "forward_pair", recording)
    monkeypatch.setattr(pairs_circuit, "TAPE_BYTES", sizes[0] + sizes[1])  # two pairs' tapes fit, the third's not
    found = find_pairs_circuit(gpt2, items, scores, clean, corrupt)
    assert found.kept == every.kept and found.patched == every.patched
    assert len(widened) == 1 and all(set(t) == {"W"} for t in widened[0].layers)  # widened once, no record kept
    weights = [t["W"] for t in widened[0].layers]
    assert all(t.layers[l]["W"] is weights[l] for _, a, b in passes for t in (a, b) for l in range(gpt2.layers))
    assert len(passes) == len(items) + found.checks  # the third pair's two tapes again, each step
    assert all(ids == items[2][0] for ids, _, _ in passes[len(items):])


def test_held_bytes_is_what_a_pairs_tapes_hold(gpt2):
    """held_bytes against the memory Python's allocator traces while one pair's tapes are made (the
    shared weights made before): every recorded activation counted, the attention patterns (h, T, T)
    included, and little besides (the arrays' headers): no view keeping a larger array alive."""
    import gc
    import tracemalloc

    from attncli.causal import pairs_circuit
    from attncli.causal.circuit import record_tape

    items = gpt2_items(gpt2, 1, length=40)
    shared = record_tape(gpt2, items[0][0])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run = next(pairs_circuit._tapes(gpt2, items, shared))
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    held = pairs_circuit.held_bytes(run)
    assert held <= traced <= held + 32768  # fixed: bytes, not floats (the arrays' headers on top; measured 15 kB)
    # what is kept is what the edge-patched pass reads (the search's results above are made from it):
    # the clean run's weights, the corrupted run's streams, well under a whole forward's record
    clean, corrupt, _, _ = run
    assert all(set(t) == {"W"} for t in clean.layers)
    assert all(set(t) == set(pairs_circuit.PATCHING_READS) for t in corrupt.layers)
    whole = record_tape(gpt2, items[0][0], like=shared)
    recorded = sum(a.nbytes for t in whole.layers for k, a in t.items() if k != "W" and isinstance(a, np.ndarray))
    assert held < run[2].nbytes + recorded


def test_refusals(gpt2):
    items = gpt2_items(gpt2, 2)
    scores, clean, _ = mean_scores(gpt2, items)
    with pytest.raises(BadInput, match="mean clean and corrupted metrics are equal"):
        find_pairs_circuit(gpt2, items, scores, clean, clean)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(BadInput, match="faithfulness"):
            find_pairs_circuit(gpt2, items, scores, clean, clean - 1, faithfulness=bad)


def test_on_the_induction_llama_the_dataset_circuit_holds_the_k_composition_edge(tmp_path):
    from _llama_head_fixtures import build_head_llama, induction_pair

    model = load(str(build_head_llama(tmp_path / "llama")), backend="numpy")
    items = [induction_pair(model, seed) for seed in (1, 2, 3)]
    scores, clean, corrupt = mean_scores(model, items, steps=5)  # EAP-IG
    found = find_pairs_circuit(model, items, scores, clean, corrupt, faithfulness=0.9)
    h = model.heads
    edge = (up_index(0, 1, h), down_index(1, 0, "k", h))  # previous-token head -> the induction head's keys
    assert edge in found.kept
    assert len(found.kept) < int(edge_mask(model.layers, model.heads).sum()) // 4
    # exact edge patching afresh, pair by pair: the mean keeps 0.9; one edge fewer does not
    tapes = [edge_scores(model, c, k, t)[1:] + (t,) for c, k, t in items]
    for kept, ok in ((found.kept, True), (found.kept[:-1], False)):
        m = np.mean([patched_metric(ct, kt, t, kept) for ct, kt, t in tapes])
        assert ((m - corrupt) / (clean - corrupt) >= 0.9) == ok
