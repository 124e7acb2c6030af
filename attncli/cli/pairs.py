"""``--pairs FILE`` on ``attn ablate``, ``patch``, ``attribute`` and ``circuit``: its options (declared
in attncli.cli.options, PAIRS_OPTIONS), what they exclude (attncli.rules.option_conflicts' rows of path "pairs"), and the run: a
attncli.pipeline.pairs_compute.PairsRun computed and shown as the single pair's grid is
(attncli.views.pairs_view), "mean over N pairs" in its title."""

from __future__ import annotations

from typing import Any, Optional

from attncli.cli.common import resumable
from attncli.cli.output import Exports, check_exports, show
from attncli.cli.progress import Stage
from attncli.errors import BadInput
from attncli.rules.option_conflicts import validate
from attncli.pipeline.pairs_compute import PairsRun, compute_pairs
from attncli.io.textio import visible
from attncli.views.circuit_view import CircuitView
from attncli.views.pairs_view import PairsView

def check_pairs_options(options: dict[str, Any], positionals: list[Optional[str]]) -> None:
    """BadInput for a mix of --pairs and one pair's options, or the run options without --pairs
    (the table's rows, attncli.rules.option_conflicts, path "pairs"); or for --pairs beside the texts, or
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
    exports = Exports.of(options)
    check_exports(exports, json_out)
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
