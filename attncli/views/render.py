"""Heatmap tables in the terminal (rich), for attention weights, scores and outputs.

Every cell carries its number; the background is a second channel from viridis, a
colour-blind-safe sequential palette (dark purple = low, yellow = high), with black or white
text, whichever reads better. A masked cell shows a dim '·' and no colour, so it never looks
like a small weight. Under NO_COLOR or in a pipe rich drops the colours and the numbers remain.

The table fits the console width: fewer decimals first, then abbreviated column headers, then
pages of columns (at most ``max_pages``); rows beyond ``max_rows`` and columns beyond the pages
are left out and the caption says so.

Shared by ``attn matrix`` (the cli wing) and ``attn explore`` (the explore wing): each view is
built as a list of rich renderables (``*_renderables``), which the ``render_*`` functions print.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from attncli.io.textio import span
from attncli.io.textio import visible as visible_text
from attncli.attention.variants import VARIANTS
from attncli.errors import BadInput

# viridis at 11 evenly spaced points (matplotlib's table), interpolated linearly in RGB.
VIRIDIS = ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
            "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725"]
_STOPS = np.array([[int(h[i : i + 2], 16) for i in (1, 3, 5)] for h in VIRIDIS], dtype=float)  # (11, 3)
MASKED = "·"
LABEL_WIDTH = 14  # row labels ("12 token") are cut to this many characters
FILE_MAX = 128  # rows and columns of a heatmap laid out for a file (width None): bounded work and size


_STOP_ROWS = _STOPS.tolist()  # the same stops as Python floats: palette runs once per drawn cell


def palette(t: float) -> tuple[str, str]:
    """(background, text colour) for t in [0, 1] on viridis."""
    t = min(max(float(t), 0.0), 1.0) * (len(_STOPS) - 1)
    lo = math.floor(t)
    hi = min(lo + 1, len(_STOPS) - 1)
    rgb = [a + (t - lo) * (b - a) for a, b in zip(_STOP_ROWS[lo], _STOP_ROWS[hi])]
    bg = "#{:02x}{:02x}{:02x}".format(*(round(x) for x in rgb))  # round half to even, as np.round
    return bg, _text_colour(bg)


# PuOr (ColorBrewer, 11 classes, colour-blind safe) from purple (low) through white (0) to orange (high)
_PUOR = ["#2d004b", "#542788", "#8073ac", "#b2abd2", "#d8daeb", "#f7f7f7", "#fee0b6", "#fdb863", "#e08214",
         "#b35806", "#7f3b08"]
_PUOR_ROWS = [[int(h[i: i + 2], 16) for i in (1, 3, 5)] for h in _PUOR]


def diverging_palette(t: float) -> tuple[str, str]:
    """(background, text colour) for t in [0, 1] on PuOr: 0 purple, 0.5 white, 1 orange (differences)."""
    t = min(max(float(t), 0.0), 1.0) * (len(_PUOR_ROWS) - 1)
    lo = math.floor(t)
    hi = min(lo + 1, len(_PUOR_ROWS) - 1)
    rgb = [a + (t - lo) * (b - a) for a, b in zip(_PUOR_ROWS[lo], _PUOR_ROWS[hi])]
    bg = "#{:02x}{:02x}{:02x}".format(*(round(x) for x in rgb))
    return bg, _text_colour(bg)


@lru_cache(maxsize=4096)
def _text_colour(bg: str) -> str:
    return BLACK if relative_luminance(bg) > _CROSSOVER else WHITE


BLACK, WHITE = "#000000", "#ffffff"  # exact colours: a terminal theme's ANSI black/white is often grey
_CROSSOVER = (0.05 * 1.05) ** 0.5 - 0.05  # ~0.179: the luminance at which black and white contrast equally


def relative_luminance(hex_colour: str) -> float:
    """WCAG 2 relative luminance of "#rrggbb" (sRGB channels linearised)."""
    c = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255.0  # (3,)
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(linear @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two "#rrggbb" colours, 1 to 21."""
    la, lb = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def abbreviate(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…" if width > 1 else text[:width]


@dataclass
class Heatmap:
    """A matrix to draw: values (R, C), labels, and where it is masked."""

    values: np.ndarray  # (R, C)
    row_labels: list[str]
    col_labels: list[str]
    title: str
    masked: np.ndarray | None = None  # (R, C) True where the cell is masked
    decimals: tuple[int, ...] = (3, 2)  # tried in order until the table fits
    rows: tuple[int, int] | None = None  # (start, end) to show; None = from 0, up to max_rows
    cols: tuple[int, int] | None = None
    notes: tuple[str, ...] = ()
    cursor: tuple[int, int] | None = None  # (row, column) drawn in reverse video (attn explore)
    cell_meta: bool = False  # each cell's style carries meta {"cell": (row, column)} (mouse clicks)
    divider_after: int | None = None  # draw a dim rule under this row (e.g. the end of a prompt)
    diverging: bool = False  # signed values (a difference): PuOr, symmetric around 0
    more: str = "pick others with --rows/--cols START:END, or see everything with --json"  # how to see what is left out


FILE_CELLS = 2 * FILE_MAX * FILE_MAX  # cells all the heatmaps of one file draw together: bounded work and size


def file_maps(maps: list[Heatmap], what: str = "heads' maps") -> list[Heatmap]:
    """The heatmaps a file draws of ``maps`` (each head's, then the last: their mean or the one
    head): all while their cells (each map's up to FILE_MAX x FILE_MAX) fit in FILE_CELLS, else as
    many of the first as fit and always the last, which then says what was left out."""
    cells = [len(range(*_range(m.rows, m.values.shape[0], FILE_MAX))) * len(range(*_range(m.cols, m.values.shape[1],
                                                                                            FILE_MAX))) for m in maps]
    if sum(cells) <= FILE_CELLS or len(maps) < 2:
        return maps
    budget, kept = FILE_CELLS - cells[-1], []
    for m, n in zip(maps[:-1], cells):
        if n > budget:
            break
        kept.append(m)
        budget -= n
    left = len(maps) - 1 - len(kept)
    note = (f"{left} of the {len(maps) - 1} {what} are left out of this file (it draws at most {FILE_CELLS:,} cells): "
            "--head H draws one head, --json holds every number")
    last = maps[-1]
    return [*kept, replace(last, notes=(*last.notes, note))]


def _range(window: tuple[int, int] | None, n: int, cap: int) -> tuple[int, int]:
    start, end = window if window is not None else (0, n)
    start = min(max(start, 0), n)
    end = min(max(end, start), n)
    return start, min(end, start + cap)


def _pages(col_w: dict[int, int], c0: int, c_end: int, avail: int) -> list[tuple[int, int]]:
    """Columns c0..c_end-1 of widths ``col_w`` (plus a space each side) cut into pages of at most
    ``avail`` characters (a column wider than that gets a page of its own): [(start, end), ...]."""
    pages, start, used = [], c0, 0
    for j in range(c0, c_end):
        if j > start and used + col_w[j] + 2 > avail:
            pages.append((start, j))
            start, used = j, 0
        used += col_w[j] + 2
    if c_end > c0:
        pages.append((start, c_end))
    return pages


def number(x: float, decimals: int) -> str:
    """``x`` with ``decimals`` decimals; a value that rounds to zero is 0.000, never -0.000 (a
    difference B - A of -1e-9 is no difference)."""
    text = f"{x:.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def _cell_texts(values: np.ndarray, masked: np.ndarray, decimals: int) -> list[list[str]]:
    return [[MASKED if m else number(x, decimals) for x, m in zip(row, mrow)] for row, mrow in zip(values, masked)]


def _cell(hm: Heatmap, row, block, block_masked, r: int, j: int, r0: int, c0: int, cell_w: int, lo: float, hi: float):
    """(text, style) of the cell in row r (of the block) and column j."""
    text = row[j - c0]
    if block_masked[r, j - c0]:
        style, shown = "dim", f" {text:^{cell_w}} "
    else:
        t = 0.0 if hi <= lo else (block[r, j - c0] - lo) / (hi - lo)
        bg, fg = (diverging_palette if hm.diverging else palette)(t)
        style, shown = f"{fg} on {bg}", f" {text:>{cell_w}} "
    if hm.cursor == (r0 + r, j):  # brackets around the number itself, which stays where it was
        style += " reverse bold"
        shown = f"{'[' + text + ']':>{cell_w + 2}}" if not block_masked[r, j - c0] else "[" + shown[1:-1] + "]"
    return shown, (_cell_style(style, r0 + r, j) if hm.cell_meta else style)


def _page_lines(hm: Heatmap, texts, block, block_masked, labels, col_labels, label_w: int, col_w: dict[int, int],
                r0: int, c0: int, s: int, e: int, lo: float, hi: float):
    """One page of the heatmap as a single Text: the header line, then one line per row; column j
    is ``col_w[j]`` characters wide (plus one space each side)."""
    from rich.text import Text

    out = Text(no_wrap=True, overflow="crop")
    out.append(" " * (label_w + 1), style="bold")
    for j in range(s, e):
        out.append(f"{abbreviate(col_labels[j], col_w[j]):>{col_w[j] + 2}}", style="bold")  # as the Table justifies it
    for r, row in enumerate(texts):
        out.append("\n")
        out.append(f"{labels[r]:<{label_w}} ", style="bold")
        for j in range(s, e):
            shown, style = _cell(hm, row, block, block_masked, r, j, r0, c0, col_w[j], lo, hi)
            out.append(shown.rstrip().rjust(col_w[j] + 2), style=style)  # a right-justified Table cell
    return out


def _cell_style(style: str, i: int, j: int):
    from rich.style import Style

    return Style.parse(style) + Style.from_meta({"cell": (i, j)})


def render_heatmap(console, hm: Heatmap, *, max_rows: int = 60, max_pages: int = 3) -> None:
    """Print ``hm`` on ``console`` as one or more tables that fit its width."""
    for part in heatmap_renderables(hm, console.width, max_rows=max_rows, max_pages=max_pages):
        console.print(part)


def heatmap_renderables(hm: Heatmap, width: int | None, *, max_rows: int = 60, max_pages: int = 3,
                        lines: bool = False) -> list:
    """``hm`` as rich renderables (titles, tables, notes) that fit ``width`` columns: what
    :func:`render_heatmap` prints, and what ``attn explore`` shows in a widget. ``width`` None:
    laid out for a file, as wide as the view needs (every row and column on one page, up to
    FILE_MAX of each, whole labels, the first of ``hm.decimals``).

    ``lines``: each page as one Text of the same lines a rich Table would draw here (no box, no
    padding: a label column, then cells of equal width), about ten times faster to render, for
    an app that redraws on every key."""
    from rich.table import Table
    from rich.text import Text

    parts: list = []

    R, C = hm.values.shape
    width_given = width is not None
    masked = hm.masked if hm.masked is not None else np.zeros((R, C), dtype=bool)
    r0, r1 = _range(hm.rows, R, max_rows if width_given else FILE_MAX)
    c0, c_end = _range(hm.cols, C, C if width_given else FILE_MAX)
    block = hm.values[r0:r1, c0:c_end]
    block_masked = masked[r0:r1, c0:c_end]
    visible = hm.values[~masked]
    lo, hi = (float(visible.min()), float(visible.max())) if visible.size else (0.0, 1.0)
    if hm.diverging:  # white is 0
        lo, hi = -max(abs(lo), abs(hi), 1e-12), max(abs(lo), abs(hi), 1e-12)
    label_cap = LABEL_WIDTH if width is not None else 1 << 30  # a file: whole labels
    labels = [abbreviate(visible_text(s), label_cap) for s in hm.row_labels[r0:r1]]  # data: controls escaped
    col_labels = [visible_text(s) for s in hm.col_labels]
    label_w = max([len(s) for s in labels] + [1])
    if width is None:  # a file: every column on one page, whole headers, the most decimals
        texts = _cell_texts(block, block_masked, hm.decimals[0])
        cell_w = max([len(s) for row in texts for s in row] + [len(col_labels[j]) for j in range(c0, c_end)] + [1])
        width = label_w + 1 + (c_end - c0) * (cell_w + 2)
    width = max(width, 20)

    for decimals in hm.decimals:
        texts = _cell_texts(block, block_masked, decimals)
        cell_w = max([len(s) for row in texts for s in row] + [1])
        per_page = max(1, (width - label_w - 1) // (cell_w + 2))
        if per_page >= c_end - c0:
            break
    # each column as wide as its cells or its whole header (up to a row label's width; a file:
    # whole), paged to fit; if that would leave columns out that equal widths show, headers are
    # cut to 8 as they fit
    avail = width - label_w - 1
    header_cap = LABEL_WIDTH if width_given else 1 << 30
    col_w = {j: max(cell_w, min(len(col_labels[j]), header_cap)) for j in range(c0, c_end)}
    pages = _pages(col_w, c0, c_end, avail)
    if width_given and len(pages) > max(-(-(c_end - c0) // per_page), max_pages):
        header_w = max([min(len(col_labels[j]), 8) for j in range(c0, c_end)] + [cell_w])
        if avail // (header_w + 2) >= c_end - c0:  # room for these headers on one page
            cell_w, per_page = header_w, c_end - c0
        col_w = {j: cell_w for j in range(c0, c_end)}
        pages = [(s, min(s + per_page, c_end)) for s in range(c0, c_end, per_page)]
    pages = pages[:max_pages]
    shown_end = pages[-1][1] if pages else c0

    for p, (s, e) in enumerate(pages):
        title = hm.title if len(pages) == 1 else f"{hm.title} ({span(s, e - 1, 'column')}, page {p + 1}/{len(pages)})"
        parts.append(Text(visible_text(title), style="bold"))
        if lines and hm.divider_after is None and label_w + 1 + sum(col_w[j] + 2 for j in range(s, e)) <= width:
            parts.append(_page_lines(hm, texts, block, block_masked, labels, col_labels, label_w, col_w, r0, c0, s, e,
                                     lo, hi))
            continue
        table = Table(box=None, padding=(0, 0), show_edge=False, pad_edge=False,
                      collapse_padding=True, header_style="bold")
        table.add_column("", no_wrap=True, min_width=label_w + 1)
        for j in range(s, e):
            header = abbreviate(col_labels[j], col_w[j])
            table.add_column(Text(f" {header:>{col_w[j]}} "), no_wrap=True, justify="right")
        for r, row in enumerate(texts):
            cells = [Text(*_cell(hm, row, block, block_masked, r, j, r0, c0, col_w[j], lo, hi)) for j in range(s, e)]
            table.add_row(Text(labels[r] + " ", style="bold"), *cells)
            if hm.divider_after is not None and r0 + r == hm.divider_after and r0 + r + 1 < r1:
                rules = [Text("─" * (col_w[j] + 2), style="dim") for j in range(s, e)]
                table.add_row(Text("─" * (label_w + 1), style="dim"), *rules)
        parts.append(table)

    notes = [visible_text(n) for n in hm.notes]
    if masked.any():
        notes.append(f"{MASKED} = masked (weight exactly 0)")
    notes.append(f"colour: PuOr, purple = {lo:.3g}, white = 0, orange = {hi:.3g}" if hm.diverging
                 else f"colour: viridis, dark = {lo:.3g}, bright = {hi:.3g}")
    left = []
    if r0 > 0 or r1 < R:
        left.append(f"{span(r0, r1 - 1, 'row')} of 0-{R - 1} shown")
    if c0 > 0 or shown_end < C:
        left.append(f"{span(c0, shown_end - 1, 'column')} of 0-{C - 1} shown")
    if left:
        notes.append("left out: " + "; ".join(left) + f" ({hm.more})")
    if any(abbreviate(col_labels[j], col_w[j]) != col_labels[j] for j in range(c0, shown_end)):
        notes.append("column headers are abbreviated with …")
    parts.append(Text("\n".join(notes), style="dim"))
    return parts


# --- the views of attn matrix -------------------------------------------------------------------


def _labels(tokens: list[str]) -> list[str]:
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def matrix_title(res, what: str) -> str:
    req = res.request
    kind = "cross-attention" if res.cross else "self-attention"
    return (f"{VARIANTS[req.variant].title} {kind} {what} · mask: {res.mask_label()} · "
            f"projection: {res.projected.label} · positions: {res.positions}")


def matrix_heatmaps(res, show: str = "weights", rows=None, cols=None, cursor=None, cell_meta=False) -> list[Heatmap]:
    """The heatmaps ``attn matrix --show`` draws: one per head plus the average, or one; ``cursor``
    (query, key) is marked on the weights and scores."""
    att = res.attention
    notes = tuple(f"row {i} ({res.tokens[i]}) has every key masked: its weights and output are all 0"
                  for i in att.empty_rows[:5])
    if show == "output":
        out = att.output
        return [Heatmap(out, _labels(res.tokens), [str(j) for j in range(out.shape[1])],
                        matrix_title(res, "output vectors (rows: queries, columns: dimensions)"),
                        decimals=(2, 1), rows=rows, cols=cols, notes=notes, cell_meta=cell_meta)]
    mats = att.weights if show == "weights" else att.scores
    heads = att.head_weights if show == "weights" else att.head_scores
    decimals = (3, 2) if show == "weights" else (2, 1)
    what = "weights" if show == "weights" else "scores (before softmax)"
    cols_labels = res.key_tokens
    maps = []
    if heads is not None:
        for h, m in enumerate(heads):
            maps.append(Heatmap(m, _labels(res.tokens), cols_labels, matrix_title(res, f"{what}, head {h} of 0-{len(heads) - 1}"),
                                masked=~att.mask, decimals=decimals, rows=rows, cols=cols, cursor=cursor,
                                cell_meta=cell_meta))
        what = f"{what}, mean of {len(heads)} heads"
    maps.append(Heatmap(mats, _labels(res.tokens), cols_labels, matrix_title(res, what), masked=~att.mask,
                        decimals=decimals, rows=rows, cols=cols, notes=notes, cursor=cursor, cell_meta=cell_meta))
    return maps


def check_spans(res, show: str = "weights", rows=None, cols=None) -> None:
    """A --rows/--cols start beyond the view is bad input."""
    n_rows, n_cols = res.attention.output.shape if show == "output" else res.attention.weights.shape
    for span, n, option, what in ((rows, n_rows, "--rows", "rows"), (cols, n_cols, "--cols", "columns")):
        if span is not None and span[0] >= n:
            raise BadInput(f"{option} starts at {span[0]}, but the view has {n} {what} (0..{n - 1})")


def matrix_renderables(res, width: int | None, show: str = "weights", rows=None, cols=None, *, cursor=None,
                       cell_meta=False, max_rows: int = 60, lines: bool = False) -> list:
    """What ``attn matrix --show`` prints, as rich renderables ``width`` columns wide (None: as
    wide as the view needs, for a file)."""
    check_spans(res, show, rows, cols)
    return [part for hm in matrix_heatmaps(res, show, rows, cols, cursor, cell_meta)
            for part in heatmap_renderables(hm, width, max_rows=max_rows, lines=lines)]


def render_matrix(console, res, show: str = "weights", rows=None, cols=None) -> None:
    for part in matrix_renderables(res, console.width, show, rows, cols):
        console.print(part)


def render_variants(console, rows: list[dict]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="attention variants (attn matrix --variant NAME)", title_justify="default")  # no trailing spaces
    for col in ("name", "formula", "source"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(Text(visible_text(x)) for x in (r["name"] + (" (default)" if r["default"] else ""), r["formula"], r["source"])))
    console.print(table)
