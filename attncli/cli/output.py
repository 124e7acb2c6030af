"""How a command hands its result (attncli.views.result) to the terminal: the view on stdout laid
out for the terminal's width and its notes on stderr, or its --json document on stdout; then the
--svg / --html / --png files, drawn once for the file's width (without the command line under the
drawing: a file the user asked for is the view alone)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from attncli.cli.common import err_console, json_write, out_console, quiet_stdout, shown
from attncli.errors import BadInput
from attncli.io.export_target import check_export
from attncli.views.export import png_available

JSON_SHARES_STDOUT = ("--json and an export into stdout (/dev/stdout) would share it: drop one, or send the export "
                      "to a file")


@dataclass
class Exports:
    """The files ``attn matrix`` writes besides what it prints (attncli.views.export)."""

    svg: Optional[Path] = None
    html: Optional[Path] = None
    png: Optional[Path] = None
    width: Optional[int] = None  # None: as wide as the view needs

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> "Exports":
        """The exports of a command's options (--svg, --html, --png, --width; an absent one: None)."""
        return cls(**{name: options.get(name) for name in ("svg", "html", "png", "width")})

    def __bool__(self) -> bool:
        return any(p is not None for p in (self.svg, self.html, self.png))


def check_exports(exports: Exports, json_out: bool = False) -> None:
    """Export targets attn can write (attncli.io.export_target.check_export), a sane --width and the
    png extra, checked before any work (bad input: exit 2). An export into stdout (/dev/stdout)
    has stdout to itself: the view is not drawn there, and --json is refused."""
    targets = {}
    for path, option in ((exports.svg, "--svg"), (exports.html, "--html"), (exports.png, "--png")):
        if path is not None:
            targets[option] = check_export(path, option, binary=option == "--png")
    seen: dict = {}
    for option, target in targets.items():
        other = seen.setdefault(target.key(), option)
        if other != option:
            raise BadInput(f"{other} and {option} name the same file ({str(target.given)!r}): give each its own")
    if any(target.is_stdout for target in targets.values()):
        if json_out:
            raise BadInput(JSON_SHARES_STDOUT)

        quiet_stdout()
    if exports.width is not None and not 20 <= exports.width <= 4000:
        raise BadInput(f"--width must be between 20 and 4000 columns (got {exports.width})")
    if exports.width is not None and not exports:
        raise BadInput("--width lays out the --svg / --html / --png files: give one of them (the terminal's view "
                       "takes the terminal's width)")
    if exports.png is not None:
        png_available()


def refuse_json_into_stdout(exports: Any, json_out: bool) -> None:
    """BadInput (exit 2) when --json and an export (--svg, --html, --png) both go to stdout: the
    drawing would land inside the JSON document. Each command checks it before any work (with the
    rest of its export targets: check_exports); :func:`show` checks it again
    before it writes anything, for every command."""
    if not json_out or not exports:
        return
    for fmt in ("svg", "html", "png"):
        path = getattr(exports, fmt, None)
        if path is not None and check_export(path, f"--{fmt}", binary=fmt == "png").is_stdout:
            raise BadInput(JSON_SHARES_STDOUT)


def show(result: Any, *, json_out: bool = False, exports: Any = None, terminal: bool = True) -> None:
    """Print ``result`` (its document with ``json_out``, else its view when ``terminal``) and write
    the files ``exports`` asks for (anything with svg, html, png and width; falsy: none). --json with
    an export into stdout is refused before anything is written."""
    refuse_json_into_stdout(exports, json_out)
    if json_out:
        result.write_json(json_write)
        sys.stdout.flush()
    elif terminal:
        console = out_console()
        result.print_to(console)
        for note in result.notes(console.width):
            err_console().print(shown(note), highlight=False, style="dim")
    if exports:
        write_exports(result, exports)


def write_exports(result: Any, exports: Any) -> None:
    result.export_all({"svg": exports.svg, "html": exports.html, "png": exports.png}, width=exports.width,
                      command=False)
