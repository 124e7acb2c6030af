"""Heads drawn for a file: ``attn heads``' head map (layers x heads, one role's score) and its
composition graph, and ``attn sinks``' map of each head's sink share, as SVG (--svg, a notebook)
and as an offline HTML page (--html: the drawings over the terminal's report as text). The PNG is
the terminal's view (attncli.views.export).

The map is a grid of cells, one per head, each with its number printed in it (colour is the
second channel: viridis, or PuOr around 0 for a signed score, as the terminal's heatmap), its
score in a tooltip and in ``data-score``; a head without that score is a dashed empty cell. The
composition graph is attn circuit's layered graph (attncli.views.circuit_view.layered_graph_svg):
the heads that an edge above the threshold touches, in rows by layer, the edges coloured by their
kind (Q, K, V) and as thick as their score. Both are bounded whatever the model: the map draws at
most FILE_MAX x FILE_MAX cells (attncli.views.render), the graph the MAX_GRAPH_EDGES strongest
edges, and each says what it leaves out. Every string (a model's name, its tokens) is escaped."""

from __future__ import annotations

import html
import re
from typing import Any, Callable, Optional, Sequence

import numpy as np

from attncli.io.textio import visible
from attncli.views.circuit_view import layered_graph_svg
from attncli.views.export import markup_safe, record
from attncli.views.render import FILE_MAX, diverging_palette, palette

MAX_GRAPH_EDGES = 200  # the composition graph draws the strongest edges (the JSON has every score)
MODE_COLOUR = {"Q": "#e69f00", "K": "#0072b2", "V": "#009e73"}  # Okabe-Ito orange, blue, green: colour-blind safe
CELL_W, CELL_H, LABEL_W, MARGIN, HEAD = 46, 20, 44, 20, 64  # px; HEAD: the title, the note and the column labels


def cell_colours(values: np.ndarray, masked: np.ndarray, diverging: bool) -> tuple[list[list[Optional[tuple[str, str]]]],
                                                                                      float, float]:
    """((L, h) (background, text colour) of each cell, None where masked; lo; hi) on the terminal
    heatmap's scale (attncli.views.render.heatmap_renderables): viridis from the lowest to the
    highest score, or PuOr symmetric around 0."""
    shown = values[~masked]
    lo, hi = (float(shown.min()), float(shown.max())) if shown.size else (0.0, 1.0)
    if diverging:
        lo, hi = -max(abs(lo), abs(hi), 1e-12), max(abs(lo), abs(hi), 1e-12)
    pick = diverging_palette if diverging else palette
    return ([[None if m else pick(0.0 if hi <= lo else (float(v) - lo) / (hi - lo)) for v, m in zip(row, mrow)]
             for row, mrow in zip(values, masked)], lo, hi)


