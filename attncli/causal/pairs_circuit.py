"""``attn circuit --pairs``: one circuit for a dataset of prompt pairs (Hanna et al. 2024's way).

The edges are ranked by the size of their mean score over the pairs (EAP or EAP-IG, summed by
causal/pair_sums.py, shards merged); the circuit is the shortest prefix of that ranking whose
edge-patched forwards keep ``faithfulness`` of the mean difference:

    faithfulness(n) = (mean_i patched_i(n) - mean_i corrupt_i) / (mean_i clean_i - mean_i corrupt_i)

with patched_i(n) pair i's metric when only the n top edges carry its clean values (every other edge
its corrupted run's: circuit.patched_metric). Each step of the search (circuit.shortest_prefix, about
log2(E) steps) patches every pair exactly, in float64: pairs x steps edge-patched forwards, each pair's
two tapes made again each step unless the pairs' tapes fit TAPE_BYTES together.

Shapes: U writers, D readers (hf/edges.py), E edges, T tokens, d width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from attncli.causal.circuit import _tape, patched_metric, ranked, shortest_prefix
from attncli.causal.target import Target
from attncli.errors import BadInput
from attncli.hf.edges import edge_mask, node_outputs
from attncli.model.interface import Tape

TAPE_BYTES = 256 * 2**20  # the pairs' float64 tapes kept across the search's steps when they fit this together


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


def _tapes(model: Any, items: Sequence[tuple[list[int], list[int], Target]]
           ) -> Iterator[tuple[Tape, Tape, np.ndarray, Target]]:
    """Each pair's float64 clean and corrupted tapes, the corrupted run's writer outputs (U, T, d) and its target."""
    for clean_ids, corrupt_ids, target in items:
        clean = _tape(model, clean_ids)
        corrupt = _tape(model, corrupt_ids, like=clean)
        yield clean, corrupt, node_outputs(corrupt), target


def find_pairs_circuit(model: Any, items: Sequence[tuple[list[int], list[int], Target]], scores: np.ndarray,
                       clean: float, corrupt: float, *, faithfulness: float = 0.9) -> PairsCircuit:
    """The circuit of the mean ``scores`` (U, D) over the pairs ``items`` ((clean ids, corrupted ids,
    target) each), whose mean clean and corrupted metrics are ``clean`` and ``corrupt`` (the module's
    docstring)."""
    if not 0.0 < faithfulness <= 1.0 or not np.isfinite(faithfulness):
        raise BadInput(f"--faithfulness {faithfulness}: a fraction above 0 and at most 1")
    if not abs(clean - corrupt) >= 1e-9:
        raise BadInput(f"the pairs' mean clean and corrupted metrics are equal ({clean:.6g}): faithfulness is "
                       "undefined; choose pairs whose texts differ in it")
    order = ranked(scores, edge_mask(model.layers, model.heads))  # (E, 2)
    size = sum(2 * len(c) * model.layers * 16 * model.hidden_size * 8 for c, _, _ in items)  # about, float64
    kept = list(_tapes(model, items)) if size <= TAPE_BYTES else None

    def mean_patched(n: int) -> float:
        edges = [tuple(e) for e in order[:n]]
        runs = kept if kept is not None else _tapes(model, items)
        return float(np.mean([patched_metric(c, k, t, edges, out) for c, k, out, t in runs]))

    n, best, checks = shortest_prefix(mean_patched, len(order), clean, corrupt, faithfulness)
    return PairsCircuit([(int(u), int(v)) for u, v in order[:n]], clean, corrupt, best, faithfulness, checks,
                        len(items))
