"""Commands ``attn stats CORPUS`` (head statistics over a corpus) and ``attn stats merge DIR...``.

``stats`` is a group whose default command is ``run``: ``attn stats FILE`` is ``attn stats run
FILE``, and ``attn stats merge`` merges shards. Thin layer over :mod:`attncli.stats`; the drawing
is :mod:`attncli.views.stats_view`. Nothing heavy is imported at module level.
"""

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from attncli.env import extras
from attncli.cli.common import RefusesEmptyPaths, app, err_console, escape, info, resumable, warn
from attncli.cli.options import declared
from attncli.cli.output import Exports, check_exports, show, write_exports
from attncli.cli.progress import Delayed
from attncli.cli.transformer import load_model
from attncli.errors import BadInput
from attncli.pipeline.stats_compute import compute_merge, compute_stats
from attncli.stats.stats_request import MergeRequest, StatsRequest


class _StatsGroup(RefusesEmptyPaths, TyperGroup):
    """A group with a default: arguments that do not start with a command name go to ``run``;
    ``attn stats --help`` alone is the group's own help (``Usage: attn stats ...``, run and merge)."""

    def parse_args(self, ctx, args):
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["run", *args]
        return super().parse_args(ctx, args)


stats_app = typer.Typer(cls=_StatsGroup, help="Head statistics over a corpus (attn stats CORPUS; attn stats merge DIR...).")
app.add_typer(stats_app, name="stats")

OUTPUT_OPTIONS = ("svg", "html", "png", "width", "explore")  # after --json, in --help's order


class _Progress(Delayed):
    """Shards and texts done, on stderr (after a second; nothing under --json unless on a terminal)."""

    def __init__(self, message: str, json_out: bool) -> None:
        self.message, self.shards, self.texts, self.progress, self.task = message, 0, 0, None, None
        super().__init__(json_out)

    def _show(self) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = err_console()
        console.print(escape(self.message), highlight=False)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.task = self.progress.add_task(self._text())
        self.progress.start()

    def _text(self) -> str:
        return f"{self.shards:,} shards, {self.texts:,} texts"

    def advance(self, texts: int) -> None:
        with self.lock:
            self.shards += 1
            self.texts += texts
            if self.progress is not None:
                self.progress.update(self.task, description=self._text())

    def _hide(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _output(request: Any, json_out: bool, options: dict[str, Any]) -> Exports:
    """The refusals of ``request`` and of how it is shown (--json, --explore, the export targets),
    before any work; the export targets."""
    request.check(json_out=json_out, explore=options["explore"])
    exports = Exports.of(options)
    check_exports(exports, json_out)  # --json with an export into stdout: refused (they would share it)
    if options["explore"]:
        import importlib.util

        if importlib.util.find_spec("textual") is None:
            raise BadInput(extras.needs("--explore (Textual)", "explore"))
    return exports


def _show(result: Any, json_out: bool, exports: Exports, explore: bool) -> None:
    if explore:
        from attncli.explore.stats_app import run as explore_stats

        if exports:
            write_exports(result, exports)
        raise typer.Exit(explore_stats(result.document()))
    show(result, json_out=json_out, exports=exports)


def _say(kind: str, message: str) -> None:
    (warn if kind == "warn" else info)(message)


@stats_app.command("run")
@declared("corpus", "transformer", "field", "split", "max_texts", "max_tokens", "out", "shard_texts", "workers",
          "ray", "top_k", "probe_every", "probe_length", "seed", "batch_size", "precision", "backend",
          "allow_missing_weights", "json_out", *OUTPUT_OPTIONS)
def stats_cmd(
    corpus: Annotated[str, typer.Argument(metavar="CORPUS", help="A text file (one text a line), - for stdin, a folder of .txt files, "
                                               "a JSONL file, or a saved datasets dataset.", show_default=False)],
    *,
    field: Annotated[Optional[str], typer.Option(help="The text's field in a JSONL file or dataset (default: text).")] = None,
    split: Annotated[Optional[str], typer.Option(help="A saved DatasetDict's split (default: train).")] = None,
    max_texts: Annotated[Optional[int], typer.Option(help="Read at most this many texts.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Stop before the text that would bring the tokens read past N.", metavar="N")] = None,
    shard_texts: Annotated[int, typer.Option(help="Texts per shard (a chunk of work).")] = 64,
    top_k: Annotated[int, typer.Option("--top-k", help="Example contexts kept per head and statistic.")] = 5,
    probe_every: Annotated[int, typer.Option(help="A repeated random-token probe (induction) for every N-th text.", metavar="N")] = 4,
    probe_length: Annotated[int, typer.Option(help="Random tokens in each half of a probe.")] = 20,
    seed: Annotated[int, typer.Option(help="Seed of the probes' random tokens.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Texts of similar length per forward pass, padded and masked (the NumPy path).")] = 8,
    precision: Annotated[Optional[str], typer.Option(help="The NumPy pass's weights: float32 (attention within 1e-5 of float64's, faster) or float64.", metavar="float32|float64", show_default="float32")] = None,
    **options: Any,
) -> None:
    """Per-head statistics of a pretrained model over a corpus: sink, entropy, mean distance,
    previous-token, duplicate-token and induction scores, with each head's top contexts
    (docs/stats.md). 'attn stats merge DIR...' merges the shards of --out folders.

    JSON keys: model {name, fingerprint, layers, heads, causal}, texts, texts_scored, tokens,
    probes, ranges, stats {name: {mean (layers x heads), count}}, top {name: [{layer, head, examples}]}.
    """
    json_out, out, backend = options["json_out"], options["out"], options["backend"]
    request = StatsRequest(corpus, transformer=options["transformer"], field=field, split=split, max_texts=max_texts,
                           max_tokens=max_tokens, out=out, shard_texts=shard_texts, workers=options["workers"],
                           ray=options["ray"], top_k=top_k, probe_every=probe_every, probe_length=probe_length, seed=seed,
                           batch_size=batch_size, precision=precision, backend=backend.value if backend else "auto",
                           allow_missing_weights=options["allow_missing_weights"])
    exports = _output(request, json_out, options)
    with resumable(out):
        result = compute_stats(request, loader=lambda r: load_model(r.transformer, r.backend, r.allow_missing_weights,
                                                                    json_out=json_out),
                               progress=lambda message: _Progress(message, json_out), say=_say)
    _show(result, json_out, exports, options["explore"])


@stats_app.command("merge")
@declared("folders", "json_out", "skip_damaged", *OUTPUT_OPTIONS)
def merge_cmd(
    folders: Annotated[list[Path], typer.Argument(help="Folders written by 'attn stats --out' (or shard files).",
                                                  show_default=False)],
    *,
    skip_damaged: Annotated[bool, typer.Option("--skip-damaged", help="Merge the other shards when one is damaged "
                                               "(named on stderr, counted in the JSON) instead of failing.")] = False,
    **options: Any,
) -> None:
    """Merge the shards of several runs or machines exactly (sums and counts, never means of means).

    Shards of another model, attn version, definitions version or settings are refused (exit 2);
    a damaged shard stops the merge (exit 1, the shard named) unless --skip-damaged. JSON keys:
    those of 'attn stats', skipped and damaged_skipped.
    """
    request, json_out = MergeRequest(tuple(folders), skip_damaged=skip_damaged), options["json_out"]
    exports = _output(request, json_out, options)
    _show(compute_merge(request), json_out, exports, options["explore"])
