"""The model view (bertviz's, in the terminal): every head of a range of layers as a small shaded
map with its class beside it. Drawn by ``attn matrix --transformer --model-view`` and by ``attn
explore`` (``M``), from the same lines: :func:`model_view_renderables` builds them,
:func:`render_model_view` prints them.

The small maps carry a shade character per cell, so they read without colour too. The data
(layer range, classes, JSON) is :mod:`attncli.attention.model_view`'s. Shapes: ``h`` heads, ``T``
tokens drawn.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.io.textio import token_label, visible
from attncli.attention.words import hide_special as hide_fn
from attncli.io.textio import texts_of
from attncli.attention.model_view import head_classes
from attncli.views.checkpoint_heatmaps import pair_note
from attncli.views.render import palette

SHADES = ((0.05, " "), (0.2, "░"), (0.4, "▒"), (0.7, "▓"), (2.0, "█"))
SHORT = {"previous_token": "prev", "next_token": "next", "first_token": "first", "separator": "sep", "self": "self",
         "duplicate_token": "dup", "induction": "induct", "local": "local", "broad": "broad", "mixed": "mixed"}
LEGEND = ("each map: rows = queries, columns = keys, in token order; shade: ' ' < 0.05 <= ░ < 0.2 <= ▒ < 0.4 "
          "<= ▓ < 0.7 <= █ (colour: viridis, the same weight); beside each head its class on this input "
          "(attn heads --transformer scores them over many sentences)")


def shade(w: float) -> str:
    return next(ch for bound, ch in SHADES if w < bound)


def strongest(m: np.ndarray, tokens: list[str]) -> str:
    """The strongest cell of one head's (T, T) map, as 'query→key weight' (the tokens escaped: a view)."""
    i, j = np.unravel_index(int(np.argmax(m)), m.shape)
    return f"{visible(tokens[i])}→{visible(tokens[j])} {m[i, j]:.2f}"


def class_text(c: dict[str, Any], short: bool = False) -> str:
    """A head's class and its score, e.g. 'first 0.58' (short) or 'first_token 0.58'."""
    score = "" if c["score"] is None else f" {c['score']:.2f}"
    return (SHORT.get(c["label"], c["label"]) if short else c["label"]) + score


def shown_positions(enc, hide_special: bool) -> np.ndarray:
    """(T,) the input positions the model view draws (special tokens dropped with hide_special)."""
    keep = ~np.asarray(enc.special, dtype=bool) if hide_special else np.ones(len(enc.tokens), dtype=bool)
    return np.flatnonzero(keep)


def layer_maps(attentions: np.ndarray, layer: int, enc, hide_special: bool) -> np.ndarray:
    """(h, T, T) the maps of one layer as drawn: with hide_special, rows renormalised over the kept keys."""
    if not hide_special:
        return attentions[layer]

    keep = np.zeros(len(enc.tokens), dtype=bool)
    keep[shown_positions(enc, True)] = True
    return hide_fn(attentions[layer], keep, keep)[0]


def _style(style: str, meta: Optional[dict]):
    if meta is None:
        return style
    from rich.style import Style

    return Style.parse(style) + Style.from_meta(meta)


def model_view_renderables(model, enc, attentions: np.ndarray, lo: int, hi: int, width: Optional[int], *,
                           hide_special: bool = False, classes: Optional[list] = None,
                           cursor: Optional[tuple[int, int]] = None, cell_meta: bool = False) -> list:
    """The lines of the model view of layers lo..hi-1 at ``width`` columns (None: a file's, every
    head of a layer side by side): a small shaded map per head with its class, side by side as
    the width allows; when even one map does not fit, one line per head instead. ``cursor``
    (layer, head) is drawn in reverse video; with ``cell_meta`` each head's segments carry meta
    {"grid": (layer, head)} (mouse clicks, as in ``attn explore``)."""
    from rich.text import Text


    if classes is None:
        classes = head_classes(model, enc, attentions, hide_special)
    shown = shown_positions(enc, hide_special)  # (T,) input positions drawn
    tokens = [token_label(text) for text in (texts_of(enc)[t] for t in shown)]  # each token's text, as drawn
    T = len(tokens)
    if width is None:  # a file: every head of a layer side by side, two characters a cell
        width = 1 + model.heads * (max(T * 2, 10) + 2)
    width = max(width, 20)
    cell = 2 if (T * 2 + 2) * 2 <= width else 1
    block_w = max(T * cell, 10)
    per_row = (width - 1) // (block_w + 2)
    # the model's name (a path from anywhere) and its tokens are data: visible() shows their controls
    out = [Text(visible(f"{model.name} · model view: layers {lo}-{hi - 1} x {model.heads} heads · backend {model.backend}"),
                style="bold"),
           Text(visible("tokens: " + "  ".join(f"{t} {label}" for t, label in zip(shown, tokens))))]
    if hide_special:
        out.append(Text("special tokens hidden: each row renormalised over the other keys", style="dim"))
    note = pair_note(enc)
    if note:
        out.append(Text(note, style="dim"))
    for layer in range(lo, hi):
        out.append(Text(f"layer {layer}", style="bold"))
        maps = layer_maps(attentions, layer, enc, hide_special)  # (h, T, T)
        if per_row < 1 or T > 60:  # one line per head
            for h in range(model.heads):
                line = (f"  head {h:>2}  {class_text(classes[layer][h]):<22} strongest: "
                        f"{strongest(maps[h], tokens)}")
                meta = {"grid": (layer, h)} if cell_meta else None
                out.append(Text(line, style=_style("reverse" if cursor == (layer, h) else "", meta)))
            continue
        for start in range(0, model.heads, per_row):
            group = range(start, min(start + per_row, model.heads))
            header = Text(no_wrap=True)
            for h in group:
                meta = {"grid": (layer, h)} if cell_meta else None
                label = f"{h:>2} {class_text(classes[layer][h], short=True)}"[:block_w].ljust(block_w)
                if cursor == (layer, h):
                    header.append(label, style=_style("bold reverse", meta))
                    header.append("  ", style=_style("bold", meta))
                else:
                    header.append(label + "  ", style=_style("bold", meta))
            out.append(header)
            for i in range(T):
                line = Text(no_wrap=True)
                for h in group:
                    meta = {"grid": (layer, h)} if cell_meta else None
                    for j in range(T):
                        w = float(maps[h, i, j])
                        ch = shade(w)
                        line.append(ch * cell, style=_style(palette(w)[0] if ch.strip() else "", meta))
                    line.append(" " * (block_w - T * cell + 2))
                out.append(line)
    out.append(Text(LEGEND, style="dim"))
    return out


def render_model_view(console, model, enc, attentions: np.ndarray, lo: int, hi: int, *,
                      hide_special: bool = False, classes: Optional[list] = None) -> None:
    """Print the model view of layers lo..hi-1 at the console's width (``classes``: as
    :func:`model_view_renderables`)."""
    for part in model_view_renderables(model, enc, attentions, lo, hi, console.width, hide_special=hide_special,
                                       classes=classes):
        console.print(part)
