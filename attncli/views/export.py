"""Exports of a drawn view (``--svg``, ``--html``, ``--png`` and ``attn explore``'s ``x``): laid
out for the file, not for the terminal, offline, and written whole or not at all.

A file has no terminal: unless a width is asked for, a view is drawn as wide as it needs
(``draw(None)``: every column, whole labels, the most decimals) and recorded by rich at the width
of its widest part that must not wrap (a table, a map line), at least :data:`MIN_WIDTH` so that
titles and notes read. The SVG loads no font from the network (rich's default ``@font-face``
points at a CDN): it names a local monospace stack. The PNG is that SVG rasterised by CairoSVG
(the ``png`` extra). Every file goes through :func:`attncli.fileio.atomic_write`.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Callable, Iterable, Optional

MIN_WIDTH = 80  # columns: a narrower view still gets room for its titles and notes
MAX_WIDTH = 4000  # columns: the widest drawing recorded (a 512-token matrix is ~3,600)
FONT_STACK = "'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', 'Courier New', monospace"
PNG_EXTRA = "--png needs the png extra: pip install 'attncli[png]' (CairoSVG, and the cairo library: apt-get install libcairo2)"

Draw = Callable[[Optional[int]], Iterable]  # width (None: the file's) -> rich renderables


def drawing_width(parts: list, cap: Optional[int] = None) -> int:
    """The columns a recorded drawing of ``parts`` needs: its widest table or no-wrap line, at
    least MIN_WIDTH, at most ``cap`` (or MAX_WIDTH)."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    probe = Console(width=MAX_WIDTH, file=io.StringIO())
    widest = 0
    for part in parts:
        if isinstance(part, Table) or (isinstance(part, Text) and part.no_wrap):
            widest = max(widest, Measurement.get(probe, probe.options, part).maximum)
    return min(max(widest, MIN_WIDTH), cap or MAX_WIDTH)


def record(draw: Draw, width: Optional[int] = None, command: Optional[str] = None):
    """A recording rich Console holding ``draw``'s view (and ``command`` under it, dim): at
    ``width`` columns when given (laid out as for a terminal that wide), else as wide as the view
    needs (see :func:`drawing_width`)."""
    from rich.console import Console

    parts = list(draw(width))
    columns = width if width is not None else drawing_width(parts)
    console = Console(record=True, width=columns, file=io.StringIO(), color_system="truecolor", force_terminal=True,
                      legacy_windows=False)
    for part in parts:
        console.print(part)
    if command:
        console.print(command, style="dim", highlight=False, markup=False)
    return console


_FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}\s*")
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def svg_text(console, title: str) -> str:
    """The recorded view as SVG that loads nothing: rich's export without its remote font faces."""
    svg = console.export_svg(title=title, clear=False)
    svg = _COMMENT.sub("", _FONT_FACE.sub("", svg))
    return re.sub(r"font-family:\s*Fira Code,\s*monospace", f"font-family: {FONT_STACK}", svg)


def html_text(console) -> str:
    """The recorded view as a static HTML page (inline styles, no script, nothing remote)."""
    return console.export_html(clear=False)


def png_available() -> None:
    """BadInput (exit 2) naming the ``png`` extra when CairoSVG or the cairo library is missing."""
    from attncli.errors import BadInput

    try:
        import cairosvg  # noqa: F401  (loads the cairo library through cairocffi)
    except (ImportError, OSError):
        raise BadInput(PNG_EXTRA) from None


def png_bytes(svg: str, scale: float = 1.0) -> bytes:
    """``svg`` rasterised to PNG by CairoSVG (one SVG pixel = ``scale`` PNG pixels)."""
    png_available()
    import cairosvg

    return cairosvg.svg2png(bytestring=svg.encode("utf-8"), scale=scale, unsafe=False)


def export_files(draw: Draw, title: str, *, svg: Optional[Path] = None, html: Optional[Path] = None,
                 png: Optional[Path] = None, width: Optional[int] = None, command: Optional[str] = None) -> None:
    """Record ``draw``'s view once and write each file asked for, atomically (RuntimeFailure
    naming the file, exit 1, when one cannot be written: the old file is left whole)."""
    from attncli.fileio import atomic_write

    if svg is None and html is None and png is None:
        return
    console = record(draw, width, command)
    picture = svg_text(console, title) if (svg or png) else ""
    if svg is not None:
        atomic_write(svg, picture)
    if html is not None:
        atomic_write(html, html_text(console))
    if png is not None:
        atomic_write(png, png_bytes(picture))
