"""``--pairs FILE`` on ``attn ablate``, ``patch``, ``attribute`` and ``circuit``: the options declared
once (:data:`PAIRS_OPTIONS`), what they exclude (attncli.option_conflicts' rows of path "pairs"), and the run: a
attncli.pipeline.pairs_compute.PairsRun computed and shown as the single pair's grid is
(attncli.views.pairs_view), "mean over N pairs" in its title."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import resumable
from attncli.cli.matrix import Exports, _check_exports
from attncli.cli.output import show
from attncli.cli.progress import Stage
from attncli.errors import BadInput
from attncli.option_conflicts import validate
from attncli.pipeline.pairs_compute import PairsRun, compute_pairs
from attncli.textio import visible
from attncli.views.circuit_view import CircuitView
from attncli.views.pairs_view import PairsView

PairsOpt = Annotated[Optional[Path], typer.Option(
    "--pairs", metavar="FILE", help="Average over the prompt pairs of a JSONL file (one object a line: clean, corrupt, "
    "target, optional contrast) instead of one text.")]
PairsOutOpt = Annotated[Optional[Path], typer.Option(
    "--out", metavar="DIR", help="With --pairs: write a shard per chunk of pairs here; a run started again resumes.")]
ShardPairsOpt = Annotated[int, typer.Option("--shard-pairs", metavar="N", help="With --pairs: pairs per shard.")]
WorkersOpt = Annotated[int, typer.Option("--workers", metavar="N", help="With --pairs: local worker processes "
                                         "(with --ray: actors; default the cluster's CPUs).")]
RayOpt = Annotated[Optional[str], typer.Option("--ray", metavar="ADDRESS", help="With --pairs: run the chunks on the "
                                               "Ray cluster at this address (the cluster extra).")]

PAIRS_OPTIONS: dict[str, tuple[Any, Any]] = {
    "pairs": (PairsOpt, None), "out": (PairsOutOpt, None), "shard_pairs": (ShardPairsOpt, 64),
    "workers": (WorkersOpt, 1), "ray": (RayOpt, None),
}
PAIRS_NAMES = tuple(PAIRS_OPTIONS)


def check_pairs_options(options: dict[str, Any], positionals: list[Optional[str]]) -> None:
    """BadInput for a mix of --pairs and one pair's options, or the run options without --pairs
    (the table's rows, attncli.option_conflicts, path "pairs"); or for --pairs beside the texts, or
    neither."""
    if options.get("pairs") is None and all(p is None for p in positionals):
        raise BadInput("give the text(s) to read, or --pairs FILE (a JSONL file of clean/corrupt/target pairs)")
    if options.get("pairs") is None and any(p is None for p in positionals):
        raise BadInput("the second text, the corrupted one, is missing: give the clean text and then the corrupted "
                       "text (as many tokens), or --pairs FILE")
    if options.get("pairs") is not None and any(p is not None for p in positionals):
        raise BadInput("--pairs FILE brings the texts: drop the text arguments")
    validate(options, "pairs")


def run_pairs_command(kind: str, options: dict[str, Any], **job: Any) -> None:
    """Compute and print a --pairs run of ``kind`` (``job``: site, qk_fix, steps)."""
    json_out = options.get("json_out", False)
    exports = Exports(svg=options.get("svg"), html=options.get("html"), png=options.get("png"),
                      width=options.get("width"))
    _check_exports(exports, json_out)
    backend = options.get("backend")
    run = PairsRun(options["pairs"], kind, transformer=options.get("transformer"),
                   backend=backend.value if hasattr(backend, "value") else (backend or "auto"),
                   allow_missing_weights=bool(options.get("allow_missing_weights")), out=options.get("out"),
                   shard_pairs=options.get("shard_pairs", 64), workers=options.get("workers", 1), ray=options.get("ray"),
                   **job)
    with resumable(run.out):
        doc = compute_pairs(run, stage=lambda what: Stage(what, json_out=json_out))
    extra = [(f"--{k.replace('_', '-')}", v) for k, v in job.items() if (k, v) != ("faithfulness", 0.9)]
    opts = [("--transformer", run.transformer), *[(k, v) for k, v in extra if k != "--qk-fix"],
            ("--no-qk-fix", not job["qk_fix"]) if "qk_fix" in job else ("--no-qk-fix", None),
            ("--pairs", str(run.pairs)), ("--out", None if run.out is None else str(run.out)),
            ("--workers", run.workers if run.workers != 1 else None), ("--ray", run.ray)]
    drawn = CircuitView if kind == "circuit" else PairsView  # a circuit's document is attn circuit's, over the pairs
    view = drawn(doc, title=visible(f"attn {kind} --pairs {str(run.pairs)[:60]}"), command=kind, options=opts)
    show(view, json_out=json_out, exports=exports)
