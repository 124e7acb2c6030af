"""Command ``attn compare``: two attention matrices side by side and their difference.

Two texts under one model, one text under two pretrained models (--transformer-b), or one text
under two variants or masks of the word-vector path (--variant-b, --causal-b). The core is
:mod:`attncli.attention.compare`; nothing heavy is imported at module level.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from attncli.attention import checkpoint_views as pv
from attncli.attention.compare import compare, transformer_side
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MatrixRequest, compute
from attncli.cli.common import app
from attncli.cli.options import BackendOpt, CausalOpt, HeadOpt, LayerOpt, ModelOpt, TransformerOpt, VariantOpt, WordsOpt
from attncli.cli.output import show
from attncli.cli.transformer import load_model
from attncli.errors import BadInput
from attncli.views.compare_view import CompareView

PRETRAINED = "Pretrained transformers"


@app.command("compare")
def compare_cmd(
    text: Annotated[str, typer.Argument(help="The first text (A).", show_default=False)],
    text_b: Annotated[Optional[str], typer.Argument(help="The second text (B; default: A again, under --transformer-b, "
                                                         "--variant-b or --causal-b).", show_default=False)] = None,
    *,
    transformer: TransformerOpt = None,
    transformer_b: Annotated[Optional[str], typer.Option("--transformer-b", help="B's pretrained model (default: --transformer).",
                                                         metavar="NAME_OR_PATH", rich_help_panel=PRETRAINED)] = None,
    layer: LayerOpt = None,
    head: HeadOpt = None,
    words: WordsOpt = False,
    backend: BackendOpt = None,
    variant: VariantOpt = "scaled",
    variant_b: Annotated[Optional[str], typer.Option("--variant-b", help="B's attention variant (word vectors).", metavar="NAME")] = None,
    causal: CausalOpt = False,
    causal_b: Annotated[bool, typer.Option("--causal-b", help="B under a causal mask (word vectors).")] = False,
    model: ModelOpt = None,
    align: Annotated[str, typer.Option(help="same: the two must have the same words/tokens count; position: the first N of each.")] = "same",
    json_out: Annotated[bool, typer.Option("--json", help="Print both matrices and the delta as JSON.")] = False,
) -> None:
    """Two attention matrices side by side and their difference B - A (PuOr: purple = A more, orange = B more)."""
    if align not in ("same", "position"):
        raise BadInput(f"--align {align!r}: choose same or position")
    if transformer is None and transformer_b is not None:
        raise BadInput("--transformer-b needs --transformer (model A)")
    if transformer is not None:
        for on, option in ((variant_b is not None, "--variant-b"), (causal_b, "--causal-b"), (causal, "--causal"),
                           (variant != "scaled", "--variant"), (model is not None, "--model")):
            if on:
                raise BadInput(f"{option} belongs to the word-vector path, not --transformer")
        sides, unit = _transformer_sides(text, text_b, transformer, transformer_b, layer, head, words,
                                         backend.value if backend else "auto")
    else:
        for on, option in ((words, "--words"), (layer is not None, "--layer"), (head is not None, "--head"),
                           (backend is not None, "--backend")):
            if on:
                raise BadInput(f"{option} needs --transformer (the word-vector path is one layer of words)")
        sides, unit = _word_vector_sides(text, text_b, variant, variant_b, causal, causal_b, model)
    (ma, ta, ka, meta_a), (mb, tb, kb, meta_b) = sides
    c = compare(ma, mb, ta, tb, ka, kb, align=align, unit=unit)
    options = [("--transformer", transformer), ("--transformer-b", transformer_b), ("--layer", layer), ("--head", head),
               ("--words", words), ("--backend", backend.value if backend else None),
               ("--variant", variant if variant != "scaled" else None), ("--variant-b", variant_b), ("--causal", causal),
               ("--causal-b", causal_b), ("--model", model), ("--align", align if align != "same" else None)]
    show(CompareView(c, meta_a, meta_b, unit, positionals=[text] + ([text_b] if text_b is not None else []),
                     options=options), json_out=json_out)


def _transformer_sides(text, text_b, transformer, transformer_b, layer, head, words, backend):
    if text_b is None and transformer_b is None:
        raise BadInput("nothing to compare: give a second text, or a second model with --transformer-b")
    models = {transformer: load_model(transformer, backend)}
    if transformer_b is not None and transformer_b not in models:
        models[transformer_b] = load_model(transformer_b, backend)
    sides = [transformer_side(models[name], t, pv.layer_shown(models[name], layer, head), head, words)
             for name, t in ((transformer, text), (transformer_b or transformer, text if text_b is None else text_b))]
    return sides, "words" if words else "tokens"


def _word_vector_sides(text, text_b, variant, variant_b, causal, causal_b, model):
    if text_b is None and variant_b is None and not causal_b:
        raise BadInput("nothing to compare: give a second text, --variant-b NAME or --causal-b")
    sides = []
    for t, v, c in ((text, variant, causal), (text if text_b is None else text_b, variant_b or variant, causal or causal_b)):
        res = compute(MatrixRequest(text=t, variant=v, mask=MaskSpec(causal=c), model=model))
        sides.append((res.attention.weights, res.tokens, res.key_tokens,
                      {"text": t, "model": res.model_name, "variant": v, "causal": c}))
    return sides, "words"
