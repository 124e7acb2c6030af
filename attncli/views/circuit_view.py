"""``attn circuit`` drawn: in the terminal (and PNG) the circuit's edges by the reader's layer,
strongest first, with the faithfulness reached; as SVG a layered graph (nodes in rows by layer, the
embeddings at the bottom and the logits at the top, the circuit's edges as curves coloured by sign
on PuOr (orange helps, purple hurts), as thick as their |score|, each with its score in a tooltip); as HTML that graph on an
offline page (hover an edge for its score) over the table of edges. Every string from the model
or the text is escaped. Input: the document of attncli/causal/circuit.py."""

from __future__ import annotations

import html
from typing import Any, Mapping, Optional

from attncli.io.export_target import write_export
from attncli.io.textio import visible
from attncli.views.render import diverging_palette
from attncli.views.result import DocumentView, Requested

MIN_WIDTH = 720  # room for the title and the note
MAX_ROWS = 200  # the strongest edges listed in the terminal (the JSON holds them all)
NODE_W, NODE_H, ROW_GAP, COL_GAP, MARGIN = 64, 22, 70, 12, 30


def circuit_renderables(doc: dict[str, Any], width: Optional[int] = None) -> list:
    from rich.table import Table
    from rich.text import Text

    title = Text(visible(doc["title"]), style="table.title")  # wrapped to the terminal, not to the narrow table
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for name, justify in (("layer", "right"), ("from", "left"), ("to", "left"), ("input", "left"), ("score", "right")):
        table.add_column(visible(name), justify=justify)
    layers = doc["layers"]
    layer_of = {n["name"]: n["layer"] for n in doc["nodes"]}  # embed -1, L{l}H{x} and L{l}MLP l, logits ``layers``
    strongest = sorted(doc["edges"], key=lambda e: -abs(e["score"]))[:MAX_ROWS]  # a real model's circuit has hundreds
    by_layer = sorted(strongest, key=lambda e: (layer_of[e["to"]], -abs(e["score"])))
    for e in by_layer:
        row = layer_of[e["to"]]
        table.add_row(visible("out" if row == layers else str(row)), visible(e["from"]), visible(e["to"]), visible(e["input"]),
                      Text(f"{e['score']:+.4f}", style="bold" if e["score"] >= 0 else ""))
    more = len(doc["edges"]) - len(by_layer)
    out: list = [title, table]
    notes = list(doc["notes"]) + ([f"{more} more edges: see --json"] if more > 0 else [])
    out += [Text(visible(n), style="dim") for n in notes]
    return out


def circuit_svg(doc: dict[str, Any]) -> str:
    """The layered graph as a standalone SVG document (every label escaped)."""
    layers = doc["layers"]
    rows: dict[int, list[str]] = {}
    for n in doc["nodes"]:
        rows.setdefault(n["layer"], []).append(n["name"])
    widest = max((len(v) for v in rows.values()), default=1)
    width = max(MIN_WIDTH, 2 * MARGIN + widest * (NODE_W + COL_GAP))
    height = 2 * MARGIN + (layers + 1) * ROW_GAP + NODE_H + 40
    where: dict[str, tuple[float, float]] = {}
    for layer, names in rows.items():
        y = MARGIN + 40 + (layers - layer) * ROW_GAP  # the logits on top, the embeddings at the bottom
        x0 = (width - len(names) * (NODE_W + COL_GAP)) / 2
        for i, name in enumerate(names):
            where[name] = (x0 + i * (NODE_W + COL_GAP) + COL_GAP / 2, y)
    top = max((abs(e["score"]) for e in doc["edges"]), default=1.0) or 1.0
    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="11">',
             f'<rect width="100%" height="100%" fill="#ffffff"/>',
             f'<text x="{MARGIN}" y="{MARGIN}" font-size="12">{e(visible(doc["title"]))}</text>',
             f'<text x="{MARGIN}" y="{MARGIN + 16}" fill="#555555">{e(visible(doc["notes"][0]))}</text>']
    for edge in sorted(doc["edges"], key=lambda d: abs(d["score"])):  # the strongest drawn last, on top
        (x1, y1), (x2, y2) = where[edge["from"]], where[edge["to"]]
        a, b = (x1 + NODE_W / 2, y1), (x2 + NODE_W * {"q": 0.2, "k": 0.5, "v": 0.8}.get(edge["input"], 0.5), y2 + NODE_H)
        colour = diverging_palette(0.9 if edge["score"] >= 0 else 0.1)[0]  # PuOr's dark ends: orange +, purple -
        w = 1.0 + 5.0 * abs(edge["score"]) / top
        tip = f'{edge["from"]} -> {edge["to"]} ({edge["input"]}): {edge["score"]:+.5f}'
        mid = (a[1] + b[1]) / 2
        parts.append(f'<path d="M{a[0]:.1f},{a[1]:.1f} C{a[0]:.1f},{mid:.1f} {b[0]:.1f},{mid:.1f} {b[0]:.1f},{b[1]:.1f}" '
                     f'fill="none" stroke="{colour}" stroke-width="{w:.2f}" stroke-opacity="0.85">'
                     f'<title>{e(visible(tip))}</title></path>')
    for name, (x, y) in where.items():
        parts.append(f'<g><title>{e(visible(name))}</title><rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" '
                     f'height="{NODE_H}" rx="4" fill="#f2f2f2" stroke="#333333"/><text x="{x + NODE_W / 2:.1f}" '
                     f'y="{y + 15:.1f}" text-anchor="middle">{e(visible(name))}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def circuit_html(doc: dict[str, Any]) -> str:
    """An offline page: the graph (hover an edge for its score) and the table of edges."""
    e = html.escape
    rows = "\n".join(f"<tr><td>{e(visible(d['from']))}</td><td>{e(visible(d['to']))}</td>"
                     f"<td>{e(visible(d['input']))}</td><td>{d['score']:+.5f}</td></tr>" for d in doc["edges"])
    notes = "".join(f"<p>{e(visible(n))}</p>" for n in doc["notes"])
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{e(visible(doc["title"]))}</title>'
            '<style>body{font-family:monospace;margin:1em} td,th{padding:0 .6em;text-align:left}'
            ' path:hover{stroke-opacity:1}</style></head><body>\n'
            f'<h1 style="font-size:1.1em">{e(visible(doc["title"]))}</h1>{notes}\n{circuit_svg(doc)}'
            f'<table><tr><th>from</th><th>to</th><th>input</th><th>score</th></tr>\n{rows}\n</table></body></html>\n')


class CircuitView(DocumentView):
    """``attn circuit`` as a result: the table of edges in a terminal and a PNG; the layered graph as SVG and HTML."""

    draw = staticmethod(circuit_renderables)

    def svg(self, width: Optional[int] = None, *, command: bool = True) -> str:
        return circuit_svg(self.doc)

    def html(self, width: Optional[int] = None, *, command: bool = True) -> str:
        return circuit_html(self.doc)

    def export_all(self, targets: Mapping[str, Any], *, width: Optional[int] = None,
                   options: Optional[Mapping[str, str]] = None, command: bool = True) -> None:
        rest = dict(targets)
        for fmt, draw in (("svg", circuit_svg), ("html", circuit_html)):
            if rest.get(fmt) is not None:
                write_export(rest.pop(fmt), draw(self.doc), (options or {}).get(fmt) or f"--{fmt}")
        super().export_all(rest, width=width, options=options, command=command)


class CircuitResult(Requested, CircuitView):
    """``attn circuit``'s result, made from its request (attncli.causal.gradient_request.CircuitRequest)
    by attncli.pipeline.compute_gradients: the CLI and the Python API say the same command line."""
