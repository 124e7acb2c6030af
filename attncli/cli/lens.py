"""Command ``attn lens``: the logit lens of a decoder (nostalgebraist 2020): for every layer and
position, the next tokens the final norm and unembedding would give from that layer's residual
stream. The built-in LM by default, or a pretrained GPT-2 or Llama-family model on attn's NumPy pass
(--transformer). The core is :mod:`attncli.attention.logit_lens`; drawn by
:mod:`attncli.views.lens`. Nothing heavy is imported at module level (and torch never).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import app
from attncli.cli.output import Exports, check_exports, show
from attncli.cli.options import EXPORT_OPTIONS, declared
from attncli.pipeline.lens_compute import MAX_TOP_K, LensRequest, compute


@app.command("lens")
@declared("text", "transformer", "model", "top_k", "token", "json_out", *EXPORT_OPTIONS)
def lens_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    *,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help=f"Next tokens per layer and position, in the table and the JSON (1-{MAX_TOP_K}).")] = 1,
    token: Annotated[Optional[str], typer.Option(help="Follow this token's rank and probability through the layers.",
                                                 metavar="WORD")] = None,
    **options: Any,
) -> None:
    """The logit lens: what a decoder would predict next if it stopped after each layer."""
    json_out = options["json_out"]
    request = LensRequest(text, transformer=options["transformer"], model=options["model"], top_k=top_k, token=token)
    request.check()
    exports = Exports.of(options)
    check_exports(exports, json_out)
    show(compute(request), json_out=json_out, exports=exports)
