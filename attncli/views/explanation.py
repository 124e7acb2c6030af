"""The ``--explain`` panel of one cell (attncli.attention.explain's document) in the terminal (rich):
each step's name, value and note, as a table when the width allows and stacked when not.

Shared by ``attn matrix --explain``, the pretrained views and ``attn explore``.
"""

from __future__ import annotations

from attncli.io.textio import token_label
from attncli.io.textio import visible as visible_text


def _fmt(value) -> str:
    if isinstance(value, list):
        shown = ", ".join(f"{x:.3g}" for x in value[:4])
        return f"[{shown}{', …' if len(value) > 4 else ''}]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


NOTE_MIN = 24  # the narrowest the note column of an explanation gets before the steps stack instead


class ExplanationSteps:
    """The steps of an explanation, (name, value, note) each, laid out for the width they get: a
    table (step, value, note) where the note column gets at least ``NOTE_MIN`` characters beside
    whole values; else stacked, each step's name and value on a line (the value on its own
    indented line if they do not fit together) and its note below, so a value is never cut and a
    note never squeezed into a column a few characters wide."""

    def __init__(self, steps: list[tuple[str, str, str]]) -> None:
        self.steps = steps

    def table(self):
        from rich import box
        from rich.table import Table
        from rich.text import Text

        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        table.add_column("step", no_wrap=True)
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("note", style="dim", min_width=NOTE_MIN)
        for row in self.steps:
            table.add_row(*(Text(x) for x in row))
        return table

    def __rich_console__(self, console, options):
        from rich.text import Text

        width = options.max_width
        name_w = max(len(name) for name, _, _ in self.steps)
        value_w = max(len(value) for _, value, _ in self.steps)
        if max(name_w, 4) + max(value_w, 5) + NOTE_MIN + 3 * 2 <= width:  # each column padded by a space each side
            yield self.table()
            return
        for name, value, note in self.steps:
            if name_w + 2 + len(value) <= width:
                yield Text(f"{name:<{name_w}}  {value}", style="bold", no_wrap=True, overflow="fold")
            else:
                yield Text(name, style="bold")
                yield Text("  " + value, no_wrap=True, overflow="fold")
            if note:
                yield Text("  " + note, style="dim")


def explanation_renderables(doc: dict) -> list:
    """The ``--explain`` panel of one cell (attncli.attention.explain) as rich renderables."""
    from rich.text import Text

    q, k = doc["query"], doc["key"]
    shown = lambda side: token_label(side.get("text", side["token"]))  # noqa: E731 - its text: ␣ for a space
    title = f"cell ({q['index']}, {k['index']}): query '{shown(q)}' -> key '{shown(k)}' · {doc['variant']}: {doc['formula']}"
    groups = [(None, doc["steps"])] if "steps" in doc else [(f"head {h['head']}", h["steps"]) for h in doc["heads"]]  # 0-based, as --head
    parts: list = []
    for head, steps in groups:
        parts.append(Text(visible_text(title if head is None else f"{title} · {head}"), style="bold"))
        parts.append(ExplanationSteps([tuple(visible_text(x) for x in (s["name"], _fmt(s["value"]), s["note"]))
                                       for s in steps]))
    if doc["masked"]:
        parts.append(Text(visible_text("masked: " + "; ".join(doc["mask_reasons"]))))
    parts.append(Text(visible_text(f"weight = {doc['weight']:.6g}" + (f" ({doc['note']})" if doc.get("note") else ""))))
    return parts


def render_explanation(console, doc: dict) -> None:
    for part in explanation_renderables(doc):
        console.print(part)
