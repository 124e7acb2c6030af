"""Command ``attn circuit``: edge attribution patching (EAP, or EAP-IG with --steps) over every edge
between a decoder's components, and the fewest edges that keep --faithfulness of the metric
(attncli/causal/circuit.py), listed by layer, drawn as a layered graph (attncli/views/circuit_view.py).
It builds its request (attncli.causal.gradient_request.CircuitRequest) and hands it to
attncli.pipeline.compute_gradients through cli/causal.py's ``run_gradients``."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from attncli.causal.gradient_request import CircuitRequest
from attncli.cli.causal import GRADIENT_OPTIONS, MODEL_OPTIONS, OUTPUT_OPTIONS, gradient_fields, run_gradients
from attncli.cli.common import app
from attncli.cli.options import PAIRS_OPTIONS, declared
from attncli.cli.pairs import check_pairs_options, run_pairs_command


@app.command("circuit")
@declared("clean", "corrupt", *MODEL_OPTIONS, "steps", "faithfulness", *PAIRS_OPTIONS, *GRADIENT_OPTIONS, *OUTPUT_OPTIONS)
def circuit_cmd(
    clean: Annotated[Optional[str], typer.Argument(help="The clean text (or --pairs FILE).", show_default=False)] = None,
    corrupt: Annotated[Optional[str], typer.Argument(help="The corrupted text (the same number of tokens).",
                                                     show_default=False)] = None,
    *,
    steps: Annotated[int, typer.Option("--steps", metavar="N", help="EAP-IG: average the gradients over N points "
                                       "from the corrupted to the clean embeddings (1: EAP).")] = 1,
    faithfulness: Annotated[float, typer.Option("--faithfulness", metavar="F", help="Keep the fewest top edges "
                                                "that restore this fraction of the metric (checked by patching).")] = 0.9,
    **options: Any,
) -> None:
    """Score every edge between components (EAP / EAP-IG) and find the smallest circuit that keeps the metric.

    --pairs FILE: every edge's mean score over a JSONL file of pairs, and the circuit that keeps
    --faithfulness of their mean difference, every pair patched (docs/causal.md)."""
    check_pairs_options(options, [clean, corrupt])
    if options["pairs"] is not None:
        CircuitRequest("--pairs", corrupt="--pairs", transformer=options["transformer"], steps=steps,
                       faithfulness=faithfulness, backend=gradient_fields(options)["backend"]).check()
        return run_pairs_command("circuit", options, steps=steps, faithfulness=faithfulness)
    run_gradients(CircuitRequest(clean, corrupt=corrupt, **gradient_fields(options), steps=steps,
                                  faithfulness=faithfulness), options)
