"""Command ``attn qk``: why a head attends from one token to another. It builds its request
(attncli.pipeline.qk_compute.QKRequest), hands it to attncli.pipeline.compute_qk (hf/methods/qk_attribution.py:
the math) and shows the result (views/qk_view.py), with --json, --svg, --png and --html as every view."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import app
from attncli.cli.options import EXPORT_OPTIONS, declared
from attncli.cli.output import Exports, check_exports, show
from attncli.cli.transformer import load_model
from attncli.pipeline.qk_compute import QKRequest, compute

@app.command("qk")
@declared("text", "transformer", "pair", "layer", "head", "query", "key", "top", "allow_missing_weights", "json_out",
          *EXPORT_OPTIONS)
def qk_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    *,
    layer: Annotated[int, typer.Option(min=0, help="The head's layer.", metavar="L")] = 0,
    head: Annotated[int, typer.Option(min=0, help="The head.", metavar="H")] = 0,
    query: Annotated[Optional[int], typer.Option(min=0, help="The query token's position (0 = the first token; "
                                                 "default: the last).", metavar="I", show_default=False)] = None,
    key: Annotated[Optional[int], typer.Option(min=0, help="The key token's position (default: the query's).",
                                               metavar="J", show_default=False)] = None,
    top: Annotated[int, typer.Option(min=1, max=1000, help="How many parts to list.", metavar="N")] = 12,
    **options: Any,
) -> None:
    """Why a head attends from token I to token J: its score split into query-side x key-side parts.

    Each side's residual stream is a sum of the embeddings, every earlier head, every earlier MLP
    and the biases; with the norms' scales frozen at this run (and RoPE a fixed rotation at the two
    positions), the score is a sum of one part per pair. The parts add up to the score.
    """
    json_out = options["json_out"]
    exports = Exports.of(options)
    check_exports(exports)
    request = QKRequest(text, transformer=options["transformer"], pair=options["pair"], layer=layer, head=head,
                        query=query, key=key, top=top, allow_missing_weights=options["allow_missing_weights"])
    request.check()
    model = load_model(request.transformer, "numpy", request.allow_missing_weights, json_out=json_out)
    show(compute(request, model), json_out=json_out, exports=exports)
