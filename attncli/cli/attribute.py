"""Command ``attn attribute``: attribution patching (attncli/causal/attribution.py), every cell of
``attn patch``'s grid estimated from one forward and one backward pass, drawn as patch's grid. It
builds its request (attncli.causal.gradient_request.AttributeRequest) and hands it to
attncli.pipeline.compute_gradients through cli/causal.py's ``_run_gradients``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from attncli.causal.gradient_request import AttributeRequest
from attncli.cli.causal import (GRADIENT_OPTIONS, MODEL_OPTIONS, OPTIONS, OUTPUT_OPTIONS, _gradient_fields,
                                _run_gradients)
from attncli.cli.common import app
from attncli.cli.options import declared


@app.command("attribute")
@declared("clean", "corrupt", *MODEL_OPTIONS, "site", "no_qk_fix", "verify", *GRADIENT_OPTIONS, *OUTPUT_OPTIONS,
          table=OPTIONS)
def attribute_cmd(
    clean: Annotated[str, typer.Argument(help="The clean text.", show_default=False)],
    corrupt: Annotated[str, typer.Argument(help="The corrupted text (the same number of tokens).", show_default=False)],
    *,
    site: Annotated[str, typer.Option("--site", help="resid, attn, mlp (per position), head (a head's output), or "
                                      "key / query (a head's, per position).")] = "resid",
    no_qk_fix: Annotated[bool, typer.Option("--no-qk-fix", help="Plain AtP: the attention patterns a patch changes "
                                            "linearised (by default AtP*: recomputed).")] = False,
    verify: Annotated[int, typer.Option("--verify", min=0, max=10000, metavar="K",
                                        help="Also patch the K largest cells exactly and print the agreement.")] = 0,
    **options: Any,
) -> None:
    """Estimate every cell of attn patch's grid from one forward and one backward pass (attribution patching)."""
    _run_gradients(AttributeRequest(clean, corrupt=corrupt, **_gradient_fields(options), site=site, no_qk_fix=no_qk_fix,
                                    verify=verify), options)
