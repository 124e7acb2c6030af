"""The logit lens in the terminal (``attn lens``): a table of positions x layers, each cell the
top --top-k next tokens (one per line, best first) and their probabilities, each on its
probability's colour on viridis (0 to 1), the tokens as wide as the terminal allows; with --token,
a second table of that token's rank and probability. Numbers stay when colour goes."""

from __future__ import annotations

from typing import Any, Optional

from attncli.io.textio import token_label, visible
from attncli.views.render import abbreviate, palette
from attncli.views.result import DocumentView

PROB = 4  # a probability's characters: "0.92", "1.00"
MAX_TOKEN = 24  # a predicted token's characters at most (a longer one is cut, with …)


def token_width(doc: dict[str, Any], width: Optional[int]) -> int:
    """Characters for a predicted token in a cell: the longest one shown (up to MAX_TOKEN), cut
    to what ``width`` columns leave for L + 1 layer columns beside the position column (a file,
    ``width`` None, takes the longest)."""
    L, k = doc["layers"], doc["top_k"]
    longest = max((len(_shown(c)) for layer in doc["lens"] for row in layer for c in row[:k]), default=1)
    want = max(3, min(longest, MAX_TOKEN))
    if width is None:
        return want
    position = max([len("position")] + [len(_position(t, tok)) for t, tok in enumerate(_rows(doc))])
    room = (width - (position + 2)) // (L + 1) - 2 - 1 - PROB  # a column: padding 2, token, space, prob
    return max(3, min(want, room))


def _rows(doc: dict[str, Any]) -> list[str]:
    """Each position's token as drawn: its text (␣ for a space), or the document's token label
    where it has no texts (a document written before token_texts)."""
    texts = doc.get("token_texts")
    return [token_label(t) for t in texts] if texts is not None else [visible(t) for t in doc["tokens"]]


def _shown(c: dict[str, Any]) -> str:
    """A predicted token as drawn: its text (␣ for a space), else its label."""
    return token_label(c["text"]) if "text" in c else visible(c["token"])


def _position(t: int, tok: str) -> str:
    return f"{t} {abbreviate(tok, 12)}"


def _cell(cands: list[dict[str, Any]], width: int):
    """The top candidates of a cell, one per line, best first, each on its probability's colour."""
    from rich.text import Text

    cell = Text()
    for n, c in enumerate(cands):
        bg, fg = palette(c["prob"])
        if n:
            cell.append("\n")
        cell.append(f"{abbreviate(_shown(c), width):<{width}} {c['prob']:.2f}", style=f"{fg} on {bg}")
    return cell


def render_lens(console, doc: dict[str, Any]) -> None:
    for part in lens_renderables(doc, console.width):
        console.print(part)


def lens_renderables(doc: dict[str, Any], width: Optional[int] = None) -> list:
    """The lens's tables and its colour note, as rich renderables for ``width`` columns (the
    terminal, attn explore; None: a file, every token whole up to MAX_TOKEN). A cell lists the
    top ``doc["top_k"]`` (--top-k) next tokens, one per line, best first."""
    from rich.table import Table
    from rich.text import Text

    L, k = doc["layers"], doc["top_k"]
    tok_w = token_width(doc, width)
    title = f"{visible(doc['model'])} · logit lens · top next token after each layer (0 = embeddings)"
    if k > 1:
        title += f", the top {k} of each"
    # the titles are lines of their own, wrapped to the terminal, not to the table's (narrow) width
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("position", no_wrap=True)
    for l in range(L + 1):
        table.add_column(f"L{l}", no_wrap=True)
    for t, tok in enumerate(_rows(doc)):
        table.add_row(Text(_position(t, tok), style="bold"),
                      *[_cell(doc["lens"][l][t][:k], tok_w) for l in range(L + 1)],
                      end_section=k > 1)  # a rule between positions when a cell holds several lines
    parts: list = [Text(title, style="table.title"), table]
    follow = doc.get("follow")
    if follow:
        follow_title = f"--token {_shown(follow)}: rank (0 = top) and probability"
        ft = Table(box=None, padding=(0, 1), header_style="bold")
        ft.add_column("position")
        for l in range(L + 1):
            ft.add_column(f"L{l}", no_wrap=True)
        for t, tok in enumerate(_rows(doc)):
            cells = []
            for l in range(L + 1):
                p = follow["prob"][l][t]
                bg, fg = palette(p)
                cells.append(Text(f"{follow['rank'][l][t]:>4} {p:.2f}", style=f"{fg} on {bg}"))
            ft.add_row(Text(_position(t, tok), style="bold"), *cells)
        parts += [Text(follow_title, style="table.title"), ft]
    parts.append(Text("colour: viridis by probability, dark = 0, bright = 1; each row predicts the token after its "
                      "position", style="dim"))
    return parts


class LensView(DocumentView):
    """``attn lens`` as a result (attncli.views.result): its document, drawn by :func:`lens_renderables`."""

    draw = staticmethod(lens_renderables)
