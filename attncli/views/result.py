"""One result protocol: every view attn computes speaks it, whichever surface asked.

A result is what ``compute(request)`` returns. Drawing, JSON, exports, the command line that
reproduces it and Jupyter's inline display are written once per kind of result, here or in the
result's own class, never once per surface (CLI, explore, page, Python API)::

    result.renderables(width)   # rich renderables laid out for ``width`` columns (None: a file's width)
    result.screen_renderables(width)  # the same for an app that redraws on every key (attn explore)
    result.notes(width)         # lines about how it was made: stderr in a terminal, never in a file
    result.document()           # the --json document (a dict of JSON values)
    result.command_line()       # the ``attn ...`` line that reproduces the result
    result.export(fmt, target)  # "svg" | "png" | "html" | "json" into a path, a device, a FIFO or stdout
    result.export_all({fmt: target, ...})  # several formats from one recorded drawing
    result.print_to(console)    # the terminal's view: renderables at the console's width
    result._repr_svg_()         # Jupyter: the drawing inline
    result._repr_html_()        # Jupyter: the drawing as HTML

A subclass implements :meth:`renderables`, :meth:`document`, :meth:`command_line` and sets
:attr:`title` (:func:`attn_command` quotes a command line with shlex, so that it runs back through
a POSIX shell to the same document); it may implement :meth:`notes`. It overrides
:meth:`write_json` when its document is too big to build as one string (attncli.attention.document
streams its rows), and :meth:`export_all` (what the CLI calls; :meth:`export` goes through it)
for a format only it has (the interactive page). The CLI hands every result to
attncli.cli.output.show: the view on stdout and the notes on stderr, or the JSON; then the files,
drawn without the command line (a notebook's drawing and ``export`` show it under the view). It lives in the views wing because a result draws (rich); a result
that also computes (a pretrained model's view) lives in the wing that may load models and
subclasses this one.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from attncli.errors import BadInput
from attncli.io.export_target import write_export
from attncli.io.textio import visible
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

    def notes(self, width: Optional[int] = None) -> list[str]:
        """Plain lines about how the result was made (counts, columns a narrow terminal left
        out): a terminal shows them on stderr, so that stdout holds the result alone."""
        return []

    def screen_renderables(self, width: int) -> Iterable[Any]:
        """What an app that redraws on every key (attn explore) draws at ``width`` columns: the
        renderables, unless a result has a faster drawing of the same lines (a heatmap's pages)."""
        return self.renderables(width)

    # --- what the protocol gives every result ----------------------------------------------------
    def write_json(self, write: Callable[[str], Any]) -> None:
        """Write :meth:`document` as indented JSON (NaN refused: it is not JSON) and a newline."""
        write(json.dumps(self.document(), indent=2, ensure_ascii=False, allow_nan=False))
        write("\n")

    def json_text(self) -> str:
        parts: list[str] = []
        self.write_json(parts.append)
        return "".join(parts)

    def print_to(self, console) -> None:
        """Print the view on ``console`` (a terminal), laid out for its width."""
        for part in self.renderables(console.width):
            console.print(part)

    def _record(self, width: Optional[int], command: bool = True):
        return record(self.renderables, width, visible(self.command_line()) if command else None)

    def svg(self, width: Optional[int] = None, *, command: bool = True) -> str:
        """The drawing as SVG (``command``: the command line that reproduces it under it, dim)."""
        console, _parts = self._record(width, command)
        return svg_text(console, self.title)

    def html(self, width: Optional[int] = None, *, command: bool = True) -> str:
        console, _parts = self._record(width, command)
        return html_text(console)

    def png(self, width: Optional[int] = None, *, command: bool = True) -> bytes:
        console, parts = self._record(width, command)
        return png_bytes(console, parts, self.title)

    def export(self, fmt: str, target: str | Path, *, width: Optional[int] = None, option: str = "",
               command: bool = True) -> None:
        """Write the result as ``fmt`` into ``target`` through attn's one export door
        (attncli.io.export_target: atomic onto a file; into a device, a FIFO or stdout)."""
        self.export_all({fmt: target}, width=width, options={fmt: option} if option else None, command=command)

    def export_all(self, targets: Mapping[str, str | Path | None], *, width: Optional[int] = None,
                   options: Optional[Mapping[str, str]] = None, command: bool = True) -> None:
        """Write each format of ``targets`` (fmt -> target; None: not asked for) from one recorded
        drawing; ``options`` names each target in a message (default ``--FMT``)."""
        asked = {fmt: target for fmt, target in targets.items() if target is not None}
        for fmt in asked:
            if fmt not in FORMATS:
                raise BadInput(f"export format {fmt!r}: expected one of {', '.join(FORMATS)}")
        drawn = [fmt for fmt in FORMATS[:3] if fmt in asked]
        if drawn:
            console, parts = self._record(width, command)
        for fmt, target in asked.items():
            option = (options or {}).get(fmt) or f"--{fmt}"
            if fmt == "png":
                write_export(target, png_bytes(console, parts, self.title), option, binary=True)
            elif fmt == "json":
                write_export(target, self.json_text(), option)
            else:
                write_export(target, svg_text(console, self.title) if fmt == "svg" else html_text(console), option)

    # --- Jupyter and rich --------------------------------------------------------------------------
    def _repr_svg_(self) -> str:
        return self.svg(NOTEBOOK_WIDTH)

    def _repr_html_(self) -> str:
        return self.html(NOTEBOOK_WIDTH)

    def __rich_console__(self, console, options):
        yield from self.renderables(options.max_width)


def shown(text: Any) -> str:
    """Data made safe in a rich markup string: control characters shown (textio.visible), then
    rich's markup escaped (attncli.cli.common.shown's twin, for the views wing)."""
    from rich.markup import escape

    return escape(visible(text if isinstance(text, str) else str(text)))


class DocumentView(Result):
    """A result drawn from its JSON document alone (the lens, the causal grids, the head report,
    corpus statistics): ``draw(doc, width)`` gives the renderables; ``command``, ``positionals`` and
    ``options`` make the command line (see :func:`attn_command`)."""

    draw: Callable[[dict[str, Any], Optional[int]], list] = staticmethod(lambda doc, width: [])

    def __init__(self, doc: dict[str, Any], *, title: str = "attn", command: str = "",
                 positionals: Sequence[str] = (), options: Sequence[tuple[str, Any]] = ()) -> None:
        self.doc = doc
        self.title = visible(title)
        self.command, self.positionals, self.options = command, list(positionals), list(options)

    def renderables(self, width: Optional[int]) -> list:
        return type(self).draw(self.doc, width)

    def document(self) -> dict[str, Any]:
        return self.doc

    def command_line(self) -> str:
        return attn_command(self.command, self.positionals, self.options)


class Requested:
    """A result made from its request (a causal test's, attn attribute's, attn circuit's or attn qk's):
    the title and the command line are the request's (``title``, ``command``, ``positionals()``,
    ``options()``), so the CLI, explore and the Python API say the same one. Put it before the view."""

    def __init__(self, doc: dict[str, Any], request: Any) -> None:
        self.request = request
        super().__init__(doc, title=request.title, command=request.command, positionals=request.positionals(),
                         options=request.options())


def attn_command(command: str, positionals: Sequence[str] = (), options: Sequence[tuple[str, Any]] = ()) -> str:
    """``attn COMMAND POSITIONAL... --OPTION VALUE...`` quoted for a POSIX shell (shlex), in the order
    given: an option whose value is None or False is left out, True is a flag, a tuple is several
    words (``--explain 2 1``), a float is written as Python's shortest exact repr. A positional that
    starts with "-" (or is "-", which would mean stdin) goes after ``--``, so it is read as text.

    >>> print(attn_command("matrix", ["it's -"], [("--causal", True), ("--seed", 0), ("--d-k", None)]))
    attn matrix 'it'"'"'s -' --causal --seed 0
    >>> attn_command("lens", ["-x"], [("--top-k", 3)])
    'attn lens --top-k 3 -- -x'
    """
    words = ["attn", *command.split()]
    opts: list[str] = []
    for name, value in options:
        if value is None or value is False:
            continue
        if value is True:
            opts.append(name)
        elif isinstance(value, (tuple, list)):
            opts += [name, *(_word(v) for v in value)]
        else:
            opts += [name, _word(value)]
    if any(p.startswith("-") for p in positionals):
        words += [*opts, "--", *positionals]
    else:
        words += [*positionals, *opts]
    return shlex.join(words)


def _word(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


class Trimmed:
    """A renderable whose lines end at their last visible cell: rich pads a centred table title out
    to the table's width with spaces that a terminal shows as nothing and a file or a pipe keeps.
    Spaces with a background colour are kept (they are seen)."""

    def __init__(self, renderable) -> None:
        self.renderable = renderable

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        for line in console.render_lines(self.renderable, options, pad=False):
            while line and not line[-1].control and not (line[-1].style and line[-1].style.bgcolor):
                text = line[-1].text.rstrip(" ")
                if text:
                    line[-1] = Segment(text, line[-1].style)
                    break
                line.pop()
            yield from line
            yield Segment.line()

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement.get(console, options, self.renderable)
