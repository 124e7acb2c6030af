"""Command ``attn attribute``: attribution patching (attncli/causal/attribution.py), every cell of
``attn patch``'s grid estimated from one forward and one backward pass, drawn as patch's grid. It
builds its request (attncli.causal.gradient_request.AttributeRequest) and hands it to
attncli.pipeline.compute_gradients through cli/causal.py's ``run_gradients``."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from attncli.causal.gradient_request import AttributeRequest
from attncli.cli.causal import GRADIENT_OPTIONS, MODEL_OPTIONS, OUTPUT_OPTIONS, gradient_fields, run_gradients
from attncli.cli.common import app
from attncli.cli.options import PAIRS_OPTIONS, declared
from attncli.cli.pairs import check_pairs_options, run_pairs_command


@app.command("attribute")
@declared("clean", "corrupt", *MODEL_OPTIONS, "site", "no_qk_fix", "verify", *PAIRS_OPTIONS, *GRADIENT_OPTIONS,
          *OUTPUT_OPTIONS)
def attribute_cmd(
    clean: Annotated[Optional[str], typer.Argument(help="The clean text (or --pairs FILE).", show_default=False)] = None,
    corrupt: Annotated[Optional[str], typer.Argument(help="The corrupted text (the same number of tokens).",
                                                     show_default=False)] = None,
    *,
    site: Annotated[str, typer.Option("--site", help="resid, attn, mlp (per position), head (a head's output), or "
                                      "key / query (a head's, per position).")] = "resid",
    no_qk_fix: Annotated[bool, typer.Option("--no-qk-fix", help="Plain AtP: the attention patterns a patch changes "
                                            "linearised (by default AtP*: recomputed).")] = False,
    verify: Annotated[int, typer.Option("--verify", min=0, max=10000, metavar="K",
                                        help="Also patch the K largest cells exactly and print the agreement.")] = 0,
    **options: Any,
) -> None:
    """Estimate every cell of attn patch's grid from one forward and one backward pass (attribution patching).

    --pairs FILE: the mean over a JSONL file of pairs (docs/causal.md)."""
    check_pairs_options({**options, "verify_cells": verify or None}, [clean, corrupt])  # --verify 0: none
    if options["pairs"] is not None:
        AttributeRequest("--pairs", corrupt="--pairs", transformer=options["transformer"], site=site,
                         no_qk_fix=no_qk_fix, backend=gradient_fields(options)["backend"]).check()
        return run_pairs_command("attribute", options, site=site, qk_fix=not no_qk_fix)
    run_gradients(AttributeRequest(clean, corrupt=corrupt, **gradient_fields(options), site=site, no_qk_fix=no_qk_fix,
                                    verify=verify), options)
