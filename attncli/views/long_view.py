"""The drawing of a long text's views (attncli.attention.long_view): each row's strongest keys
(--top-k) as a table of ranked cells, attention between spans (--pool) as heatmaps, and, when
a matrix is wider than the terminal and no such view was asked for, one of them chosen here
with a note that says what is shown and how to see the rest."""

from __future__ import annotations

from typing import Any, Optional

from attncli.attention.long_view import LongSpec, LongView, apply_long_view, auto_view, span_label
from attncli.io.textio import token_label, visible
from attncli.views.render import (FILE_CELLS, FILE_MAX, LABEL_WIDTH, Heatmap, abbreviate, file_maps, heatmap_renderables,
                                  number, palette)
from attncli.views.checkpoint_heatmaps import view_title as title, pair_note, pretrained_heatmaps

CELL = 7  # a heatmap cell: "0.123" and a space each side
TOP_CELL = 14  # a --top-k cell: its weight over its key ("bank 12")
MAX_PAGES = 3  # as heatmap_renderables pages its columns
FILE_COLS = 128  # a file's heatmap shows at most this many columns (views.render.FILE_MAX)


def _labels(view, enc, words: bool) -> tuple[list[str], list[str]]:
    if words and view.words is not None:
        w = view.words
        return [f"{n} {t}" for n, t in zip(w.rows, w.tokens)], [f"{n} {t}" for n, t in zip(w.cols, w.key_tokens)]
    return ([f"{int(t)} {token_label(text)}" for t, text in zip(view.rows, view.texts or view.tokens)],
            [f"{int(t)} {token_label(text)}" for t, text in zip(view.cols, view.key_texts or view.key_tokens)])


def view_title(meta: dict[str, Any], head: Optional[int], what: str) -> str:
    return title({**meta, "head": head} if head is not None else meta, what)


def top_k_renderables(lv: LongView, view, meta: dict[str, Any], enc, width: Optional[int], *, words: bool = False,
                      notes: tuple[str, ...] = ()) -> list:
    """One table per matrix (each head, then the mean; or the one head): a row per query, its K
    strongest keys left to right (weight over ``position token``), then "other"."""
    from rich.table import Table
    from rich.text import Text

    row_labels, col_labels = _labels(view, enc, words)
    tops = [(h, t) for h, t in enumerate(lv.head_tops or [])] + [(None, lv.top)]
    R, K = lv.top.keys.shape
    shown = R if width is not None else min(R, FILE_MAX)  # a file: its cells bounded, as a heatmap's
    if width is None and len(tops) * shown * (K + 2) > FILE_CELLS:  # the heads' tables that fit, and the last
        fit = max(0, FILE_CELLS // (shown * (K + 2)) - 1)
        notes = (*notes, f"{len(tops) - 1 - min(fit, len(tops) - 1)} of the {len(tops) - 1} heads' tables are left out "
                         f"of this file (it draws at most {FILE_CELLS:,} cells): --head H draws one head, --json "
                         "holds every number")
        tops = tops[:min(fit, len(tops) - 1)] + tops[-1:]
    if shown < R:
        notes = (*notes, f"rows 0-{shown - 1} of 0-{R - 1} shown in this file: pick others with --rows, or see every "
                         "row with --json")
    parts: list = []
    for h, top in tops:
        what = f"top {top.keys.shape[1]} keys" + (f", mean of {len(lv.head_tops)} heads"
                                                   if h is None and lv.head_tops else "")
        parts.append(Text(visible(view_title(meta, h if h is not None else meta["head"], what)), style="bold"))
        table = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False, header_style="bold")
        table.add_column("", no_wrap=True, max_width=LABEL_WIDTH if width else None)
        for r in range(top.keys.shape[1]):
            table.add_column(f"#{r + 1}", justify="right", no_wrap=True, max_width=TOP_CELL if width else None)
        table.add_column("other", justify="right", no_wrap=True)
        for i, (keys, ws, other) in enumerate(zip(top.keys[:shown], top.weights[:shown], top.other[:shown])):
            cells = []
            for c, w in zip(keys, ws):
                bg, fg = palette(float(w))  # weights lie in [0, 1]
                key = abbreviate(visible(col_labels[c]), TOP_CELL if width else 1 << 30)
                cells.append(Text(f"{number(w, 3)}\n{key}", style=f"{fg} on {bg}"))
            table.add_row(Text(abbreviate(visible(row_labels[i]), LABEL_WIDTH if width else 1 << 30), style="bold"),
                          *cells, Text(number(other, 3), style="dim"))
        parts.append(table)
    parts.append(Text("\n".join(visible(n) for n in (*lv.notes, *notes,
                                                       "colour: viridis on [0, 1], dark = 0, bright = 1")), style="dim"))
    return parts


