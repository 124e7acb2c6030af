"""The ``attn`` command line: a thin layer over the importable core.

Each area registers its commands on the shared app from its own module (``cli_*.py``); this
module only gathers them and provides the entry point. No heavy import (torch, gensim, nltk)
happens at module level anywhere on this path.
"""

import os

# The CLI's matrix products are small: OpenBLAS's thread pool costs more than it gives, and on a
# busy machine it makes them many times slower (bench/bench_attention.py). Set before numpy loads;
# a user's own OPENBLAS_NUM_THREADS wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from typing import Annotated, Optional

import typer

from attncli import __version__
from attncli.cli.common import app, unwrap_help


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
) -> None:
    """attn: see how attention works, from word vectors to attention matrices."""


# Command modules register themselves on `app` when imported (order = order in --help).
import attncli.cli.vectors  # noqa: E402,F401  train, models, eval, similar
import attncli.cli.importing  # noqa: E402,F401  import
import attncli.cli.lookup  # noqa: E402,F401  lookup
import attncli.cli.matrix  # noqa: E402,F401  matrix, variants, demo, scale
import attncli.cli.lm  # noqa: E402,F401  train-attention, heads
import attncli.cli.generate  # noqa: E402,F401  generate
import attncli.cli.explore  # noqa: E402,F401  explore (the Textual app; textual imported only when it runs)
import attncli.cli.compare  # noqa: E402,F401  compare (two matrices and their difference)
import attncli.cli.lens  # noqa: E402,F401  lens (the logit lens of a decoder)
import attncli.cli.stats  # noqa: E402,F401  stats, stats merge (head statistics over a corpus)
import attncli.cli.causal  # noqa: E402,F401  ablate, patch, dla (causal tests on a pretrained model)

unwrap_help(app)  # docstrings' line breaks dropped: the help wraps to the terminal


def _check_arguments() -> None:
    """A command-line byte that is not UTF-8 arrives as a lone surrogate: refuse it up front, so
    no result (and no JSON) ever carries invalid text."""
    import sys

    from attncli.cli.common import escape, print_error
    from attncli.errors import BadInput
    from attncli.textio import check_text

    for i, arg in enumerate(sys.argv[1:], start=1):
        try:
            check_text(arg, f"argument {i}")
        except BadInput as exc:
            print_error(f"[bold red]error:[/] {escape(str(exc))}")
            sys.exit(exc.exit_code)


def main() -> None:
    from attncli.cli import signals
    from attncli.cli.common import run

    signals.install()  # again, for an entry point that reached main() without attncli.cli.entry
    _check_arguments()
    run(app)
