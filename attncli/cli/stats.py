"""Commands ``attn stats CORPUS`` (head statistics over a corpus) and ``attn stats merge DIR...``.

``stats`` is a group whose default command is ``run``: ``attn stats FILE`` is ``attn stats run
FILE``, and ``attn stats merge`` merges shards. Thin layer over :mod:`attncli.stats`; the drawing
is :mod:`attncli.views.stats_view`. Nothing heavy is imported at module level.
"""

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from attncli.model.interface import has
from attncli.cli.common import app, err_console, escape, info, warn
from attncli.cli.matrix import Exports, _check_exports
from attncli.cli.options import BackendOpt, ExportWidthOpt, HtmlOpt, PngOpt, SvgOpt
from attncli.cli.output import show, write_exports
from attncli.cli.progress import _Delayed
from attncli.cli.transformer import load_model
from attncli.errors import BadInput
from attncli.stats import corpus as corpus_mod
from attncli.stats.accumulate import Settings
from attncli.stats.cluster import host_port
from attncli.stats.report import document, merge_shards
from attncli.stats.runner import ModelSpec, run
from attncli.stats.shards import shard_folder
from attncli.views.stats_view import StatsView


class _StatsGroup(TyperGroup):
    """A group with a default: arguments that do not start with a command name go to ``run``."""

    def parse_args(self, ctx, args):
        if not args or args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


stats_app = typer.Typer(cls=_StatsGroup, help="Head statistics over a corpus (attn stats CORPUS; attn stats merge DIR...).")
app.add_typer(stats_app, name="stats")

LIMITS = {"--max-texts": (1, 10**12), "--max-tokens": (1, 10**15), "--shard-texts": (1, 100_000), "--workers": (1, 256),
          "--top-k": (1, 100), "--batch-size": (1, 256), "--probe-every": (1, 10**9), "--probe-length": (2, 4096), "--seed": (0, 2**32 - 1)}


def _check(option: str, value: Optional[int]) -> None:
    lo, hi = LIMITS[option]
    if value is not None and not lo <= value <= hi:
        raise BadInput(f"{option} must be between {lo:,} and {hi:,} (got {value})")


class _Progress(_Delayed):
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


def _exports(svg, html, png, width):
    exports = Exports(svg=svg, html=html, png=png, width=width)
    _check_exports(exports)
    return exports


def _check_explore(explore: bool, json_out: bool) -> None:
    if not explore:
        return
    if json_out:
        raise BadInput("--explore opens the statistics in an interactive view; --json prints them: choose one")
    import importlib.util

    if importlib.util.find_spec("textual") is None:
        raise BadInput('--explore needs the "explore" extra (Textual): pip install "attncli[explore]"')


def _show(doc: dict[str, Any], json_out: bool, exports, title: str, explore: bool = False, *, command: str = "stats run",
          positionals: tuple = (), options: tuple = ()) -> None:
    view = StatsView(doc, title=title, command=command, positionals=[str(p) for p in positionals], options=options)
    if explore:
        from attncli.explore.stats_app import run as explore_stats

        if exports:
            write_exports(view, exports)
        raise typer.Exit(explore_stats(doc))
    show(view, json_out=json_out, exports=exports)


