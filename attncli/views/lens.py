"""The logit lens in the terminal (``attn lens``): a table of positions x layers, each cell the
top next token and its probability, the background its probability on viridis (0 to 1); with
--token, a second table of that token's rank and probability. Numbers stay when colour goes."""

from __future__ import annotations

from typing import Any

from attncli.textio import visible
from attncli.views.render import abbreviate, palette

CELL = 10  # characters of a cell: a token cut to fit, a space, the probability as 0.xx


def _cell(token: str, prob: float):
    from rich.text import Text

    bg, fg = palette(prob)
    width = CELL - 5  # the token, a space, the probability's 4 characters ("0.92", "1.00")
    return Text(f"{abbreviate(visible(token), width):<{width}} {prob:.2f}", style=f"{fg} on {bg}")


def render_lens(console, doc: dict[str, Any]) -> None:
    for part in lens_renderables(doc):
        console.print(part)


def lens_renderables(doc: dict[str, Any]) -> list:
    """The lens's tables and its colour note, as rich renderables (the terminal and the exports)."""
    from rich.table import Table
    from rich.text import Text

    L = doc["layers"]
    title = f"{visible(doc['model'])} · logit lens · top next token after each layer (0 = embeddings)"
    table = Table(title=title, box=None, padding=(0, 1), header_style="bold", title_justify="left")
    table.add_column("position")
    for l in range(L + 1):
        table.add_column(f"L{l}", no_wrap=True)
    for t, tok in enumerate(doc["tokens"]):
        table.add_row(Text(f"{t} {abbreviate(visible(tok), 12)}", style="bold"),
                      *[_cell(doc["lens"][l][t][0]["token"], doc["lens"][l][t][0]["prob"]) for l in range(L + 1)])
    parts: list = [table]
    follow = doc.get("follow")
    if follow:
        ft = Table(title=f"--token {visible(follow['token'])}: rank (0 = top) and probability", box=None,
                   padding=(0, 1), header_style="bold", title_justify="left")
        ft.add_column("position")
        for l in range(L + 1):
            ft.add_column(f"L{l}", no_wrap=True)
        for t, tok in enumerate(doc["tokens"]):
            cells = []
            for l in range(L + 1):
                p = follow["prob"][l][t]
                bg, fg = palette(p)
                cells.append(Text(f"{follow['rank'][l][t]:>4} {p:.2f}", style=f"{fg} on {bg}"))
            ft.add_row(Text(f"{t} {abbreviate(visible(tok), 12)}", style="bold"), *cells)
        parts.append(ft)
    parts.append(Text("colour: viridis by probability, dark = 0, bright = 1; each row predicts the token after its "
                      "position", style="dim"))
    return parts
