"""Command ``attn attribute``: attribution patching (attncli/causal/attribution.py), every cell of
``attn patch``'s grid estimated from one forward and one backward pass, drawn as patch's grid."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from attncli.causal import documents
from attncli.causal.attribution import SITES, attribute, verify
from attncli.cli.causal import (AllowOpt, ContrastId, ContrastWord, JsonOpt, ModelArg, TargetId, TargetWord, _options,
                                _gradient_pair, _progress, _show)
from attncli.cli.common import app
from attncli.cli.pairs import (PairsOpt, PairsOutOpt, RayOpt, ShardPairsOpt, WorkersOpt, check_pairs_options,
                               run_pairs_command)
from attncli.cli.options import ExportWidthOpt, HtmlOpt, PngOpt, SvgOpt
from attncli.errors import BadInput
from attncli.textio import visible


@app.command("attribute")
def attribute_cmd(
    clean: Annotated[Optional[str], typer.Argument(help="The clean text (or --pairs FILE).", show_default=False)] = None,
    corrupt: Annotated[Optional[str], typer.Argument(help="The corrupted text (the same number of tokens).",
                                                     show_default=False)] = None,
    *,
    transformer: ModelArg = None,
    target: TargetWord = None,
    target_id: TargetId = None,
    contrast: ContrastWord = None,
    contrast_id: ContrastId = None,
    site: Annotated[str, typer.Option("--site", help="resid, attn, mlp (per position), head (a head's output), or "
                                      "key / query (a head's, per position).")] = "resid",
    no_qk_fix: Annotated[bool, typer.Option("--no-qk-fix", help="Plain AtP: the attention patterns a patch changes "
                                            "linearised (by default AtP*: recomputed).")] = False,
    verify_cells: Annotated[int, typer.Option("--verify", min=0, max=10000, metavar="K",
                                              help="Also patch the K largest cells exactly and print the agreement.")] = 0,
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
    """Estimate every cell of attn patch's grid from one forward and one backward pass (attribution patching)."""
    if site not in SITES:
        raise BadInput(f"--site {site!r}: choose one of {', '.join(SITES)}")
    given = dict(pairs=pairs, out=out, shard_pairs=shard_pairs, workers=workers, ray=ray, transformer=transformer,
                 target=target, target_id=target_id, contrast=contrast, contrast_id=contrast_id,
                 allow_missing_weights=allow_missing_weights, json_out=json_out, svg=svg, html=html, png=png,
                 width=width, verify_cells=verify_cells)
    check_pairs_options(given, [clean, corrupt])
    if pairs is not None:
        return run_pairs_command("attribute", given, site=site, qk_fix=not no_qk_fix)
    model, enc, bad, t = _gradient_pair(transformer, clean, corrupt, allow_missing_weights, json_out,
                                        (svg, html, png, width), (target, target_id, contrast, contrast_id))
    with _progress(f"attributing {site} in {model.layers} layers", json_out):
        res = attribute(model, enc.ids, bad.ids, t, where=site, qk_fix=not no_qk_fix)
        if verify_cells:
            res = verify(model, enc.ids, bad.ids, t, res, verify_cells)
    doc = documents.attribute_document(model, enc, bad, t, res)
    _show(doc, f"attn attribute: {visible(clean[:60])}", json_out, svg, html, png, width, [clean, corrupt],
          _options(transformer, target, target_id, contrast, contrast_id, None, None, None, allow_missing_weights,
                   ("--site", site if site != "resid" else None), ("--no-qk-fix", no_qk_fix),
                   ("--verify", verify_cells or None)))
