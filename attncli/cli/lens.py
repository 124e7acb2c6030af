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
from attncli.cli.matrix import Exports, _check_exports
from attncli.cli.output import show
from attncli.cli.options import ExportWidthOpt, HtmlOpt, ModelOpt, PngOpt, SvgOpt, TransformerOpt
from attncli.errors import BadInput
from attncli.generate.decoders import load_decoder
from attncli.views.lens import LensView

MAX_TOP_K = 20


@app.command("lens")
def lens_cmd(
    text: Annotated[str, typer.Argument(help="The text the model reads.", show_default=False)],
    *,
    transformer: TransformerOpt = None,
    model: ModelOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help=f"Next tokens per layer and position, in the table and the JSON (1-{MAX_TOP_K}).")] = 1,
    token: Annotated[Optional[str], typer.Option(help="Follow this token's rank and probability through the layers.",
                                                 metavar="WORD")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the lens as JSON.")] = False,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    png: PngOpt = None,
    width: ExportWidthOpt = None,
) -> None:
    """The logit lens: what a decoder would predict next if it stopped after each layer."""
    if not 1 <= top_k <= MAX_TOP_K:
        raise BadInput(f"--top-k must be between 1 and {MAX_TOP_K} (got {top_k})")
    exports = Exports(svg=svg, html=html, png=png, width=width)
    _check_exports(exports, json_out)
    doc = lens_document(text, transformer=transformer, model=model, top_k=top_k, token=token)

    show(LensView(doc, title=f"attn lens: {text[:60]}", command="lens", positionals=[text],
                  options=[("--transformer", transformer), ("--model", model), ("--top-k", top_k if top_k != 1 else None),
                           ("--token", token)]),
         json_out=json_out, exports=exports)


def lens_document(text: str, *, transformer: Optional[str], model: Optional[str], top_k: int,
                  token: Optional[str]) -> dict[str, Any]:
    """The lens as a JSON-ready document (keys in docs/beyond-weights.md)."""
    decoder = load_decoder(model, transformer, command="attn lens")
    enc = decoder.encode(text)
    if len(enc.inputs) > decoder.context:
        raise BadInput(f"the text is {len(enc.inputs)} tokens, more than the model's {decoder.context}")
    follow = None
    if token is not None:
        follow = decoder.token_id(token)
        if follow is None:
            raise BadInput(f"--token {token!r} is not one token of the model's vocabulary")
    lens = decoder.lens(enc.inputs, top_k, follow)
    n_layers = lens.top_ids.shape[0]
    cells = [[[{"token": decoder.label(decoder.token(int(i))), "id": int(i), "prob": round(float(p), 6)}
               for i, p in zip(lens.top_ids[l, t], lens.top_probs[l, t])] for t in range(len(enc.tokens))]
             for l in range(n_layers)]
    doc: dict[str, Any] = {
        "model": decoder.name, "kind": decoder.kind, "tokens": [decoder.label(t) for t in enc.tokens],
        "layers": n_layers - 1, "top_k": top_k,
        "rows": "lens[l][t]: after l layers (0 = the embeddings) at position t, the top_k next tokens, best first",
        "lens": cells, "follow": None,
    }
    if follow is not None:
        doc["follow"] = {"token": decoder.label(decoder.token(follow)), "id": int(follow),
                         "rank": lens.follow_rank.astype(int).tolist(),
                         "prob": [[round(float(p), 6) for p in row] for row in lens.follow_prob]}
    return doc
