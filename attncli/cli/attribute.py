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
from attncli.cli.options import ExportWidthOpt, HtmlOpt, PngOpt, SvgOpt
from attncli.errors import BadInput
from attncli.textio import visible


@app.command("attribute")
def attribute_cmd(
    clean: Annotated[str, typer.Argument(help="The clean text.", show_default=False)],
    corrupt: Annotated[str, typer.Argument(help="The corrupted text (the same number of tokens).", show_default=False)],
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
