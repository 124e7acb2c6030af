"""The terminal view of ``attn stats``: a layers x heads heatmap per statistic (views.render),
then, for the statistics that keep examples, the strongest head's top contexts."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.io.textio import visible
from attncli.views.render import Heatmap, heatmap_renderables
from attncli.views.result import DocumentView

TITLES = {
    "sink": "sink: mean attention on the first token",
    "entropy": "entropy: mean of H(row) / log(visible keys)",
    "distance": "distance: mean |query - key| in tokens, weighted by attention",
    "previous_token": "previous token: mean attention on the token just before",
    "duplicate_token": "duplicate token: mean attention on earlier copies of the token",
    "induction": "induction: mean attention on the token after an earlier copy (repeated random tokens)",
}
EXAMPLES = 3  # contexts drawn per statistic (the JSON has all top K of every head)


def stats_renderables(doc: dict[str, Any], width: Optional[int]) -> list:
    from rich.table import Table
    from rich.text import Text

    parts: list = []
    L, H = doc["layers"], doc["heads"]
    for name, stat in doc["stats"].items():
        if stat["mean"] is None:
            parts.append(Text(f"{visible(TITLES.get(name, name))}: not measured on this model or corpus", style="dim"))
            continue
        decimals = (2, 1) if name == "distance" else (3, 2)
        hm = Heatmap(np.asarray(stat["mean"], dtype=float), [f"layer {l}" for l in range(L)],
                     [f"head {h}" for h in range(H)], TITLES.get(name, name), decimals=decimals,
                     notes=(f"{stat['count']:,} queries",), more="see everything with --json")
        parts += heatmap_renderables(hm, width)
    for name, heads in doc["top"].items():
        mean = doc["stats"][name]["mean"]
        if mean is None:
            continue
        layer, head = np.unravel_index(int(np.argmax(np.asarray(mean))), (L, H))
        entry = next(h for h in heads if h["layer"] == layer and h["head"] == head)
        table = Table(title=f"{visible(name.replace('_', '-'))}: top contexts of layer {int(layer)} head {int(head)}",
                      title_justify="default")  # left, no trailing spaces
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column("text", justify="right", no_wrap=True)
        table.add_column("context (query in brackets)")
        for ex in entry["examples"][:EXAMPLES]:
            table.add_row(f"{ex['score']:.3f}", f"{int(ex['text'])}", Text(visible(ex["context"])))
        parts.append(table)
    return parts


def stats_caption(doc: dict[str, Any]) -> str:
    model = doc["model"]
    return (f"{doc['texts']:,} texts ({doc['texts_scored']:,} scored, {doc['tokens']:,} tokens), {doc['probes']:,} "
            f"probes; model {visible(str(model['name']))} ({model['layers']} layers x {model['heads']} heads)")


class StatsView(DocumentView):
    """``attn stats`` (or ``attn stats merge``) as a result: the heatmaps and top contexts; what was
    read (:func:`stats_caption`) is its note."""

    draw = staticmethod(stats_renderables)

    def notes(self, width: Optional[int] = None) -> list[str]:
        return [stats_caption(self.doc)]


class StatsResult(StatsView):
    """The result of an ``attn stats`` or ``attn stats merge`` request (attncli.stats.stats_request):
    its command line is the request's."""

    def __init__(self, doc: dict[str, Any], request: Any, *, title: str) -> None:
        self.request = request
        super().__init__(doc, title=title, command=request.command, positionals=request.positionals(),
                         options=request.options())
