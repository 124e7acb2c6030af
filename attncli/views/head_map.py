"""``attn heads --weights`` and ``--random N`` drawn: a layers x heads map of one role's score, every
cell's number printed in it (colour is a second channel), the composition edges between heads
above a threshold, and the strongest heads of the role with the tokens their OV and QK circuits
read and write. Input: the JSON document of attncli.pipeline.head_roles."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.io.textio import visible
from attncli.views.circuit_view import edge_table
from attncli.views.head_drawing import composition_graph_svg, head_map_svg, named_edges, report_page, stacked_svg
from attncli.views.render import Heatmap, heatmap_renderables
from attncli.views.result import DocumentView, OwnDrawings, shown

MODES = ("Q", "K", "V")  # attncli.hf.methods.head_circuits.MODES: the document's composition keys
TOP_EDGES = 10  # composition edges listed without --threshold: the strongest
MAX_EDGES_SHOWN = 40  # a terminal lists at most this many (the JSON has every one)
TOP_HEADS = 8  # the strongest heads of the role, listed with their tokens
SHORT = {"previous_token": "prev", "duplicate_token": "dup", "induction": "induct"}  # views.heads_table's
ROLE_TEXT = {"copying": "OV copying score, Re(sum lambda) / sum |lambda| of W_E W_V W_O W_U",
             "q_in": "each head's largest Q-composition from an earlier head",
             "k_in": "each head's largest K-composition from an earlier head",
             "v_in": "each head's largest V-composition from an earlier head",
             "previous_token": "previous-token score on repeated random tokens",
             "duplicate_token": "duplicate-token score on repeated random tokens",
             "induction": "induction score on repeated random tokens"}


def edges(doc: dict[str, Any], threshold: Optional[float]) -> list[dict[str, Any]]:
    """The composition edges of a weights report: every (mode, writer, reader) above ``threshold``,
    strongest first; None: the TOP_EDGES strongest."""
    found = []
    for m in MODES:
        scores = np.asarray(doc["composition"][m], dtype=np.float64)  # (L, h, L, h)
        for idx in zip(*np.nonzero(scores > (threshold if threshold is not None else 0.0))):
            l1, h1, l2, h2 = (int(i) for i in idx)
            found.append({"mode": m, "from": [l1, h1], "to": [l2, h2], "score": float(scores[idx])})
    found.sort(key=lambda e: (-e["score"], e["mode"], e["from"], e["to"]))
    return found if threshold is not None else found[:TOP_EDGES]


def role_values(doc: dict[str, Any], role: str) -> np.ndarray:
    """(L, h) the role's score per head (NaN where it was not scored)."""
    out = np.full((doc["layers"], doc["heads_per_layer"]), np.nan)
    for e in doc["heads"]:
        v = e.get(role)
        if v is not None:
            out[e["layer"], e["head"]] = v
    return out


def head_map(doc: dict[str, Any]) -> Heatmap:
    role = doc["role"]
    values = role_values(doc, role)
    masked = np.isnan(values)
    return Heatmap(np.where(masked, 0.0, values), [f"L{l}" for l in range(values.shape[0])],
                   [f"H{h}" for h in range(values.shape[1])], f"{doc['model']}: {ROLE_TEXT[role]}",
                   masked=masked if masked.any() else None, diverging=role == "copying", decimals=(2, 1),
                   more="see every score with --json",
                   masked_note="not scored (a layer-0 head has no earlier head to compose with)")


def _tokens(entry: dict[str, Any], name: str, n: int = 3) -> str:
    return " ".join(repr(t)[1:-1] for t in entry[name]["tokens"][:n])


