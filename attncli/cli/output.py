"""How a command hands its result (attncli.views.result) to the terminal: the view on stdout laid
out for the terminal's width and its notes on stderr, or its --json document on stdout; then the
--svg / --html / --png files, drawn once for the file's width (without the command line under the
drawing: a file the user asked for is the view alone)."""

from __future__ import annotations

import sys
from typing import Any

from attncli.cli.common import err_console, json_write, out_console, shown
from attncli.errors import BadInput
from attncli.export_target import check_export

JSON_SHARES_STDOUT = ("--json and an export into stdout (/dev/stdout) would share it: drop one, or send the export "
                      "to a file")


def refuse_json_into_stdout(exports: Any, json_out: bool) -> None:
    """BadInput (exit 2) when --json and an export (--svg, --html, --png) both go to stdout: the
    drawing would land inside the JSON document. Each command checks it before any work (with the
    rest of its export targets: attncli.cli.matrix._check_exports); :func:`show` checks it again
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
