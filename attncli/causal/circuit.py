"""Circuits: edge attribution patching (EAP, Syed et al. 2023), EAP-IG (Hanna et al. 2024) and the
smallest set of edges that keeps a given fraction of the metric (Hanna et al.'s faithfulness).

The graph is hf/methods/edges.py's: writers (the embeddings, each head, each MLP) and readers (each head's
query, key and value input separately, each MLP's input, the logits). An edge's score

    score(u -> v) = (u_clean - u_corrupt) . d metric / d input_v                  (summed over T, d)

is the first-order estimate of how much the metric falls when the edge alone carries the corrupted
run's value (in the edge-patched forward, w[u, v] from 1 to 0). EAP takes the gradient on the clean
run; EAP-IG (``steps`` N) averages it over the passes from the embeddings
e_corrupt + (k / N)(e_clean - e_corrupt), k = 1..N (N = 1 is EAP). The gradients are
hf/methods/backward.py's per-reader input gradients (each through its own W_Q, W_K, W_V or MLP, and the
input norm frozen at that pass), on a float64 tape, or (``dtype`` float32) a float32 one: its
scores carry float32's rounding through a forward, a backward and the T x d sum of each score
(within tests/_tolerance.py's bound, measured near 2e-6 of the largest score on tiny models), and
the circuit's search still runs in float64.

The circuit: edges sorted by |score|, the shortest prefix whose edge-patched forward (every other
edge removed) keeps ``faithfulness`` of the metric's clean - corrupt difference, found by a binary
search over the prefix length (each step one edge-patched forward, in float64):

    faithfulness = (metric(patched) - metric(corrupt)) / (metric(clean) - metric(corrupt))

Shapes: U writers, D readers, T tokens, d width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from attncli.causal.documents import target_document
from attncli.causal.grids import check_same_length
from attncli.causal.target import Target
from attncli.errors import BadInput
from attncli.hf.kernels import blas
from attncli.hf.methods.edges import down_names, edge_mask, edge_patched_logits, node_outputs, up_names
from attncli.model.interface import Tape
from attncli.io.textio import texts_of, visible

MAX_STEPS = 256


@dataclass
class Circuit:
    scores: np.ndarray  # (U, D) every edge's score (0 off the edge mask)
    mask: np.ndarray  # (U, D) bool: the edges
    up: list[str]  # the U writers' names
    down: list[str]  # the D readers' names
    clean: float  # the metric on the clean run
    corrupt: float  # on the corrupted run
    steps: int  # 1: EAP; more: EAP-IG
    kept: list[tuple[int, int]]  # the circuit's edges (u, v), strongest first
    patched: float  # the metric with every edge outside the circuit removed
    target_faithfulness: float
    checks: int  # edge-patched forwards the search ran

    @property
    def faithfulness(self) -> float:
        return (self.patched - self.corrupt) / (self.clean - self.corrupt)

    def edge_count(self) -> int:
        return int(self.mask.sum())


def record_tape(model: Any, ids: Sequence[int] | None = None, embed: np.ndarray | None = None,
          like: Tape | None = None, dtype: Any = np.float64) -> Tape:
    """A pass of ``ids`` (or of the embeddings ``embed``) in ``dtype``, or in ``like``'s dtype with its
    widened weights and unembedding reused."""
    if like is not None:
        tape = model.tape(like.dtype, [t["W"] for t in like.layers], like.unembedding)
    else:
        tape = model.tape(dtype)
    tape.forward(list(ids or []), embed)
    return tape


def input_gradients(tape: Tape, target: Target) -> np.ndarray:
    """(D, T, d) d metric / d each reader's input on ``tape``'s pass (hf/methods/edges.py's reader order)."""
    grads = tape.backward(target.position, target.gradient(tape.logits(target.position)), inputs=True)
    out = []
    for l in range(len(tape.layers)):
        out += [grads[f"blocks.{l}.head_in.{c}"] for c in "qkv"]
        out.append(grads[f"blocks.{l}.mlp_in"][None])
    out.append(grads["final_in"][None])
    return np.concatenate(out)


def edge_scores(model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: Target,
                steps: int = 1, dtype: Any = np.float64) -> tuple[np.ndarray, Tape, Tape]:
    """(U, D) every edge's EAP (``steps`` 1) or EAP-IG score (float64), 0 off the edge mask; and the
    clean and corrupted runs' tapes. ``dtype``: the tapes' (their passes, gradients and the scores'
    product); float32 halves the time and carries float32's rounding (the module docstring)."""
    if not model.is_decoder:
        raise BadInput(f"the circuit's edge graph is written for pre-norm decoders (GPT-2 and the Llama family): "
                       f"model '{visible(str(model.name))}' ({visible(str(model.model_type))}) normalises its stream "
                       "after each layer, so what a reader reads is no sum of the writers' outputs; attn attribute "
                       "(attribution patching) runs on it")
    if not 1 <= steps <= MAX_STEPS:
        raise BadInput(f"--steps {steps}: give 1 (EAP) to {MAX_STEPS} points on the path")
    check_same_length(model, list(clean_ids), list(corrupt_ids))
    clean, corrupt = model.tape(dtype), model.tape(dtype)
    clean.forward_pair(corrupt, list(clean_ids), list(corrupt_ids))  # each weight read once
    grad = np.zeros((len(down_names(model.layers, model.heads)),) + clean.embed.shape, dtype=clean.dtype)  # (D, T, d)
    for k in range(1, steps + 1):
        tape = clean if k == steps else record_tape(model, embed=corrupt.embed + k / steps * (clean.embed - corrupt.embed),
                                                      like=clean)
        grad += input_gradients(tape, target) / steps
    delta = node_outputs(clean) - node_outputs(corrupt)  # (U, T, d)
    with blas.for_rows(len(delta)):
        scores = delta.reshape(len(delta), -1) @ grad.reshape(len(grad), -1).T  # (U, D), one matrix product
    return np.where(edge_mask(model.layers, model.heads), scores, 0.0).astype(np.float64), clean, corrupt


def patched_metric(clean: Tape, corrupt: Tape, target: Target, kept: Sequence[tuple[int, int]],
                   corrupt_outputs: np.ndarray | None = None) -> float:
    """The metric of the edge-patched forward with the edges ``kept`` (u, v) and every other one removed."""
    L, h = len(clean.layers), clean.arch.heads
    w = np.zeros(edge_mask(L, h).shape)
    for u, v in kept:
        w[u, v] = 1.0
    return float(target.metric(edge_patched_logits(clean, corrupt, w, target.position, corrupt_outputs)))


def find_circuit(model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: Target, *,
                 steps: int = 1, faithfulness: float = 0.9, dtype: Any = np.float64) -> Circuit:
    """The edges' scores (in ``dtype``: edge_scores) and the circuit, searched in float64 (the module's
    docstring)."""
    check_faithfulness(faithfulness)
    scores, clean, corrupt = edge_scores(model, clean_ids, corrupt_ids, target, steps, dtype)
    if clean.dtype != np.float64:  # the search's edge-patched passes stay exact
        clean = record_tape(model, clean_ids)
        corrupt = record_tape(model, corrupt_ids, like=clean)
    m_clean = float(target.metric(clean.logits(target.position)))
    m_corrupt = float(target.metric(corrupt.logits(target.position)))
    if abs(m_clean - m_corrupt) < 1e-9:
        raise BadInput(f"the clean and corrupted texts give the same {target.describe()} ({m_clean:.6g}): "
                       "faithfulness is undefined; choose texts that differ in it")
    mask = edge_mask(model.layers, model.heads)
    order = ranked(scores, mask)
    corr = node_outputs(corrupt)
    n, best, checks = shortest_prefix(
        lambda n: patched_metric(clean, corrupt, target, [tuple(e) for e in order[:n]], corr),
        len(order), m_clean, m_corrupt, faithfulness)
    kept = [(int(u), int(v)) for u, v in order[:n]]
    return Circuit(scores, mask, up_names(model.layers, model.heads), down_names(model.layers, model.heads),
                   m_clean, m_corrupt, steps, kept, best, faithfulness, checks)


def check_faithfulness(faithfulness: float) -> None:
    """BadInput unless ``faithfulness`` is a fraction above 0 and at most 1 (the circuit's, one pair's or a dataset's)."""
    if not 0.0 < faithfulness <= 1.0 or not np.isfinite(faithfulness):
        raise BadInput(f"--faithfulness {faithfulness}: a fraction above 0 and at most 1")


def ranked(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(E, 2) the edges (u, v) of ``mask``, the largest |score| first (ties in the mask's order)."""
    edges = np.argwhere(mask)  # (E, 2)
    return edges[np.argsort(-np.abs(scores[mask]), kind="stable")]


def shortest_prefix(metric: Callable[[int], float], count: int, m_clean: float, m_corrupt: float,
                    faithfulness: float) -> tuple[int, float, int]:
    """(n, metric(n), calls): the shortest prefix n of the ``count`` ranked edges whose edge-patched
    metric keeps ``faithfulness`` of clean - corrupt, by binary search (about log2(count) calls of
    ``metric``). Every edge kept is the clean run (faithfulness 1), none the corrupted one. The search
    takes faithfulness to grow with n; where it does not, the n found still meets the fraction and
    n - 1 does not, but a shorter prefix might (the tests compare it with a scan of every n)."""
    calls = 0

    def enough(m: float) -> bool:
        return (m - m_corrupt) / (m_clean - m_corrupt) >= faithfulness

    lo, hi, best = 0, count, m_clean
    while lo < hi:
        mid = (lo + hi) // 2
        m = metric(mid)
        calls += 1
        if enough(m):
            hi, best = mid, m
        else:
            lo = mid + 1
    return hi, best, calls


def reader_node(name: str) -> tuple[str, str]:
    """A reader's name -> (its node, the input it reads): L1H0.k -> (L1H0, k); L1MLP -> (L1MLP, mlp)."""
    if name == "logits":
        return "logits", "logits"
    node, _, which = name.partition(".")
    return node, which or "mlp"


def circuit_document(model: Any, enc: Any, bad: Any, target: Any, res: Circuit) -> dict[str, Any]:
    """``attn circuit``'s --json document: the circuit's nodes and edges (strongest first) with their
    scores, the faithfulness asked for and reached, and how the scores were made."""
    edges = []
    for u, v in res.kept:
        node, which = reader_node(res.down[v])
        edges.append({"from": res.up[u], "to": node, "input": which, "score": round(float(res.scores[u, v]), 8)})
    nodes = sorted({e["from"] for e in edges} | {e["to"] for e in edges}, key=lambda n: (layer_of(n, model.layers), n))
    method = "EAP" if res.steps == 1 else f"EAP-IG, {res.steps} steps"
    return {"command": "circuit", "model": model.name, "tokens": enc.tokens, "token_texts": texts_of(enc),
            "corrupt_tokens": bad.tokens,
            "target": target_document(target), "method": "eap" if res.steps == 1 else "eap-ig", "steps": res.steps,
            "clean": round(res.clean, 8), "corrupt": round(res.corrupt, 8), "patched": round(res.patched, 8),
            "faithfulness": round(res.faithfulness, 8), "faithfulness_asked": res.target_faithfulness,
            "edges_total": res.edge_count(), "checks": res.checks, "layers": model.layers,
            "nodes": [{"name": n, "layer": layer_of(n, model.layers)} for n in nodes], "edges": edges,
            "title": f"{model.name} · circuit ({method}) · {len(edges)} of {res.edge_count()} edges · "
                     f"{target.describe()}",
            "notes": [f"clean {res.clean:.4f}, corrupt {res.corrupt:.4f}, the circuit alone {res.patched:.4f}: "
                      f"faithfulness {res.faithfulness:.3f} (asked {res.target_faithfulness:g}; every edge outside "
                      f"the circuit patched exactly, {res.checks} edge-patched passes)",
                      "score: the first-order fall of the metric when the edge alone carries the corrupted value"]}


def layer_of(node: str, layers: int) -> int:
    """A node's row in the drawing: embed -1, L{l}H{x} and L{l}MLP l, logits ``layers``."""
    if node == "embed":
        return -1
    if node == "logits":
        return layers
    return int(node[1:].split("H")[0].split("M")[0])
