"""One result protocol: every view attn computes speaks it, whichever surface asked.

A result is what ``compute(request)`` returns. Drawing, JSON, exports, the command line that
reproduces it and Jupyter's inline display are written once per kind of result, here or in the
result's own class, never once per surface (CLI, explore, page, Python API)::

    result.renderables(width)   # rich renderables laid out for ``width`` columns (None: a file's width)
    result.document()           # the --json document (a dict of JSON values)
    result.command_line()       # the ``attn ...`` line that reproduces the result
    result.export(fmt, target)  # "svg" | "png" | "html" | "json" into a path, a device, a FIFO or stdout
    result._repr_svg_()         # Jupyter: the drawing inline
    result._repr_html_()        # Jupyter: the drawing as HTML

A subclass implements :meth:`renderables`, :meth:`document`, :meth:`command_line` and sets
:attr:`title`; it overrides :meth:`write_json` when its document is too big to build as one
string (attncli.attention.document streams its rows) and :meth:`export` for a format only it
has (the interactive page). It lives in the views wing because a result draws (rich); a result
that also computes (a pretrained model's view) lives in the wing that may load models and
subclasses this one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from attncli.errors import BadInput
from attncli.export_target import write_export
from attncli.views.export import html_text, png_bytes, record, svg_text

FORMATS = ("svg", "png", "html", "json")
NOTEBOOK_WIDTH = 120  # columns a notebook cell's drawing is laid out for


class Result:
    """The base of every result: see the module's docstring for the protocol."""

    title: str = "attn"

    # --- what a kind of result implements ------------------------------------------------------
    def renderables(self, width: Optional[int]) -> Iterable[Any]:
        """Rich renderables of the view at ``width`` columns (None: as wide as it needs, for a file)."""
        raise NotImplementedError

    def document(self) -> dict[str, Any]:
        """The --json document."""
        raise NotImplementedError

    def command_line(self) -> str:
        """The ``attn`` command line that reproduces this result (escaped for a POSIX shell)."""
        raise NotImplementedError

    # --- what the protocol gives every result ----------------------------------------------------
    def write_json(self, write: Callable[[str], Any]) -> None:
        """Write :meth:`document` as indented JSON (NaN refused: it is not JSON) and a newline."""
        write(json.dumps(self.document(), indent=2, ensure_ascii=False, allow_nan=False))
        write("\n")

    def json_text(self) -> str:
        parts: list[str] = []
        self.write_json(parts.append)
        return "".join(parts)

    def _record(self, width: Optional[int], command: bool = True):
        return record(self.renderables, width, self.command_line() if command else None)

    def svg(self, width: Optional[int] = None) -> str:
        console, _parts = self._record(width)
        return svg_text(console, self.title)

    def html(self, width: Optional[int] = None) -> str:
        console, _parts = self._record(width)
        return html_text(console)

    def png(self, width: Optional[int] = None) -> bytes:
        console, parts = self._record(width)
        return png_bytes(console, parts, self.title)

    def export(self, fmt: str, target: str | Path, *, width: Optional[int] = None, option: str = "") -> None:
        """Write the result as ``fmt`` into ``target`` through attn's one export door
        (attncli.export_target: atomic onto a file; into a device, a FIFO or stdout)."""
        if fmt not in FORMATS:
            raise BadInput(f"export format {fmt!r}: expected one of {', '.join(FORMATS)}")
        option = option or f"--{fmt}"
        if fmt == "png":
            write_export(target, self.png(width), option, binary=True)
        elif fmt == "json":
            write_export(target, self.json_text(), option)
        else:
            write_export(target, self.svg(width) if fmt == "svg" else self.html(width), option)

    # --- Jupyter and rich --------------------------------------------------------------------------
    def _repr_svg_(self) -> str:
        return self.svg(NOTEBOOK_WIDTH)

    def _repr_html_(self) -> str:
        return self.html(NOTEBOOK_WIDTH)

    def __rich_console__(self, console, options):
        yield from self.renderables(options.max_width)
