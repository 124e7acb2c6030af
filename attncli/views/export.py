"""Exports of a drawn view (``--svg``, ``--html``, ``--png`` and ``attn explore``'s ``x``): laid
out for the file, not for the terminal, offline, and written whole or not at all.

A file has no terminal: unless a width is asked for, a view is drawn as wide as it needs
(``draw(None)``: every column, whole labels, the most decimals) and recorded by rich at the width
of its widest part that must not wrap (a table, a map line), at least :data:`MIN_WIDTH` so that
titles and notes read. The SVG loads no font from the network (rich's default ``@font-face``
points at a CDN): it names a local monospace stack. The PNG is the same picture drawn by Pillow
(the ``png`` extra) from the same recorded lines, on the SVG's grid. Every file goes through
:func:`attncli.io.export_target.write_export` (atomic onto a file; into a device, a FIFO or stdout).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional
from attncli.env import extras
from attncli.io.textio import visible
from attncli.errors import BadInput
from attncli.io.export_target import write_export

MIN_WIDTH = 80  # columns: a narrower view still gets room for its titles and notes
MAX_WIDTH = 4000  # columns: the widest drawing recorded (a 512-token matrix is ~3,600)
FONT_STACK = "'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', 'Courier New', monospace"

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


def record(draw: Draw, width: Optional[int] = None, command: Optional[str] = None) -> tuple[Any, list]:
    """A recording rich Console holding ``draw``'s view (and ``command`` under it, dim), and the
    renderables printed: at ``width`` columns when given (laid out as for a terminal that wide),
    else as wide as the view needs (see :func:`drawing_width`)."""
    from rich.console import Console
    from rich.text import Text

    parts = list(draw(width))
    columns = width if width is not None else drawing_width(parts)
    if command:
        parts.append(Text(command, style="dim"))
    console = Console(record=True, width=columns, file=io.StringIO(), color_system="truecolor", force_terminal=True,
                      force_jupyter=False, legacy_windows=False)  # in a notebook too: recorded, never displayed
    for part in parts:
        console.print(part)
    return console, parts


# what XML 1.0 forbids (C0 controls but tab, newline and carriage return; lone surrogates; U+FFFE,
# U+FFFF) and what HTML calls a parse error (DEL, C1 controls): never in an export, even escaped
NOT_MARKUP = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def markup_safe(text: str) -> str:
    """``text`` (a whole SVG or HTML document, or a piece of one) with every character of
    :data:`NOT_MARKUP` written as its visible escape (``\\x0b``, ``\\udc80``), so the document
    parses whatever the drawn data held."""
    return NOT_MARKUP.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                          else f"\\u{ord(m.group()):04x}", text)


_FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}\s*")
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def svg_text(console, title: str) -> str:
    """The recorded view as SVG that loads nothing: rich's export without its remote font faces."""
    svg = console.export_svg(title=visible(title), clear=False)
    svg = _COMMENT.sub("", _FONT_FACE.sub("", svg))
    return markup_safe(re.sub(r"font-family:\s*Fira Code,\s*monospace", f"font-family: {FONT_STACK}", svg))


def html_text(console) -> str:
    """The recorded view as a static HTML page (inline styles, no script, nothing remote)."""
    return markup_safe(console.export_html(clear=False))


def png_available() -> None:
    """BadInput (exit 2) naming the ``png`` extra when Pillow is missing."""
    try:
        import PIL.Image  # noqa: F401
        import PIL.ImageDraw  # noqa: F401
    except ImportError:
        raise BadInput(extras.needs("--png (Pillow)", "png")) from None


# rich's SVG geometry (Console.export_svg): 20 px characters 0.61 wide, lines 1.22 high, a 1 px
# margin, 8 px padding (40 at the top, under the title bar); the PNG draws the same picture.
CHAR_H = 20
CHAR_W = CHAR_H * 0.61
LINE_H = CHAR_H * 1.22
MONO_FONTS = ("DejaVuSansMono.ttf", "LiberationMono-Regular.ttf", "Menlo.ttc", "consola.ttf", "cour.ttf")
MONO_BOLD = ("DejaVuSansMono-Bold.ttf", "LiberationMono-Bold.ttf", "Menlo.ttc", "consolab.ttf", "courbd.ttf")
MAX_PIXELS = 120_000_000  # a PNG's pixels (3 bytes each in memory while it is drawn)
TITLE_FONTS = ("DejaVuSans-Bold.ttf", "LiberationSans-Bold.ttf", "Arial Bold.ttf", "arialbd.ttf")


