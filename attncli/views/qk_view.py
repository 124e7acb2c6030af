"""``attn qk`` drawn: the largest parts of one score (query-side component x key-side component),
then each side's components summed over the other side. Input: hf/methods/qk_attribution.document."""

from __future__ import annotations

from typing import Any, Optional

from attncli.io.textio import token_label, visible
from attncli.views.result import DocumentView, Requested

SIDES = {"query_side": "by query side (summed over the other side)",
         "key_side": "by key side (summed over the other side)"}


def _table(*names: str):
    """A borderless table whose first columns are text and the last two numbers: ``names`` are constants."""
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), header_style="bold")
    for n, name in enumerate(names):
        table.add_column(visible(name), justify="right" if n >= len(names) - 2 else "left")
    return table


def qk_renderables(doc: dict[str, Any], width: Optional[int] = None) -> list:
    """The header line, the top parts, each side's sums and the check line. Titles are lines of their
    own, so they wrap to the terminal's width, not a table's."""
    from rich.text import Text

    q, k = doc["query"], doc["key"]
    score = doc["score"] if doc["score"] else 1.0
    pairs = _table("query side", "key side", "part", "share")
    for p in doc["top"]:
        pairs.add_row(visible(p["query_side"]), visible(p["key_side"]), f"{p['value']:+.4f}",
                      f"{p['value'] / score:+.0%}")
    shown = lambda side: token_label(side.get("text", side["token"]))  # noqa: E731 - its text: ␣ for a space
    out: list = [Text(visible(f"layer {doc['layer']} head {doc['head']}: score of query {q['position']} "
                              f"'{shown(q)}' -> key {k['position']} '{shown(k)}' = {doc['score']:+.4f}"),
                      style="bold"), pairs]
    n = len(doc["top"])
    for side, heading in SIDES.items():
        ranked = sorted(zip(doc["components"], doc[side]), key=lambda cv: -abs(cv[1]))[:n]
        table = _table("component", "part", "share")
        for name, value in ranked:
            table.add_row(visible(name), f"{value:+.4f}", f"{value / score:+.0%}")
        out += [Text(visible(heading), style="bold"), table]
    out.append(Text(f"sum of every part = {doc['sum']:+.6f}; the score = {doc['score']:+.6f} "
                    f"({len(doc['components'])} x {len(doc['components'])} parts: see --json)", style="dim"))
    return out


class QKView(DocumentView):
    draw = staticmethod(qk_renderables)


class QKResult(Requested, QKView):
    """``attn qk``'s result, made from its request (attncli.pipeline.qk_compute.QKRequest, its positions
    resolved) by attncli.pipeline.compute_qk."""
