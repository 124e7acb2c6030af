"""The ``attn`` command line: a thin layer over the importable core.

Each area registers its commands on the shared app from its own module (``cli/*.py``); the app's
group imports that module only when one of its commands runs (``cli/commands.py`` lists them
all, in ``--help``'s order). This module adds the root options and provides the entry point. No
heavy import (torch, gensim, nltk) happens at module level anywhere on this path.
"""

import sys
from typing import Annotated, Optional

import typer

from attncli import __version__
from attncli.rules import limits
from attncli.env import runtime
from attncli.cli import signals
from attncli.cli.common import app, escape, print_error
from attncli.cli.process import run
from attncli.errors import BadInput
from attncli.io.textio import check_text


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
    threads: Annotated[
        Optional[int],
        typer.Option("--threads", min=1, help="BLAS threads for every forward pass (default: one for a short "
                     "input, the machine's free cores for long inputs and batches; OMP_NUM_THREADS and "
                     "OPENBLAS_NUM_THREADS also set it). Before or after the command."),
    ] = None,
) -> None:
    """attn: see how attention works, from word vectors to attention matrices."""
    runtime.choose_threads(threads)
    limits.environment_threads()  # OMP_NUM_THREADS=abc is refused before any work, as --threads abc is


def _check_arguments() -> None:
    """A command-line byte that is not UTF-8 arrives as a lone surrogate: refuse it up front, so
    no result (and no JSON) ever carries invalid text."""
    for i, arg in enumerate(sys.argv[1:], start=1):
        try:
            check_text(arg, f"argument {i}")
        except BadInput as exc:
            print_error(f"[bold red]error:[/] {escape(str(exc))}")
            sys.exit(exc.exit_code)


def main() -> None:
    signals.install()  # again, for an entry point that reached main() without attncli.cli.entry
    _check_arguments()
    runtime.own_allocator()  # this process is attn's own: a long pass may tune glibc's allocator (hf/kernels/heap.py)
    run(app)
