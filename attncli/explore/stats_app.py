"""The statistics of ``attn stats`` in a Textual app (``attn stats ... --explore``): one statistic's
layers x heads heatmap at a time with a cursor on a head, and beside it that head's value of every
statistic and its top contexts. Keys: arrows move, n / p (or tab / shift+tab) change the
statistic, q quits. Reads a result document (``attncli.stats.report.document``); computes nothing.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Static

from attncli.errors import BadInput
from attncli.io.textio import visible
from attncli.views.render import Heatmap, heatmap_renderables
from attncli.views.stats_view import TITLES


class StatsApp(App):
    """Browse a statistics result: which head does what, and where."""

    TITLE = "attn stats"
    CSS = """
    #panels { height: 1fr; }
    #map-scroll { width: 3fr; }
    #head-scroll { width: 2fr; border-left: solid $primary-darken-2; }
    """
    BINDINGS = [Binding("left", "move(0, -1)", "head -", show=False), Binding("right", "move(0, 1)", "head +", show=False),
                Binding("up", "move(-1, 0)", "layer -", show=False), Binding("down", "move(1, 0)", "layer +", show=False),
                Binding("n,tab", "stat(1)", "next statistic"), Binding("p,shift+tab", "stat(-1)", "previous"),
                Binding("q,escape", "quit", "quit")]

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__()
        self.doc = doc
        self.names = [n for n, s in doc["stats"].items() if s["mean"] is not None]
        self.stat = 0
        self.cursor = (0, 0)

    def compose(self) -> ComposeResult:
        with Horizontal(id="panels"):
            with VerticalScroll(id="map-scroll"):
                yield Static(id="map")
            with VerticalScroll(id="head-scroll"):
                yield Static(id="head")
        yield Footer()

    def on_mount(self) -> None:
        self._draw()

    def action_move(self, di: int, dj: int) -> None:
        i, j = self.cursor
        self.cursor = (min(max(i + di, 0), self.doc["layers"] - 1), min(max(j + dj, 0), self.doc["heads"] - 1))
        self._draw()

    def action_stat(self, step: int) -> None:
        self.stat = (self.stat + step) % len(self.names)
        self._draw()

    def _draw(self) -> None:
        name = self.names[self.stat]
        L, H = self.doc["layers"], self.doc["heads"]
        hm = Heatmap(np.asarray(self.doc["stats"][name]["mean"], dtype=float), [f"layer {l}" for l in range(L)],
                     [f"head {h}" for h in range(H)], f"{self.stat + 1}/{len(self.names)} {TITLES.get(name, name)}",
                     decimals=(2, 1) if name == "distance" else (3, 2), cursor=self.cursor,
                     more="n / p: another statistic")
        width = max(self.size.width * 3 // 5 - 2, 20)
        self.query_one("#map", Static).update(Group(*heatmap_renderables(hm, width, lines=True)))
        self.query_one("#head", Static).update(Group(*head_renderables(self.doc, *self.cursor, name)))


def head_renderables(doc: dict[str, Any], layer: int, head: int, shown: str) -> list:
    """One head: its value of every statistic, then its top contexts of each statistic that keeps them."""
    values = Table(title=f"layer {layer} head {head}", title_justify="left", show_header=False, box=None)
    values.add_column()
    values.add_column(justify="right")
    for name, stat in doc["stats"].items():
        v = "-" if stat["mean"] is None else f"{stat['mean'][layer][head]:.3f}"
        values.add_row(Text(visible(name), style="bold" if name == shown else ""), v)
    parts: list = [values]
    for name, heads in doc["top"].items():
        entry = next((e for e in heads if e["layer"] == layer and e["head"] == head), None)
        if not entry or not entry["examples"]:
            continue
        parts.append(Text(f"\n{visible(name)}: top contexts (text index, score)", style="bold"))
        for ex in entry["examples"]:
            parts.append(Text(f"{int(ex['text']):>6} {ex['score']:.3f}  {visible(ex['context'])}", no_wrap=False))
    return parts


def run(doc: dict[str, Any]) -> int:
    """Run the app in this terminal (refused without one); its return code."""
    import sys

    if not os.environ.get("TEXTUAL_DRIVER") and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput("--explore needs a terminal (stdin and stdout are not one): drop --explore, or use --json")
    if not any(s["mean"] is not None for s in doc["stats"].values()):
        raise BadInput("no statistic was measured: nothing to explore")
    app = StatsApp(doc)
    app.run()
    return app.return_code or 0
