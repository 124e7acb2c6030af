"""The --json document of a ``--pairs`` run (keys in docs/causal.md, "Over a dataset of pairs"):
the mean over the pairs of each value, its standard error, how many pairs, and how the shards ran.

    {"command": "patch", "pairs": 3, "model": "default", "site": "head", "metric": "logit_diff",
     "columns": "heads", "tokens": null, "mean": {"grid", "clean", "corrupt"}, "stderr": {...},
     "grid", "row_labels", "column_labels", "title", "notes", "shards", "computed", "ranges", "ran"}

For ``patch`` and ``attribute`` the grid is the fraction of the mean difference restored,
sum(effect) / sum(clean - corrupt); ``mean.grid`` the mean of each pair's own fraction.
For ``circuit``: ``mean.scores`` (writers x readers, 0 off the edge mask) and ``edges``, the
strongest TOP_EDGES by the size of their mean score, each with its standard error.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.causal.pair_sums import PairSums
from attncli.errors import BadInput
from attncli.hf.edges import down_names, edge_mask, up_names
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


def _edges(sums: PairSums, model: Any) -> list[dict[str, Any]]:
    L, h = model.layers, model.heads
    mean, err = sums.mean("scores"), sums.stderr("scores")
    mask = edge_mask(L, h)
    edges = np.argwhere(mask)  # (E, 2)
    order = edges[np.argsort(-np.abs(mean[mask]), kind="stable")][:TOP_EDGES]
    up, down = up_names(L, h), down_names(L, h)
    return [{"from": up[u], "to": down[v], "mean": float(mean[u, v]),
             "stderr": None if err is None else float(err[u, v])} for u, v in order]


def restored(sums: PairSums) -> np.ndarray:
    """patch's and attribute's grid over the pairs: the mean change each patch makes over the mean
    clean - corrupt difference, sum(effect) / sum(clean - corrupt) (causal/pair_sums.py)."""
    gap = float(sums.mean("clean")) - float(sums.mean("corrupt"))
    if not abs(gap) > 1e-9:
        raise BadInput(f"the pairs' mean clean and corrupted metrics are equal ({float(sums.mean('clean')):.6g}): "
                       "the restored fraction over them is undefined; choose pairs whose texts differ in it")
    return sums.mean("effect") / gap


def pairs_document(model: Any, run: Any, sums: PairSums, ident: Identity, ranges: list[tuple[int, int]], *,
                   computed: int, ran: dict[str, Any]) -> dict[str, Any]:
    """The document of the sums over ``sums.count`` pairs of ``run`` (a PairsRun) on ``model``."""
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
        edges = _edges(sums, model)
        doc["edges"] = edges
        doc.update(grid=[[e["mean"]] for e in edges], row_labels=[f"{e['from']} -> {e['to']}" for e in edges],
                   column_labels=["mean score"], columns="edges")
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
    doc["notes"] = [said + spread, CELL[job.kind]]
    return doc