def _font(names: tuple[str, ...], size: int):
    """The first of ``names`` Pillow finds among the system's fonts, else Pillow's own."""
    from PIL import ImageFont

    for name in names:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def png_bytes(console, parts: list, title: str) -> bytes:
    """The recorded view drawn by Pillow as rich draws its SVG (same size, same places, same
    colours: the terminal theme of rich's SVG export), as PNG bytes."""
    import math

    png_available()
    from PIL import Image, ImageDraw

    from rich.cells import cell_len
    from rich.color import blend_rgb
    from rich.segment import Segment
    from rich.style import Style
    from rich.terminal_theme import SVG_EXPORT_THEME as theme

    segments = [seg for part in parts for seg in console.render(part)]
    lines = list(Segment.split_and_crop_lines(Segment.filter_control(segments), length=console.width))
    term_w, term_h = math.ceil(console.width * CHAR_W + 16), len(lines) * LINE_H + 48
    if (term_w + 2) * (term_h + 2) > MAX_PIXELS:
        raise BadInput(f"--png: the picture would be {term_w + 2:,} x {round(term_h + 2):,} pixels, more than "
                       f"{MAX_PIXELS:,}: draw less (--head, --rows/--cols, --width) or use --svg")
    image = Image.new("RGB", (term_w + 2, round(term_h + 2)), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    bg, fg = tuple(theme.background_color), tuple(theme.foreground_color)
    pen.rounded_rectangle((1, 1, 1 + term_w, 1 + term_h), radius=8, fill=bg, outline=(118, 118, 118))
    for cx, colour in ((26, (0xff, 0x5f, 0x57)), (48, (0xfe, 0xbc, 0x2e)), (70, (0x28, 0xc8, 0x40))):
        pen.ellipse((cx - 7, 15, cx + 7, 29), fill=colour)
    pen.text((term_w // 2, 1 + CHAR_H + 6), visible(title), font=_font(TITLE_FONTS, 18), fill=fg, anchor="ms")
    fonts = {False: _font(MONO_FONTS, CHAR_H), True: _font(MONO_BOLD, CHAR_H)}
    ox, oy = 9, 41  # margin + padding
    for y, line in enumerate(lines):
        x = 0
        for text, style, _control in line:
            style = style or Style()
            colour = fg if style.color is None or style.color.is_default else tuple(style.color.get_truecolor(theme))
            back = bg if style.bgcolor is None or style.bgcolor.is_default else tuple(style.bgcolor.get_truecolor(theme))
            if style.reverse:
                colour, back = back, colour
            if style.dim:
                colour = tuple(blend_rgb(colour, back, 0.4))
            width = cell_len(text)
            if style.reverse or (style.bgcolor is not None and not style.bgcolor.is_default):
                top = oy + y * LINE_H + 1.5
                pen.rectangle((round(ox + x * CHAR_W), round(top), round(ox + (x + width) * CHAR_W) - 1,
                               round(top + LINE_H + 0.25) - 1), fill=back)
            if text.strip():
                pen.text((ox + x * CHAR_W, oy + y * LINE_H + CHAR_H), text, font=fonts[bool(style.bold)], fill=colour,
                         anchor="ls")
            x += width
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=3)
    return out.getvalue()


def export_files(draw: Draw, title: str, *, svg: Optional[Path] = None, html: Optional[Path] = None,
                 png: Optional[Path] = None, width: Optional[int] = None, command: Optional[str] = None) -> None:
    """Record ``draw``'s view once and write each file asked for through the export door
    (RuntimeFailure naming the file, exit 1, when one cannot be written: an old file is left whole)."""
    if svg is None and html is None and png is None:
        return
    console, parts = record(draw, width, command)
    if svg is not None:
        write_export(svg, svg_text(console, title), "--svg")
    if html is not None:
        write_export(html, html_text(console), "--html")
    if png is not None:
        write_export(png, png_bytes(console, parts, title), "--png", binary=True)