def pooled_heatmaps(lv: LongView, meta: dict[str, Any], enc, *, notes: tuple[str, ...] = (), cursor=None,
                    cell_meta: bool = False) -> list[Heatmap]:
    """The heatmaps of a pooled view: each head's, then the mean's (or the one head's)."""
    p = lv.pooled
    rows = [f"{n} {span_label(s, enc)}" for n, s in zip(p.span_index, p.row_spans)]
    cols = [f"{n} {span_label(s, enc, 12)}" for n, s in zip(p.key_span_index, p.col_spans)]
    by = f"{p.by}-token chunks" if isinstance(p.by, int) else f"{p.by}s"
    what = f"weights between {by}"
    spans = ("spans: " + ", ".join(f"{n} = tokens {s[0]}-{s[-1]}" for n, s in zip(p.span_index[:8], p.row_spans[:8]))
             + (", …" if len(p.row_spans) > 8 else ""))
    maps = []
    for h, m in enumerate(p.head_weights if p.head_weights is not None else []):
        maps.append(Heatmap(m, rows, cols, view_title(meta, h, what), cursor=cursor, cell_meta=cell_meta))
    if p.head_weights is not None:
        what = f"{what}, mean of {len(p.head_weights)} heads"
    maps.append(Heatmap(p.weights, rows, cols, view_title(meta, None, what), notes=(*lv.notes, spans, *notes),
                        cursor=cursor, cell_meta=cell_meta, more="see the tokens with --rows and --top-k, or every span with --json"))
    return maps


def columns_that_fit(width: Optional[int]) -> tuple[int, int]:
    """(columns of a heatmap page, columns beyond which a matrix is drawn another way) at ``width``
    (None: a file, which shows up to FILE_COLS columns). A terminal pages a matrix's columns (at
    most MAX_PAGES pages); one of which less than half would be shown is drawn another way."""
    if width is None:
        return FILE_COLS, FILE_COLS
    page = max(1, (max(width, 20) - LABEL_WIDTH - 1) // CELL)
    return page, 2 * page * MAX_PAGES


def long_renderables(view, meta: dict[str, Any], enc, lv: Optional[LongView], spec: LongSpec, width: Optional[int], *,
                     words: bool = False, col_span=None, auto: bool = True) -> list:
    """The view drawn ``width`` columns wide (None: a file's): --top-k / --pool as asked, else the
    matrix (``views.checkpoint_heatmaps``), or, when ``auto`` and its columns would not fit, the view
    ``attention.long_view.auto_view`` picks, with a note."""
    note: tuple[str, ...] = ()
    if lv is None and auto and col_span is None and not words:
        page, fits = columns_that_fit(width)
        C = view.weights.shape[1]
        k = max(1, min(8, ((width or 200) - LABEL_WIDTH) // (TOP_CELL + 1) - 1))
        chosen = auto_view(C, fits, rows_given=spec.rows is not None, enc=enc, page=page, k=k)
        if chosen is not None:
            lv = apply_long_view(view, chosen, enc)
            where = "the terminal" if width is not None else "a file"
            shown = (f"each row's {chosen.top_k} strongest keys (as --top-k {chosen.top_k})" if chosen.top_k
                     else f"pooled (as --pool {chosen.pool})")
            rest = ("--top-k K for more keys, --rows to pick other rows" if chosen.top_k
                    else "--rows last:16 (or A-B, word:TEXT) for single tokens, --top-k K for each row's strongest keys")
            note = (f"{C} columns are too many for {where}: drawn {shown}; see {rest}, "
                    "or every number with --json",)

    pair = pair_note(enc)
    notes = (*view.notes, f"rows: queries, columns: keys · backend: {meta['backend']}", *((pair,) if pair else ()), *note)
    if lv is not None and lv.top is not None:
        return top_k_renderables(lv, view, meta, enc, width, words=words, notes=notes)
    maps = pooled_heatmaps(lv, meta, enc, notes=notes) if lv is not None and lv.pooled is not None \
        else pretrained_heatmaps(view, meta, enc, None, col_span)
    if width is None:  # a file: its cells bounded in all, not only per map
        maps = file_maps(maps)
    return [part for hm in maps for part in heatmap_renderables(hm, width)]

