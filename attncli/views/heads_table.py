"""The table of ``attn heads`` (the built-in model's learned heads, or ``--transformer``'s): one
row per head with its scores and its class, fitted to a width without ever cutting the class.

The layer, head and class columns keep their whole text (no wrap, no ellipsis); score columns are
left out from the right while the table is wider than the terminal, and the caller says which
(the JSON has them all)."""

from __future__ import annotations

import io
from typing import Any, Optional

from attncli.views.result import DocumentView, Trimmed, shown

SHORT = {"previous_token": "prev", "first_token": "first", "next_token": "next", "separator": "sep",
         "duplicate_token": "dup", "induction": "induct"}


def score_keys(report: dict[str, Any]) -> list[str]:
    """The scores the report has, in its order (a pretrained model's, else the learned heads')."""
    return list(report["scores"]) if "scores" in report else ["previous_token", "first_token", "self", "local", "entropy"]


def grouped(report: dict[str, Any]) -> bool:
    """Grouped-query attention: fewer key-value heads than query heads (a "kv" column is drawn)."""
    return report.get("kv_heads", report.get("heads_per_layer", 0)) < report.get("heads_per_layer", 0)


def _table(report: dict[str, Any], keys: list[str], title: str):
    from rich.table import Table

    kv = grouped(report)
    table = Table(title=title)
    table.add_column("layer", justify="right", no_wrap=True)
    table.add_column("head", justify="right", no_wrap=True)
    if kv:
        table.add_column("kv", justify="right", no_wrap=True)
    for k in keys:
        table.add_column(SHORT.get(k, k), justify="right", no_wrap=True)
    table.add_column("label", justify="left", no_wrap=True)
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for h in report["heads"]:
        table.add_row(str(h["layer"]), str(h["head"]), *((str(h["kv_head"]),) if kv else ()),
                      *(fmt(h[k]) for k in keys), h["label"])
    u = report["uniform"]
    table.add_row("", "uniform", *(("",) if kv else ()), *(fmt(u[k]) for k in keys), "", style="dim")
    return table


def _natural_width(table) -> int:
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10_000, file=io.StringIO())
    return Measurement.get(console, console.options, table).maximum


def heads_table(report: dict[str, Any], title: str, width: int) -> tuple[Any, list[str]]:
    """(the rich Table, the score keys left out) for ``report`` in ``width`` columns: as many
    score columns as fit, from the left; layer, head and label always whole."""
    keys = score_keys(report)
    for n in range(len(keys), 0, -1):
        table = _table(report, keys[:n], title)
        if _natural_width(table) <= width:
            return table, keys[n:]
    return _table(report, [], title), keys


def heads_title(report: dict[str, Any]) -> str:
    if "scores" in report:  # a pretrained model: the scores that applied to it
        return f"heads of {shown(report['model'])} ({shown(report['backend'])} backend): mean attention per query"
    return f"learned heads of model '{shown(report['model'])}': mean attention per query"


def heads_notes(report: dict[str, Any]) -> list[str]:
    """How the heads were scored and labelled (what a terminal shows on stderr under the table)."""
    t = report["thresholds"]
    local = (f"within {report['window']} either way" if report.get("causal") is False
             else f"0..{report['window']} back")
    notes = [f"{report['sentences']} sentences, {report['queries']:,} queries; local = keys {local}. "
             f"label: the largest of {'the patterns' if 'scores' in report else 'previous/first/self'} "
             f"if >= {t['pattern']}, else local if >= {t['local']} (each also {t['margin']} above uniform), "
             f"else broad if entropy >= {t['broad']}, else mixed"]
    if grouped(report):
        notes.append(f"kv: the key-value head each query head reads (grouped-query attention: "
                     f"{report['heads_per_layer']} query heads share {report['kv_heads']})")
    return notes


class HeadsView(DocumentView):
    """``attn heads`` (attn's own LM, or --transformer's) as a result: the table of heads, as many
    score columns as ``width`` holds (None: all)."""

    def renderables(self, width: Optional[int]) -> list:
        return [Trimmed(heads_table(self.doc, heads_title(self.doc), width if width is not None else 1 << 20)[0])]

    def notes(self, width: Optional[int] = None) -> list[str]:
        left_out = [] if width is None else heads_table(self.doc, heads_title(self.doc), width)[1]
        said = [f"scores left out at {width} columns (a wider terminal or --json shows them): "
                + ", ".join(SHORT.get(k, k) for k in left_out)] if left_out else []
        return said + heads_notes(self.doc)
