"""``attn circuit --pairs``: one circuit for a dataset of prompt pairs (Hanna et al. 2024's way).

The edges are ranked by the size of their mean score over the pairs (EAP or EAP-IG, summed by
causal/pair_sums.py, shards merged); the circuit is the shortest prefix of that ranking whose
edge-patched forwards keep ``faithfulness`` of the mean difference:

    faithfulness(n) = (mean_i patched_i(n) - mean_i corrupt_i) / (mean_i clean_i - mean_i corrupt_i)

with patched_i(n) pair i's metric when only the n top edges carry its clean values (every other edge
its corrupted run's: circuit.patched_metric). Each step of the search (circuit.shortest_prefix, about
log2(E) steps) patches every pair exactly, in float64: pairs x steps edge-patched forwards. The
weights are widened to float64 once and every pair's tapes share them; the pairs' tapes (their
activations, measured as they are made) are kept across the steps while they fit TAPE_BYTES
together, and the pairs past that budget have their two forwards run again at each step.

Shapes: U writers, D readers (hf/methods/edges.py), E edges, T tokens, d width.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any, Iterator, Sequence

import numpy as np

from attncli.causal.circuit import record_tape, check_faithfulness, patched_metric, ranked, shortest_prefix
from attncli.causal.target import Target
from attncli.errors import BadInput
from attncli.hf.methods.edges import edge_mask, node_outputs
from attncli.model.interface import Tape, has

TAPE_BYTES = 256 * 2**20  # the pairs' own tape bytes (held_bytes) kept across the search's steps, at most


@dataclass
class PairsCircuit:
    kept: list[tuple[int, int]]  # the circuit's edges (u, v), the largest mean |score| first
    clean: float  # the mean clean metric over the pairs
    corrupt: float  # the mean corrupted metric
    patched: float  # the mean metric with every edge outside the circuit patched, pair by pair
    target_faithfulness: float
    checks: int  # search steps (each one edge-patched forward of every pair)
    pairs: int

    @property
    def faithfulness(self) -> float:
        return (self.patched - self.corrupt) / (self.clean - self.corrupt)


PATCHING_READS = ("W", "x", "mid", "post")  # what edge_patched_logits reads of a corrupted run's layers


def _tapes(model: Any, items: Sequence[tuple[list[int], list[int], Target]], shared: Tape
           ) -> Iterator[tuple[Tape, Tape, np.ndarray, Target]]:
    """Each pair's float64 clean and corrupted tapes, run side by side (reusing ``shared``'s widened
    weights and unembedding), the corrupted run's writer outputs (U, T, d) and its target. The
    tapes keep only what the edge-patched pass reads (hf/methods/edges.py): the clean run's embeddings and
    weights, the corrupted run's streams (x, mid, post); the rest of what a forward records (the
    backward's) is dropped, a third of a kept pair's bytes left."""
    weights = [t["W"] for t in shared.layers]
    for clean_ids, corrupt_ids, target in items:
        clean, corrupt = (model.tape(shared.dtype, weights, shared.unembedding) for _ in range(2))
        clean.forward_pair(corrupt, list(clean_ids), list(corrupt_ids))  # each weight read once for both passes
        outputs = node_outputs(corrupt)  # (U, T, d)
        clean.layers = [{"W": t["W"]} for t in clean.layers]
        corrupt.layers = [{k: t[k] if k == "W" else t[k].copy() for k in PATCHING_READS}  # copies: the pair's
                          for t in corrupt.layers]  # stacked rows (2T, d) the views would keep are freed
        yield clean, corrupt, outputs, target


def held_bytes(run: tuple[Tape, Tape, np.ndarray, Target]) -> int:
    """The bytes one pair's kept tapes hold of their own: every recorded activation (the weights,
    shared by every pair, not counted) and the corrupted run's writer outputs."""
    clean, corrupt, outputs, _ = run
    total = outputs.nbytes
    for tape in (clean, corrupt):
        total += tape.embed.nbytes
        for layer in tape.layers:
            total += sum(a.nbytes for k, a in layer.items() if k != "W" and isinstance(a, np.ndarray))
    return total


def find_pairs_circuit(model: Any, items: Sequence[tuple[list[int], list[int], Target]], scores: np.ndarray,
                       clean: float, corrupt: float, *, faithfulness: float = 0.9) -> PairsCircuit:
    """The circuit of the mean ``scores`` (U, D) over the pairs ``items`` ((clean ids, corrupted ids,
    target) each), whose mean clean and corrupted metrics are ``clean`` and ``corrupt`` (the module's
    docstring)."""
    check_faithfulness(faithfulness)
    if not items:
        raise BadInput("no pairs: a circuit over a dataset needs at least one pair")
    if not abs(clean - corrupt) >= 1e-9:
        raise BadInput(f"the pairs' mean clean and corrupted metrics are equal ({clean:.6g}): faithfulness is "
                       "undefined; choose pairs whose texts differ in it")
    order = ranked(scores, edge_mask(model.layers, model.heads))  # (E, 2)
    if not has(model, "tape"):  # the torch backend: its edge runs (hf/backends/torch_edges.py)
        return _torch_pairs_circuit(model, items, order, clean, corrupt, faithfulness)
    shared = record_tape(model, items[0][0])  # the float64 weights, widened once for every pair's tapes
    shared.layers = [{"W": t["W"]} for t in shared.layers]  # its pass's record is not kept through the search
    kept: list[tuple[Tape, Tape, np.ndarray, Target]] = []
    spent = 0
    for run in _tapes(model, items, shared):
        spent += held_bytes(run)
        if spent > TAPE_BYTES:
            break
        kept.append(run)
    rest = items[len(kept):]  # made again at each step

    def mean_patched(n: int) -> float:
        edges = [tuple(e) for e in order[:n]]
        runs = chain(kept, _tapes(model, rest, shared))
        return float(np.mean([patched_metric(c, k, t, edges, out) for c, k, out, t in runs]))

    n, best, checks = shortest_prefix(mean_patched, len(order), clean, corrupt, faithfulness)
    return PairsCircuit([(int(u), int(v)) for u, v in order[:n]], clean, corrupt, best, faithfulness, checks,
                        len(items))


def _torch_pairs_circuit(model: Any, items: Sequence[tuple[list[int], list[int], Target]], order: np.ndarray,
                         clean: float, corrupt: float, faithfulness: float) -> PairsCircuit:
    """find_pairs_circuit on the torch backend: each pair's corrupted run (the model's ``edge_run``,
    hf/backends/torch_edges.py) kept across the search's steps while the runs fit TAPE_BYTES
    together, made again at each step past that; each step one edge-patched pass of every pair, in
    the model's dtype."""
    U, D = edge_mask(model.layers, model.heads).shape
    kept: list = []
    spent = 0
    for _, corrupt_ids, target in items:
        made = model.edge_run(corrupt_ids, target.position)
        spent += made.nbytes
        if spent > TAPE_BYTES:
            break
        kept.append(made)

    def mean_patched(n: int) -> float:
        w = np.zeros((U, D))
        for u, v in order[:n]:
            w[u, v] = 1.0
        metrics = []
        for i, (clean_ids, corrupt_ids, target) in enumerate(items):
            run = kept[i] if i < len(kept) else model.edge_run(corrupt_ids, target.position)
            metrics.append(float(target.metric(model.patched_logits(clean_ids, run, w))))
        return float(np.mean(metrics))

    n, best, checks = shortest_prefix(mean_patched, len(order), clean, corrupt, faithfulness)
    return PairsCircuit([(int(u), int(v)) for u, v in order[:n]], clean, corrupt, best, faithfulness, checks,
                        len(items))
