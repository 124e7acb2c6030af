"""Command ``attn qk``: why a head attends from one token to another (hf/qk_attribution.py), drawn by
views/qk_view.py, with --json, --svg, --png and --html as every view."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from attncli.cli.common import app
from attncli.cli.matrix import Exports, _check_exports
from attncli.cli.options import ExportWidthOpt, HtmlOpt, PngOpt, SvgOpt
from attncli.cli.output import show
from attncli.cli.transformer import load_model
from attncli.errors import BadInput
from attncli.hf import qk_attribution
from attncli.textio import visible
from attncli.views.qk_view import QKView

Position = Annotated[int, typer.Option(min=0, metavar="N", show_default=False)]


@app.command("qk")
def qk_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    *,
    transformer: Annotated[Optional[str], typer.Option("--transformer", help="A pretrained model: hub id or directory.",
                                                       show_default=False)] = None,
    pair: Annotated[Optional[str], typer.Option(help="A second sentence, read with TEXT as one input (BERT-style "
                                                "pairs).", show_default=False)] = None,
    layer: Annotated[int, typer.Option(min=0, help="The head's layer.", metavar="L")] = 0,
    head: Annotated[int, typer.Option(min=0, help="The head.", metavar="H")] = 0,
    query: Annotated[int, typer.Option(help="The query token's position (0 = the first token).",
                                       metavar="I", show_default=False)] = -1,
    key: Annotated[int, typer.Option(help="The key token's position.", metavar="J", show_default=False)] = -1,
    top: Annotated[int, typer.Option(min=1, max=1000, help="How many parts to list.", metavar="N")] = 12,
    allow_missing_weights: Annotated[bool, typer.Option("--allow-missing-weights",
                                                        help="Warn instead of refusing unused weights.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
) -> None:
    """Why a head attends from token I to token J: its score split into query-side x key-side parts.

    Each side's residual stream is a sum of the embeddings, every earlier head, every earlier MLP
    and the biases; with the norms' scales frozen at this run (and RoPE a fixed rotation at the two
    positions), the score is a sum of one part per pair. The parts add up to the score.
    """
    _check_exports(Exports(svg=svg, html=html, png=png, width=width))
    if not transformer:
        raise BadInput("give the model with --transformer NAME (a hub id or a directory)")
    model = load_model(transformer, "numpy", allow_missing_weights, json_out=json_out)
    enc = model.encode(text, pair=pair)
    T = len(enc.ids)
    i = T - 1 if query < 0 else query
    j = i if key < 0 else key
    parts = qk_attribution.qk_parts(model, enc, layer, head, i, j)
    doc = qk_attribution.document(model, enc, parts, top)
    view = QKView(doc, title=f"attn qk: {visible(text[:60])}", command="qk", positionals=[text],
                  options=[("--pair", pair), ("--transformer", transformer), ("--layer", layer), ("--head", head), ("--query", i),
                           ("--key", j), ("--top", top if top != 12 else None),
                           ("--allow-missing-weights", allow_missing_weights)])
    show(view, json_out=json_out, exports=Exports(svg=svg, html=html, png=png, width=width))
