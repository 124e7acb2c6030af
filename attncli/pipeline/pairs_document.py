"""The --json document of a ``--pairs`` run (keys in docs/causal.md, "Over a dataset of pairs"):
the mean over the pairs of each value, its standard error, how many pairs, and how the shards ran.

    {"command": "patch", "pairs": 3, "model": "default", "site": "head", "metric": "logit_diff",
     "columns": "heads", "tokens": null, "mean": {"grid", "clean", "corrupt"}, "stderr": {...},
     "grid", "row_labels", "column_labels", "title", "notes", "shards", "computed", "ranges", "ran"}

For ``patch`` and ``attribute`` the grid is the fraction of the mean difference restored,
sum(effect) / sum(clean - corrupt); ``mean.grid`` the mean of each pair's own fraction.
For ``circuit``: ``mean.scores`` (writers x readers, 0 off the edge mask), the circuit found over
the pairs (causal/pairs_circuit.py) under attn circuit's keys (``edges`` strongest first with their
mean score and its standard error, ``nodes``, ``faithfulness``...), and ``top``, the TOP_EDGES
strongest edges.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from attncli.causal.circuit import layer_of, ranked, reader_node
from attncli.causal.pair_sums import PairSums
from attncli.causal.pairs_circuit import PairsCircuit
from attncli.errors import BadInput
from attncli.hf.methods.edges import down_names, edge_mask, up_names
from attncli.stats.shards import Identity

TOP_EDGES = 20
WHAT = {"ablate": "change in the metric", "patch": "restored fraction", "attribute": "estimated restored fraction",
        "circuit": "edge scores"}  # the title's words
CELL = {"ablate": "each cell: ablated - clean (the head zeroed)",
        "patch": "each cell: mean(patched - corrupt) / mean(clean - corrupt)",
        "attribute": "each cell: AtP's mean(patched - corrupt) / mean(clean - corrupt)",
        "circuit": "score: the first-order fall of the metric when the edge alone carries the corrupted value"}


def _list(x: Optional[np.ndarray]) -> Any:
    return None if x is None else np.asarray(x, dtype=np.float64).tolist()


def _edges(sums: PairSums, model: Any, edges: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """The edges (u, v) as circuit.circuit_document lists them (the reader's node and input apart),
    their mean score (as ``score`` and ``mean``) and its standard error."""
    L, h = model.layers, model.heads
    mean, err = sums.mean("scores"), sums.stderr("scores")
    up, down = up_names(L, h), down_names(L, h)
    out = []
    for u, v in edges:
        node, which = reader_node(down[v])
        out.append({"from": up[u], "to": node, "input": which, "score": float(mean[u, v]), "mean": float(mean[u, v]),
                    "stderr": None if err is None else float(err[u, v])})
    return out


def circuit_fields(model: Any, sums: PairSums, found: PairsCircuit) -> dict[str, Any]:
    """A --pairs circuit's keys, those of attn circuit's document (circuit.circuit_document: the
    circuit view draws either): its edges strongest first, their nodes, the mean metrics, the
    faithfulness reached and asked, the edge-patched search (``checks``: its edge-patched passes, as
    attn circuit's, search_steps x pairs); ``top``: the TOP_EDGES strongest edges."""
    L, h = model.layers, model.heads
    mask = edge_mask(L, h)
    edges = _edges(sums, model, found.kept)
    nodes = sorted({e["from"] for e in edges} | {e["to"] for e in edges}, key=lambda n: (layer_of(n, L), n))
    return {"edges": edges, "top": _edges(sums, model, [tuple(e) for e in ranked(sums.mean("scores"), mask)[:TOP_EDGES]]),
            "nodes": [{"name": n, "layer": layer_of(n, L)} for n in nodes], "layers": L,
            "clean": found.clean, "corrupt": found.corrupt, "patched": found.patched,
            "faithfulness": found.faithfulness, "faithfulness_asked": found.target_faithfulness,
            "edges_total": int(mask.sum()), "checks": found.checks * found.pairs, "search_steps": found.checks}


def restored(sums: PairSums) -> np.ndarray:
    """patch's and attribute's grid over the pairs: the mean change each patch makes over the mean
    clean - corrupt difference, sum(effect) / sum(clean - corrupt) (causal/pair_sums.py)."""
    gap = float(sums.mean("clean")) - float(sums.mean("corrupt"))
    if not abs(gap) > 1e-9:
        raise BadInput(f"the pairs' mean clean and corrupted metrics are equal ({float(sums.mean('clean')):.6g}): "
                       "the restored fraction over them is undefined; choose pairs whose texts differ in it")
    return sums.mean("effect") / gap


def pairs_document(model: Any, run: Any, sums: PairSums, ident: Identity, ranges: list[tuple[int, int]], *,
                   computed: int, ran: dict[str, Any], circuit: Optional[PairsCircuit] = None) -> dict[str, Any]:
    """The document of the sums over ``sums.count`` pairs of ``run`` (a PairsRequest) on ``model``
    (``circuit``: the circuit a circuit run found over them)."""
    job, n = run.job, sums.count
    settings = ident.settings
    doc: dict[str, Any] = {"command": job.kind, "pairs": n, "model": str(model.name),
                           "fingerprint": ident.model["fingerprint"], **{k: v for k, v in settings.items() if k != "kind"},
                           "mean": {k: _list(sums.mean(k)) for k in sums.sums},
                           "stderr": {k: _list(sums.stderr(k)) for k in sums.sums},
                           "shards": len(ranges), "computed": computed, "ranges": [list(r) for r in ranges], "ran": ran,
                           "out": None if run.out is None else str(run.out)}
    L, h = model.layers, model.heads
    clean = sums.mean("clean")
    corrupt = sums.mean("corrupt") if "corrupt" in sums.sums else None
    said = f"mean clean metric {float(clean):.4f}" + ("" if corrupt is None else f", corrupt {float(corrupt):.4f}")
    spread = "" if n < 2 else "; standard errors: --json"
    if job.kind == "circuit":
        doc.update(circuit_fields(model, sums, circuit))
    else:
        grid = sums.mean("grid") if job.kind == "ablate" else restored(sums)  # (rows, C)
        heads = job.kind == "ablate" or job.site == "head"
        doc["columns"] = "heads" if heads else "positions"
        doc["grid"] = _list(grid)
        doc["row_labels"] = [f"L{l}H{x}" for l in range(L) for x in range(h)] if grid.shape[0] == L * h and \
            job.site in ("key", "query") and job.kind == "attribute" else [f"L{l}" for l in range(L)]
        doc["column_labels"] = [f"H{c}" for c in range(grid.shape[1])] if heads else [str(t) for t in range(grid.shape[1])]
    site = f" {job.site}" if job.kind in ("patch", "attribute") else ""
    method = {"attribute": " (AtP*)" if job.qk_fix else " (AtP)", "circuit": " (EAP)" if job.steps == 1 else
              f" (EAP-IG, {job.steps} steps)"}.get(job.kind, "")
    doc["title"] = f"{model.name} · {job.kind}{site}{method} · {WHAT[job.kind]} · mean over {n:,} pairs"
    if job.kind != "circuit":
        doc["notes"] = [said + spread, CELL[job.kind]]
    else:
        doc["title"] += f" · {len(doc['edges'])} of {doc['edges_total']:,} edges"
        doc["notes"] = [f"mean clean {doc['clean']:.4f}, corrupt {doc['corrupt']:.4f}, the circuit alone "
                        f"{doc['patched']:.4f}: faithfulness {doc['faithfulness']:.3f} (asked {run.faithfulness:g}; "
                        f"every edge outside the circuit patched exactly in every pair: {doc['search_steps']} steps x "
                        f"{n:,} pairs = {doc['checks']:,} edge-patched passes){spread}", CELL["circuit"] + " (its mean over the pairs)"]
    return doc
