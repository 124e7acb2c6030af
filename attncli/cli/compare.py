"""Command ``attn compare``: two attention matrices side by side and their difference.

Two texts under one model, one text under two pretrained models (--transformer-b), or one text
under two variants or masks of the word-vector path (--variant-b, --causal-b). The request, compute and result are
:mod:`attncli.pipeline.compare_compute`'s; nothing heavy is imported at module level.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import app
from attncli.cli.options import PRETRAINED, declared
from attncli.cli.output import show
from attncli.cli.transformer import load_model
from attncli.pipeline.compare_compute import CompareRequest, compute
from attncli.pipeline.running import Later



@app.command("compare")
@declared("text", "text_b", "transformer", "transformer_b", "layer", "head", "words", "backend", "variant", "variant_b",
          "causal", "causal_b", "model", "align", "json_out")
def compare_cmd(
    text: Annotated[str, typer.Argument(help="The first text (A).", show_default=False)],
    text_b: Annotated[Optional[str], typer.Argument(help="The second text (B; default: A again, under --transformer-b, "
                                                         "--variant-b or --causal-b).", show_default=False)] = None,
    *,
    transformer_b: Annotated[Optional[str], typer.Option("--transformer-b", help="B's pretrained model (default: --transformer).",
                                                         metavar="NAME_OR_PATH", rich_help_panel=PRETRAINED)] = None,
    variant_b: Annotated[Optional[str], typer.Option("--variant-b", help="B's attention variant (word vectors).", metavar="NAME")] = None,
    causal_b: Annotated[bool, typer.Option("--causal-b", help="B under a causal mask (word vectors).")] = False,
    align: Annotated[str, typer.Option(help="same: the two must have the same words/tokens count; position: the first N of each.")] = "same",
    **options: Any,
) -> None:
    """Two attention matrices side by side and their difference B - A (PuOr: purple = A more, orange = B more)."""
    backend, json_out = options.pop("backend"), options.pop("json_out")
    request = CompareRequest(text, text_b, transformer_b=transformer_b, variant_b=variant_b, causal_b=causal_b,
                             align=align, backend=backend.value if backend else None, **options)
    request.check()
    show(compute(request, Later(lambda name: load_model(name, request.backend or "auto"))), json_out=json_out)
