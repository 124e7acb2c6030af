"""attn heads' and attn sinks' drawings for a file (attncli/views/head_drawing.py), checked by their
structure, not by eye: the SVG head map has one cell per scored head, each coloured from its own
score on the terminal heatmap's scale and carrying it; the composition graph's edges are exactly the
pairs above the threshold, found here by loops over the composition scores; a hostile model's name
and tokens are escaped (the SVG parses as XML, the HTML holds no tag of theirs); and a model of 100
layers x 64 heads (or 200 x 200) draws a bounded number of cells, in a terminal and in a file."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from rich.console import Console
from rich.table import Table

from attncli.views.head_drawing import MAX_GRAPH_EDGES, composition_graph_svg
from attncli.views.head_map import HeadMapView, edges, head_map_renderables
from attncli.views.render import FILE_MAX, diverging_palette, palette
from attncli.views.sinks_view import SinksView

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert(1)</script>"]]>\x0b&amp;'


def weights_doc(L: int, h: int, *, seed: int = 0, threshold=None, model: str = "tiny", token: str = "a",
                composition: bool = True) -> dict:
    """An ``attn heads --weights`` document of random scores (the view draws from the document alone)."""
    rng = np.random.default_rng(seed)
    heads = [{"layer": l, "head": x, "kv_head": x, "copying": float(rng.uniform(-1, 1)),
              **{f"{m}_in": float(rng.uniform(0, 1)) if l else None for m in "qkv"},
              **{name: {"ids": [1], "tokens": [token]} for name in ("ov_in", "ov_out", "qk_query", "qk_key")}}
             for l in range(L) for x in range(h)]
    doc = {"model": model, "backend": "numpy", "layers": L, "heads_per_layer": h, "kv_heads": h, "source": "weights",
           "norm": "RMSNorm", "folding": "f", "folded_norms": [], "rope": False, "composed": "W_Q W_K^T",
           "scores": ["copying", "q_in", "k_in", "v_in"], "top_k": 1, "heads": heads, "role": "copying",
           "threshold": threshold}
    if composition:
        comp = {m: np.triu(rng.uniform(0, 1, (L * h, L * h)) * (np.arange(L * h)[:, None] // h < np.arange(L * h) // h))
                .reshape(L, h, L, h).tolist() for m in "QKV"}  # only a writer in an earlier layer
        doc["composition"] = comp
        doc["edges"] = edges(doc, threshold)
    return doc


def cells(svg: str) -> list:
    return [g for g in ET.fromstring(svg).iter(f"{SVG}g") if "cell" in g.get("class", "").split()]


@pytest.mark.parametrize("role", ["copying", "k_in"])
def test_the_maps_cells_follow_the_scores(role):
    doc = {**weights_doc(3, 4), "role": role}
    svg = HeadMapView(doc).svg()
    scored = {(e["layer"], e["head"]): e[role] for e in doc["heads"] if e[role] is not None}
    drawn = [g for g in cells(svg) if "masked" not in g.get("class")]
    assert len(drawn) == len(scored) and len(cells(svg)) == 12  # k_in: layer 0 has no writer before it: 4 masked
    values = np.array(list(scored.values()))
    lo, hi = (values.min(), values.max()) if role != "copying" else (-abs(values).max(), abs(values).max())
    for g in drawn:
        key = (int(g.get("data-layer")), int(g.get("data-head")))
        v = scored[key]
        assert float(g.get("data-score")) == v
        want = (diverging_palette if role == "copying" else palette)((v - lo) / (hi - lo))
        assert g.find(f"{SVG}rect").get("fill") == want[0] and g.find(f"{SVG}text").get("fill") == want[1]
        assert g.find(f"{SVG}text").text == f"{v:.2f}" and f"{v:.5f}" in g.find(f"{SVG}title").text


@pytest.mark.parametrize("threshold", [0.5, 0.9])
def test_the_graphs_edges_are_those_above_the_threshold(threshold):
    doc = weights_doc(3, 3, seed=1, threshold=threshold)
    want = set()
    for m in "QKV":
        comp = doc["composition"][m]
        for l1, h1, l2, h2 in itertools.product(range(3), range(3), range(3), range(3)):
            if comp[l1][h1][l2][h2] > threshold:
                want.add((f"L{l1}H{h1}", f"L{l2}H{h2}", m))
    assert 0 < len(want) < MAX_GRAPH_EDGES
    svg = ET.fromstring(HeadMapView(doc).svg())
    paths = [p.find(f"{SVG}title").text for p in svg.iter(f"{SVG}path")]
    got = {(t.split()[0], t.split()[2], t.split("(")[1][0]) for t in paths}
    assert got == want and len(paths) == len(want)
    nodes = {g.find(f"{SVG}title").text for g in svg.iter(f"{SVG}g") if g.get("class") is None}
    assert nodes == {a for a, _, _ in want} | {b for _, b, _ in want}  # the heads the edges touch, no other


def test_a_hostile_models_strings_are_escaped():
    doc = weights_doc(2, 2, threshold=0.5, model=HOSTILE, token=HOSTILE)
    view = HeadMapView(doc, title=f"attn heads: {HOSTILE}")
    ET.fromstring(view.svg())  # well-formed XML: nothing of the name opened a tag or closed a section
    page = view.html()
    assert "<script" not in page and "]]>" not in page and "\x0b" not in page
    assert "&lt;script&gt;" in page
    assert set(re.findall(r"\w+://[^\s\"']*", page)) == {"http://www.w3.org/2000/svg"}  # offline: nothing remote
    sinks = {"model": HOSTILE, "sink_keys": "first", "sink_share": [[0.5, 0.25]], "first_token_share": [[0.5, 0.25]]}
    ET.fromstring(SinksView(sinks, title=HOSTILE).svg())


def test_the_sink_map_is_each_heads_sink_share():
    share = [[0.9, 0.1, 0.5], [0.0, 0.3, 1.0]]
    drawn = {(int(g.get("data-layer")), int(g.get("data-head"))): float(g.get("data-score"))
             for g in cells(SinksView({"model": "m", "sink_keys": "massive", "sink_share": share}).svg())}
    assert drawn == {(l, h): v for l, row in enumerate(share) for h, v in enumerate(row)}


def table_cells(parts) -> int:
    return sum(t.row_count * (len(t.columns) - 1) for t in parts if isinstance(t, Table))


@pytest.mark.parametrize("L, h", [(100, 64), (200, 200)])
def test_a_huge_model_draws_a_bounded_number_of_cells(L, h):
    doc = weights_doc(L, h, composition=False)
    doc["threshold"] = 0.0
    doc["edges"] = [{"mode": "K", "from": [l, x], "to": [l + 1, x], "score": 0.5} for l in range(L - 1) for x in range(h)]
    terminal = head_map_renderables(doc, 120)
    assert table_cells(terminal) <= 60 * 3 * 120, table_cells(terminal)  # 60 rows, 3 pages of a 120-column terminal
    console = Console(width=120, file=None, record=True, color_system=None)
    for part in terminal:
        console.print(part)
    assert "left out" in console.export_text()
    assert table_cells(head_map_renderables(doc, None)) <= FILE_MAX * FILE_MAX + 60 * 40  # a file's map; the tables
    svg = HeadMapView(doc).svg()
    assert len(cells(svg)) == min(L, FILE_MAX) * min(h, FILE_MAX)
    graph = ET.fromstring(composition_graph_svg(doc))
    assert len(list(graph.iter(f"{SVG}path"))) == MAX_GRAPH_EDGES
    assert f"{len(doc['edges']) - MAX_GRAPH_EDGES} more in --json" in composition_graph_svg(doc)
    if L > FILE_MAX:
        assert f"left out: layers {FILE_MAX}-{L - 1} and heads {FILE_MAX}-{h - 1}" in svg
    assert len(svg) + len(composition_graph_svg(doc)) < 8 * 2**20


def test_a_head_without_the_score_says_why_in_the_terminal():
    """k_in of a layer-0 head: no earlier head writes into it; the map's '·' says so, not 'weight 0'."""
    console = Console(width=100, record=True, color_system=None)
    for part in head_map_renderables({**weights_doc(2, 2), "role": "k_in"}, 100):
        console.print(part)
    text = console.export_text()
    assert "· = not scored (a layer-0 head has no earlier head to compose with)" in text and "weight exactly" not in text


def test_the_terminal_maps_title_shows_a_model_name_as_it_is():
    """The heatmap's title is drawn as plain text (views.render escapes its controls): a name with
    rich markup shows its brackets, not a backslash (markup-escaping it first drew ``m\\[red]x``)."""
    console = Console(width=120, record=True, color_system=None)
    for part in head_map_renderables(weights_doc(2, 2, model="m[red]x\x1b"), 120):
        console.print(part)
    text = console.export_text()
    assert "m[red]x\\x1b: OV copying score" in text and "\\[" not in text and "\x1b" not in text