@stats_app.command("run")
def stats_cmd(
    corpus: Annotated[str, typer.Argument(metavar="CORPUS", help="A text file (one text a line), - for stdin, a folder of .txt files, "
                                               "a JSONL file, or a saved datasets dataset.", show_default=False)],
    *,
    transformer: Annotated[Optional[str], typer.Option(help="The pretrained model (hub id or directory).",
                                                       metavar="NAME_OR_PATH", show_default=False)] = None,
    field: Annotated[Optional[str], typer.Option(help="The text's field in a JSONL file or dataset (default: text).")] = None,
    split: Annotated[Optional[str], typer.Option(help="A saved DatasetDict's split (default: train).")] = None,
    max_texts: Annotated[Optional[int], typer.Option(help="Read at most this many texts.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Stop before the text that would bring the tokens read past N.", metavar="N")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Write a shard per chunk here; a run started again resumes.", metavar="DIR")] = None,
    shard_texts: Annotated[int, typer.Option(help="Texts per shard (a chunk of work).")] = 64,
    workers: Annotated[int, typer.Option(help="Local worker processes (with --ray: actors; default the cluster's CPUs).")] = 1,
    ray: Annotated[Optional[str], typer.Option("--ray", help="Run the chunks on the Ray cluster at this address (the cluster extra).", metavar="ADDRESS")] = None,
    top_k: Annotated[int, typer.Option("--top-k", help="Example contexts kept per head and statistic.")] = 5,
    probe_every: Annotated[int, typer.Option(help="A repeated random-token probe (induction) for every N-th text.", metavar="N")] = 4,
    probe_length: Annotated[int, typer.Option(help="Random tokens in each half of a probe.")] = 20,
    seed: Annotated[int, typer.Option(help="Seed of the probes' random tokens.")] = 0,
    batch_size: Annotated[int, typer.Option(help="Texts of similar length per forward pass, padded and masked (the NumPy path).")] = 8,
    precision: Annotated[Optional[str], typer.Option(help="The NumPy pass's weights: float32 (attention within 1e-5 of float64's, faster) or float64.", metavar="float32|float64", show_default="float32")] = None,
    backend: BackendOpt = None,
    allow_missing_weights: Annotated[bool, typer.Option("--allow-missing-weights", help="Run a model whose checkpoint lacks weights, with a warning.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the statistics as JSON.")] = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
    explore: Annotated[bool, typer.Option("--explore", help="Then open the statistics in an interactive view (the explore extra).")] = False,
) -> None:
    """Per-head statistics of a pretrained model over a corpus: sink, entropy, mean distance,
    previous-token, duplicate-token and induction scores, with each head's top contexts
    (docs/stats.md). 'attn stats merge DIR...' merges the shards of --out folders.

    JSON keys: model {name, fingerprint, layers, heads, causal}, texts, texts_scored, tokens,
    probes, ranges, stats {name: {mean (layers x heads), count}}, top {name: [{layer, head, examples}]}.
    """
    if transformer is None:
        raise BadInput("attn stats needs --transformer NAME_OR_PATH (the model whose heads to measure)")
    for option, value in (("--max-texts", max_texts), ("--max-tokens", max_tokens), ("--shard-texts", shard_texts),
                          ("--workers", workers), ("--top-k", top_k), ("--probe-every", probe_every),
                          ("--probe-length", probe_length), ("--seed", seed), ("--batch-size", batch_size)):
        _check(option, value)
    exports = _exports(svg, html, png, width)
    _check_explore(explore, json_out)
    if ray is not None:
        host_port(ray)
    if out is not None:
        shard_folder(out)
    source = corpus_mod.describe(corpus, field)
    texts = corpus_mod.texts(corpus, field=field, split=split)

    if precision not in (None, "float32", "float64"):
        raise BadInput(f"--precision must be float32 or float64 (got {precision!r})")
    name = backend.value if backend else "auto"
    model = load_model(transformer, name, allow_missing_weights, json_out=json_out)
    if precision is not None and model.backend != "numpy":
        raise BadInput(f"--precision chooses attn's NumPy pass; {model.name} runs through transformers (its --dtype, "
                       "float32 by default): drop --precision")
    settings = Settings(top_k=top_k, probe_every=probe_every, probe_length=probe_length, seed=seed,
                        precision=precision or "float32")
    where = f"on the Ray cluster at {ray}" if ray else f"in {workers} processes" if workers > 1 else "here"
    with _Progress(f"measuring the {model.layers * model.heads} heads of {model.name} on the {source}, {where}",
                   json_out) as progress:
        outcome = run(model, texts, spec=ModelSpec(transformer, name, allow_missing_weights, batch_size), settings=settings,
                      out=out, shard_texts=shard_texts, max_texts=max_texts, max_tokens=max_tokens, workers=workers,
                      ray_address=ray, on_shard=progress.advance)
    if outcome.stopped_at_shard is not None:
        warn(f"stopped at text {outcome.stopped_at_shard}: the shard there in --out goes past --max-texts/--max-tokens")
    if outcome.acc.texts == 0:
        raise BadInput(f"the corpus ({source}) holds no text to measure")
    if outcome.acc.scored == 0:
        raise BadInput(f"no text of the corpus ({source}) has a token to score (each is one token or less)")
    doc = document(outcome.acc, outcome.ident, outcome.ranges, source=source, shards=outcome.shards,
                   computed=outcome.computed, ran=outcome.ran, out=None if out is None else str(out))
    if has(model, "stacks"):  # T5, BART: the encoder stack's self-attention
        info("an encoder-decoder: these are the encoder stack's heads (its self-attention over each text)")
        doc["stack"] = "encoder"
    _show(doc, json_out, exports, f"attn stats: {model.name}", explore, positionals=(corpus,), options=(
        ("--transformer", transformer), ("--field", field), ("--split", split), ("--max-texts", max_texts),
        ("--max-tokens", max_tokens), ("--top-k", top_k if top_k != 5 else None),
        ("--probe-every", probe_every if probe_every != 4 else None),
        ("--probe-length", probe_length if probe_length != 20 else None), ("--seed", seed or None),
        ("--precision", precision), ("--backend", backend.value if backend else None),
        ("--allow-missing-weights", allow_missing_weights)))


@stats_app.command("merge")
def merge_cmd(
    folders: Annotated[list[Path], typer.Argument(help="Folders written by 'attn stats --out' (or shard files).",
                                                  show_default=False)],
    *,
    json_out: Annotated[bool, typer.Option("--json", help="Print the merged statistics as JSON.")] = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
    explore: Annotated[bool, typer.Option("--explore", help="Then open the statistics in an interactive view (the explore extra).")] = False,
) -> None:
    """Merge the shards of several runs or machines exactly (sums and counts, never means of means).

    Shards of another model, attn version, definitions version or settings are refused (exit 2);
    a damaged shard is named and skipped. JSON keys: those of 'attn stats', and skipped.
    """
    exports = _exports(svg, html, png, width)
    _check_explore(explore, json_out)
    merged = merge_shards(folders)
    doc = document(merged.acc, merged.ident, merged.ranges, source="shards", shards=len(merged.ranges),
                   skipped=merged.skipped)
    _show(doc, json_out, exports, f"attn stats merge: {merged.ident.model['name']}", explore, command="stats merge",
          positionals=tuple(folders))