def head_map_svg(values: np.ndarray, *, title: str, score: str, diverging: bool = False,
                 decimals: int = 2) -> str:
    """(L, h) ``values`` (NaN: not scored) as a standalone SVG grid, layer 0 on top: at most
    FILE_MAX layers and FILE_MAX heads, a note saying what is left out."""
    L, h = values.shape
    rows, cols = min(L, FILE_MAX), min(h, FILE_MAX)
    block = values[:rows, :cols]
    masked = np.isnan(block)
    colours, lo, hi = cell_colours(np.where(masked, 0.0, block), masked, diverging)
    e = html.escape
    width = max(2 * MARGIN + LABEL_W + cols * CELL_W, 2 * MARGIN + 7 * len(visible(title)), 480)  # ~7 px a character
    height = 2 * MARGIN + HEAD + rows * CELL_H + 36
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             'font-family="monospace" font-size="11">', '<rect width="100%" height="100%" fill="#ffffff"/>',
             f'<text x="{MARGIN}" y="{MARGIN + 4}" font-size="12">{e(visible(title))}</text>',
             f'<text x="{MARGIN}" y="{MARGIN + 20}" fill="#555555">each head\'s {e(visible(score))}, its number in its '
             'cell (hover: every decimal)</text>']
    x0, y0 = MARGIN + LABEL_W, MARGIN + HEAD
    for j in range(cols):
        parts.append(f'<text x="{x0 + j * CELL_W + CELL_W / 2:.0f}" y="{y0 - 6}" text-anchor="middle">H{j}</text>')
    for i in range(rows):
        y = y0 + i * CELL_H
        parts.append(f'<text x="{x0 - 6}" y="{y + 14}" text-anchor="end">L{i}</text>')
        for j in range(cols):
            x = x0 + j * CELL_W
            if masked[i, j]:
                parts.append(f'<g class="cell masked" data-layer="{i}" data-head="{j}"><title>L{i}H{j}: no '
                             f'{e(visible(score))}</title><rect x="{x}" y="{y}" width="{CELL_W}" height="{CELL_H}" '
                             'fill="#ffffff" stroke="#bbbbbb" stroke-dasharray="2,2"/></g>')
                continue
            v = float(block[i, j])
            bg, fg = colours[i][j]
            parts.append(f'<g class="cell" data-layer="{i}" data-head="{j}" data-score="{v!r}"><title>L{i}H{j} '
                         f'{e(visible(score))}: {v:.5f}</title><rect x="{x}" y="{y}" width="{CELL_W}" '
                         f'height="{CELL_H}" fill="{bg}"/><text x="{x + CELL_W - 4}" y="{y + 14}" text-anchor="end" '
                         f'fill="{fg}">{v:.{decimals}f}</text></g>')
    scale = (f"colour: PuOr, purple = {lo:.3g}, white = 0, orange = {hi:.3g}" if diverging
             else f"colour: viridis, dark = {lo:.3g}, bright = {hi:.3g}")
    left = [f"layers {rows}-{L - 1}"] if rows < L else []
    left += [f"heads {cols}-{h - 1}"] if cols < h else []
    if left:
        scale += f"; left out: {' and '.join(left)} (a file draws at most {FILE_MAX} x {FILE_MAX}: see --json)"
    parts.append(f'<text x="{MARGIN}" y="{y0 + rows * CELL_H + 22}" fill="#555555">{e(scale)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def named_edges(found: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """attn heads' composition edges (mode, from [l, h], to [l, h], score) as a layered graph's
    edges: from, to (``L{l}H{h}``), input (Q, K, V: where the curve enters the reader), mode, score."""
    return [{"from": f"L{d['from'][0]}H{d['from'][1]}", "to": f"L{d['to'][0]}H{d['to'][1]}",
             "input": d["mode"], "mode": d["mode"], "score": d["score"], "layer": d["to"][0],
             "writer_layer": d["from"][0]} for d in found]


def composition_graph_svg(doc: dict[str, Any]) -> str:
    """The composition edges of an ``attn heads --weights`` document (its ``edges``: those above
    its threshold, or the strongest) as attn circuit's layered graph: the heads they touch, in rows
    by layer, at most MAX_GRAPH_EDGES edges (the strongest)."""
    found = sorted(doc["edges"], key=lambda d: (-d["score"], d["mode"], d["from"], d["to"]))
    edges = named_edges(found[:MAX_GRAPH_EDGES])
    heads = sorted({(d["writer_layer"], d["from"]) for d in edges} | {(d["layer"], d["to"]) for d in edges},
                   key=lambda n: (n[0], int(n[1].split("H")[1])))
    what = (f"composition above {doc['threshold']} ({len(found)} edges)" if doc.get("threshold") is not None
            else f"the {len(found)} strongest composition edges")
    note = "Q-composition orange, K blue, V green (entering the reader left, middle, right); thickness: the score"
    if len(found) > len(edges):
        note += f"; the {len(edges)} strongest drawn, {len(found) - len(edges)} more in --json"
    if not edges:
        note = "no composition edge above the threshold: lower --threshold"
    return layered_graph_svg(f"{doc['model']}: {what}", note, doc["layers"] - 1, [(name, l) for l, name in heads], edges,
                             colour=lambda d: MODE_COLOUR[d["mode"]],
                             tip=lambda d: f"{d['from']} -> {d['to']} ({d['mode']}-composition): {d['score']:.5f}",
                             compact=True)


_SIZE = re.compile(r'^<svg [^>]*?width="([\d.]+)" height="([\d.]+)"')


def stacked_svg(svgs: Sequence[str]) -> str:
    """Standalone SVG documents (attn's own, which start with their width and height) one under
    the other in one SVG document."""
    if len(svgs) == 1:
        return svgs[0]
    sizes = [tuple(float(x) for x in _SIZE.match(s).groups()) for s in svgs]  # type: ignore[union-attr]
    width, height = max(w for w, _ in sizes), sum(h for _, h in sizes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}">']
    y = 0.0
    for svg, (_, h) in zip(svgs, sizes):
        parts.append(svg.replace("<svg ", f'<svg x="0" y="{y:.0f}" ', 1).rstrip("\n"))
        y += h
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def report_page(title: str, svgs: Sequence[str], draw: Callable[[Optional[int]], list], width: Optional[int]) -> str:
    """An offline HTML page: the drawings, then the terminal's report as text (laid out for
    ``width`` columns, else as wide as it needs); no script, nothing remote, every string escaped."""
    console, _parts = record(draw, width)
    text = console.export_text(clear=False, styles=False)
    e = html.escape
    return markup_safe(f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{e(visible(title))}</title>'
                       '<style>body{font-family:monospace;margin:1em} pre{font-size:12px}</style></head><body>\n'
                       f'<h1 style="font-size:1.1em">{e(visible(title))}</h1>\n' + "".join(svgs) +
                       f'<pre>{e(text)}</pre></body></html>\n')