def _top_heads(doc: dict[str, Any]):
    from rich.table import Table

    role = doc["role"]
    ranked = sorted((e for e in doc["heads"] if e.get(role) is not None), key=lambda e: -e[role])[:TOP_HEADS]
    weights = doc["source"] == "weights"
    scores = [role] + ([] if weights else [s for s in doc["scores"] if s != role])  # --random: every score
    table = Table(title=shown(f"top heads by {role}"))
    table.add_column("head", justify="right", no_wrap=True)
    for name in scores:
        table.add_column(shown(SHORT.get(name, name)), justify="right", no_wrap=True)
    for name in (("OV reads", "OV writes", "QK query", "QK key") if weights else ()):
        table.add_column(shown(name))
    for e in ranked:
        extra = tuple(_tokens(e, k) for k in ("ov_in", "ov_out", "qk_query", "qk_key")) if weights else ()
        table.add_row(shown(f"L{e['layer']}H{e['head']}"), *(f"{e[s]:.3f}" for s in scores), *(shown(x) for x in extra))
    return table


def _edges_table(doc: dict[str, Any]) -> list:
    """The composition edges as attn circuit lists its graph's (attncli.views.circuit_view.edge_table):
    by the reader's layer, the MAX_EDGES_SHOWN strongest."""
    from rich.text import Text

    found = doc["edges"]
    what = f"above {doc['threshold']} ({len(found)})" if doc.get("threshold") is not None else "strongest"
    named = named_edges(found)
    table, _more = edge_table(named, {d["to"]: d["layer"] for d in named}, str, limit=MAX_EDGES_SHOWN)
    return [Text(shown(f"composition {what}"), style="table.title"), table]


def head_map_renderables(doc: dict[str, Any], width: Optional[int]) -> list:
    out = heatmap_renderables(head_map(doc), width) + [_top_heads(doc)]
    if doc["source"] == "weights":
        out += _edges_table(doc)
    return out


def head_map_notes(doc: dict[str, Any]) -> list[str]:
    if doc["source"] == "random":
        r = doc["random"]
        return [f"{r['sequences']} sequences of {r['length']} distinct random tokens, each repeated once (seed "
                f"{r['seed']}); each score is the mean attention per query on its pattern's key (previous: the "
                "token before; duplicate: the first copy of the token; induction: the token after that copy)"]
    notes = [f"{doc['norm']}: {doc['folding']}; composed: {doc['composed']}",
             "composition: ||M_A M_B||_F / (||M_A||_F ||M_B||_F), M_A the writer's W_V W_O and M_B the reader's "
             "W_Q W_K^T (Q), W_K W_Q^T (K) or W_V W_O (V)"]
    if doc.get("folded_norms"):
        notes.append(f"{', '.join(doc['folded_norms'])}: their weights folded in, their per-token scale left out")
    if doc["kv_heads"] < doc["heads_per_layer"]:
        notes.append(f"grouped-query attention: {doc['heads_per_layer']} query heads share {doc['kv_heads']} key-value "
                     "heads; each query head is scored with its key-value head's W_K and W_V")
    if len(doc["edges"]) > MAX_EDGES_SHOWN:
        notes.append(f"{len(doc['edges']) - MAX_EDGES_SHOWN} more edges in --json")
    return notes


def head_svg(doc: dict[str, Any]) -> str:
    """The head map as SVG (attncli.views.head_drawing), and with --weights the composition graph under it."""
    role = doc["role"]
    drawn = [head_map_svg(role_values(doc, role), title=visible(f"{doc['model']}: {ROLE_TEXT[role]}"), score=role,
                          diverging=role == "copying")]
    if doc["source"] == "weights":
        drawn.append(composition_graph_svg(doc))
    return stacked_svg(drawn)


class HeadMapView(OwnDrawings, DocumentView):
    """The head map of ``attn heads --weights`` or ``--random``, drawn from its document: in a
    terminal and a PNG the heatmap and the tables; as SVG the map and the composition graph; as
    HTML those over the terminal's report."""

    def svg(self, width: Optional[int] = None, *, command: bool = True) -> str:
        return head_svg(self.doc)

    def html(self, width: Optional[int] = None, *, command: bool = True) -> str:
        return report_page(self.title, [head_svg(self.doc)], self.renderables, width)

    def renderables(self, width: Optional[int]) -> list:
        return head_map_renderables(self.doc, width)

    def notes(self, width: Optional[int] = None) -> list[str]:
        return head_map_notes(self.doc)
