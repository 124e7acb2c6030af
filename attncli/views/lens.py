"""The logit lens in the terminal (``attn lens``): a table of positions x layers, each cell the
top --top-k next tokens (one per line, best first) and their probabilities, each on its
probability's colour on viridis (0 to 1), the tokens as wide as the terminal allows; with --token,
a second table of that token's rank and probability. Numbers stay when colour goes."""

from __future__ import annotations

from typing import Any, Optional

from attncli.io.textio import token_label, visible
from attncli.views.render import palette
from attncli.views.result import DocumentView

PROB = 4  # a probability's characters: "0.92", "1.00"
MAX_TOKEN = 24  # a predicted token's characters at most (a longer one is cut, with …)
MIN_TOKEN = 6  # below this a token is no longer read (" store" is 6): fewer layers are drawn instead
CELL_EXTRA = 2 + 1 + PROB  # a layer column besides its token: padding 2, a space, the probability


def token_width(doc: dict[str, Any], width: Optional[int], columns: Optional[int] = None) -> int:
    """Characters for a predicted token in a cell: the longest one shown (up to MAX_TOKEN), cut
    to what ``width`` columns leave for ``columns`` layer columns (all L + 1 unless given) beside
    the position column (a file, ``width`` None, takes the longest)."""
    L, k = doc["layers"], doc["top_k"]
    longest = max((_cells(_shown(c)) for layer in doc["lens"] for row in layer for c in row[:k]), default=1)
    want = max(3, min(longest, MAX_TOKEN))
    if width is None:
        return want
    return max(3, min(want, _room(doc, width, columns or L + 1)))


def _room(doc: dict[str, Any], width: int, columns: int) -> int:
    """Characters left for a token in each of ``columns`` layer columns at ``width`` (may be under 3)."""
    return (width - _position_width(doc) - 2) // columns - CELL_EXTRA


def layer_columns(doc: dict[str, Any], width: Optional[int]) -> list[int]:
    """The layers drawn as columns: all L + 1 where each token keeps at least MIN_TOKEN characters
    (or its whole length), else the embeddings, every s-th layer and the last, s the smallest step
    that fits ``width`` (a file, ``width`` None: every layer)."""
    L = doc["layers"]
    least = min(MIN_TOKEN, token_width(doc, None))  # a token keeps MIN_TOKEN characters, or its whole length
    if width is None or L == 0 or _room(doc, width, L + 1) >= least:
        return list(range(L + 1))
    fit = max(2, (width - _position_width(doc) - 2) // (least + CELL_EXTRA))  # columns of ``least``
    step = -(-L // (fit - 1))  # ceil: layers 0, s, 2s, ... below L, then L itself: at most ``fit`` columns
    return list(range(0, L, step)) + [L]


def layers_note(shown: list[int], layers: int) -> Optional[str]:
    """The rule that chose ``shown`` (None: every layer is drawn)."""
    if len(shown) == layers + 1:
        return None
    named = ", ".join(f"L{l}" for l in shown[:-1]) + f" and L{shown[-1]}"
    rule = "the first and the last" if len(shown) == 2 else f"every {_ordinal(shown[1])} of the {layers + 1} and the last"
    return f"layers {named}: {rule}, to fit the terminal's width (--json holds every layer)"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _position_width(doc: dict[str, Any]) -> int:
    return max([len("position")] + [_cells(_position(t, tok)) for t, tok in enumerate(_rows(doc))])


def _cells(text: str) -> int:
    """The terminal columns ``text`` takes (a CJK character takes two)."""
    from rich.cells import cell_len

    return cell_len(text)


def _fit(text: str, width: int) -> str:
    """``text`` in exactly ``width`` terminal columns: padded, or cut with … (by columns, not
    characters: a wide character cut in half leaves a space)."""
    from rich.cells import set_cell_size

    return set_cell_size(text, width) if _cells(text) <= width else set_cell_size(text, width - 1) + "…"


def _rows(doc: dict[str, Any]) -> list[str]:
    """Each position's token as drawn: its text (␣ for a space), or the document's token label
    where it has no texts (a document written before token_texts)."""
    texts = doc.get("token_texts")
    return [token_label(t) for t in texts] if texts is not None else [visible(t) for t in doc["tokens"]]


def _shown(c: dict[str, Any]) -> str:
    """A predicted token as drawn: its text (␣ for a space), else its label."""
    return token_label(c["text"]) if "text" in c else visible(c["token"])


def _position(t: int, tok: str) -> str:
    return f"{t} {_fit(tok, 12).rstrip()}"


def _cell(cands: list[dict[str, Any]], width: int):
    """The top candidates of a cell, one per line, best first, each on its probability's colour."""
    from rich.text import Text

    cell = Text()
    for n, c in enumerate(cands):
        bg, fg = palette(c["prob"])
        if n:
            cell.append("\n")
        cell.append(f"{_fit(_shown(c), width)} {c['prob']:.2f}", style=f"{fg} on {bg}")
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

    k = doc["top_k"]
    shown = layer_columns(doc, width)  # (every layer, else every s-th and the last: a terminal's width)
    tok_w = token_width(doc, width, len(shown))
    title = f"{visible(doc['model'])} · logit lens · top next token after each layer (0 = embeddings)"
    if k > 1:
        title += f", the top {k} of each"
    # the titles are lines of their own, wrapped to the terminal, not to the table's (narrow) width
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("position", no_wrap=True)
    for l in shown:
        table.add_column(f"L{l}", no_wrap=True)
    for t, tok in enumerate(_rows(doc)):
        table.add_row(Text(_position(t, tok), style="bold"),
                      *[_cell(doc["lens"][l][t][:k], tok_w) for l in shown],
                      end_section=k > 1)  # a rule between positions when a cell holds several lines
    parts: list = [Text(title, style="table.title"), table]
    follow = doc.get("follow")
    if follow:
        follow_title = f"--token {_shown(follow)}: rank (0 = top) and probability"
        ft = Table(box=None, padding=(0, 1), header_style="bold")
        ft.add_column("position")
        for l in shown:
            ft.add_column(f"L{l}", no_wrap=True)
        for t, tok in enumerate(_rows(doc)):
            cells = []
            for l in shown:
                p = follow["prob"][l][t]
                bg, fg = palette(p)
                cells.append(Text(f"{follow['rank'][l][t]:>4} {p:.2f}", style=f"{fg} on {bg}"))
            ft.add_row(Text(_position(t, tok), style="bold"), *cells)
        parts += [Text(follow_title, style="table.title"), ft]
    note = layers_note(shown, doc["layers"])
    if note:
        parts.append(Text(note, style="dim"))
    parts.append(Text("colour: viridis by probability, dark = 0, bright = 1; each row predicts the token after its "
                      "position", style="dim"))
    return parts


class LensView(DocumentView):
    """``attn lens`` as a result (attncli.views.result): its document, drawn by :func:`lens_renderables`."""

    draw = staticmethod(lens_renderables)
