"""Command ``attn circuit``: edge attribution patching (EAP, or EAP-IG with --steps) over every edge
between a decoder's components, and the fewest edges that keep --faithfulness of the metric
(attncli/causal/circuit.py), listed by layer, drawn as a layered graph (attncli/views/circuit_view.py)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from attncli.causal.circuit import MAX_STEPS, circuit_document, find_circuit
from attncli.cli.causal import (AllowOpt, ContrastId, ContrastWord, JsonOpt, ModelArg, TargetId, TargetWord, _options,
                                _gradient_pair, _progress)
from attncli.cli.common import app
from attncli.cli.pairs import (PairsOpt, PairsOutOpt, RayOpt, ShardPairsOpt, WorkersOpt, check_pairs_options,
                               run_pairs_command)
from attncli.cli.options import ExportWidthOpt, HtmlOpt, PngOpt, SvgOpt
from attncli.cli.output import show
from attncli.cli.matrix import Exports
from attncli.errors import BadInput
from attncli.textio import visible
from attncli.views.circuit_view import CircuitView


@app.command("circuit")
def circuit_cmd(
    clean: Annotated[Optional[str], typer.Argument(help="The clean text (or --pairs FILE).", show_default=False)] = None,
    corrupt: Annotated[Optional[str], typer.Argument(help="The corrupted text (the same number of tokens).",
                                                     show_default=False)] = None,
    *,
    transformer: ModelArg = None,
    target: TargetWord = None,
    target_id: TargetId = None,
    contrast: ContrastWord = None,
    contrast_id: ContrastId = None,
    steps: Annotated[int, typer.Option("--steps", metavar="N", help="EAP-IG: average the gradients over N points "
                                       "from the corrupted to the clean embeddings (1: EAP).")] = 1,
    faithfulness: Annotated[float, typer.Option("--faithfulness", metavar="F", help="Keep the fewest top edges "
                                                "that restore this fraction of the metric (checked by patching).")] = 0.9,
    pairs: PairsOpt = None,
    out: PairsOutOpt = None,
    shard_pairs: ShardPairsOpt = 64,
    workers: WorkersOpt = 1,
    ray: RayOpt = None,
    allow_missing_weights: AllowOpt = False,
    json_out: JsonOpt = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
) -> None:
    """Score every edge between components (EAP / EAP-IG) and find the smallest circuit that keeps the metric."""
    if not 1 <= steps <= MAX_STEPS:
        raise BadInput(f"--steps {steps}: give 1 (EAP) to {MAX_STEPS} points on the path")
    if not 0.0 < faithfulness <= 1.0:  # NaN fails too
        raise BadInput(f"--faithfulness {faithfulness}: a fraction above 0 and at most 1")
    given = dict(pairs=pairs, out=out, shard_pairs=shard_pairs, workers=workers, ray=ray, transformer=transformer,
                 target=target, target_id=target_id, contrast=contrast, contrast_id=contrast_id,
                 allow_missing_weights=allow_missing_weights, json_out=json_out, svg=svg, html=html, png=png,
                 width=width, faithfulness=None if faithfulness == 0.9 else faithfulness)
    check_pairs_options(given, [clean, corrupt])
    if pairs is not None:
        return run_pairs_command("circuit", given, steps=steps)
    model, enc, bad, t = _gradient_pair(transformer, clean, corrupt, allow_missing_weights, json_out,
                                        (svg, html, png, width), (target, target_id, contrast, contrast_id))
    with _progress(f"scoring the edges of {model.layers} layers", json_out):
        res = find_circuit(model, enc.ids, bad.ids, t, steps=steps, faithfulness=faithfulness)
    doc = circuit_document(model, enc, bad, t, res)
    options = _options(transformer, target, target_id, contrast, contrast_id, None, None, None, allow_missing_weights,
                       ("--steps", steps if steps != 1 else None),
                       ("--faithfulness", faithfulness if faithfulness != 0.9 else None))
    view = CircuitView(doc, title=f"attn circuit: {visible(clean[:60])}", command="circuit",
                       positionals=[clean, corrupt], options=options)
    show(view, json_out=json_out, exports=Exports(svg=svg, html=html, png=png, width=width))
