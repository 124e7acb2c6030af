"""``attn compare`` as one request, one compute, one result: :class:`CompareRequest` ->
:func:`compute` -> :class:`CompareResult` (the result protocol of attncli.views.result, drawn by
attncli.views.compare_view). Two texts under one model, one text under two pretrained models
(``transformer_b``), or one text under two variants or masks of the word vectors (``variant_b``,
``causal_b``). The command line and ``attn explore`` (key C) build the same request.

    >>> CompareRequest("time flies", "fruit flies", transformer="gpt2", layer=1, align="position").command_line()
    "attn compare 'time flies' 'fruit flies' --transformer gpt2 --layer 1 --align position"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

from attncli.attention import checkpoint_views as pv
from attncli.attention.compare import compare
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MatrixRequest
from attncli.attention.matrix import compute as compute_matrix
from attncli.hf.loader import load  # torch only when the torch backend runs
from attncli.rules.option_conflicts import ALIGNS, TableRequest  # noqa: F401 (ALIGNS: the choices)
from attncli.io.textio import texts_of
from attncli.views.compare_view import CompareView
from attncli.views.result import attn_command


@dataclass
class CompareRequest(TableRequest):
    """Everything ``attn compare`` needs (its options, by their parameter names)."""

    text: str  # A
    text_b: Optional[str] = None  # B (None: A again, under transformer_b, variant_b or causal_b)
    transformer: Optional[str] = None  # A's pretrained model (None: the word vectors)
    transformer_b: Optional[str] = None  # B's (None: A's)
    layer: Optional[int] = None
    head: Optional[int] = None
    words: bool = False
    backend: Optional[str] = None  # auto, numpy or torch (None: auto, and not given)
    variant: str = "scaled"  # the word vectors' variant and mask of A, then B's
    variant_b: Optional[str] = None
    causal: bool = False
    causal_b: bool = False
    model: Optional[str] = None  # the word-vector model
    align: str = "same"  # same: equal counts; position: the first N of each

    table_path: ClassVar[str] = "compare"  # check(): the table's rows of attn compare (attncli.rules.option_conflicts)

    def options(self) -> list[tuple[str, Any]]:
        return [("--transformer", self.transformer), ("--transformer-b", self.transformer_b), ("--layer", self.layer),
                ("--head", self.head), ("--words", self.words),
                ("--backend", self.backend),
                ("--variant", self.variant if self.variant != "scaled" else None), ("--variant-b", self.variant_b),
                ("--causal", self.causal), ("--causal-b", self.causal_b), ("--model", self.model),
                ("--align", self.align if self.align != "same" else None)]

    def positionals(self) -> list[str]:
        return [self.text] + ([self.text_b] if self.text_b is not None else [])

    def command_line(self) -> str:
        return attn_command("compare", self.positionals(), self.options())


class CompareResult(CompareView):
    """The comparison of :func:`compute`; the request says its command line."""

    def __init__(self, request: CompareRequest, c, meta_a: dict[str, Any], meta_b: dict[str, Any], unit: str,
                 model: Any = None) -> None:
        super().__init__(c, meta_a, meta_b, unit, positionals=request.positionals(), options=request.options())
        self.request = request
        self.model = model  # A's pretrained model (None: the word vectors): its layers and heads, for an app
        self.is_pretrained = request.transformer is not None


def compute(request: CompareRequest, load_model: Optional[Callable[[str], Any]] = None) -> CompareResult:
    """The comparison ``request`` asks for; ``load_model(name)`` gives each pretrained model (default:
    attncli.hf.load with the request's backend; explore hands the model it has loaded)."""
    request.check()
    if request.transformer is None:
        sides, unit, model = _word_vector_sides(request), "words", None
    else:
        load_model = load_model or (lambda name: load(name, backend=request.backend or "auto"))
        models = {request.transformer: load_model(request.transformer)}
        name_b = request.transformer_b or request.transformer
        if name_b not in models:
            models[name_b] = load_model(name_b)
        text_b = request.text if request.text_b is None else request.text_b
        sides = [transformer_side(models[name], t, pv.layer_shown(models[name], request.layer, request.head),
                                  request.head, request.words)
                 for name, t in ((request.transformer, request.text), (name_b, text_b))]
        unit, model = "words" if request.words else "tokens", models[request.transformer]
    (ma, ta, ka, meta_a), (mb, tb, kb, meta_b) = sides  # (R, C) each, with their labels
    return CompareResult(request, compare(ma, mb, ta, tb, ka, kb, align=request.align, unit=unit), meta_a, meta_b,
                         unit, model)


def _word_vector_sides(r: CompareRequest) -> list:
    sides = []
    for t, v, c in ((r.text, r.variant, r.causal),
                    (r.text if r.text_b is None else r.text_b, r.variant_b or r.variant, r.causal or r.causal_b)):
        res = compute_matrix(MatrixRequest(text=t, variant=v, mask=MaskSpec(causal=c), model=r.model))
        sides.append((res.attention.weights, res.tokens, res.key_tokens,
                      {"text": t, "model": res.model_name, "variant": v, "causal": c}))
    return sides


def transformer_side(model, text: str, layer: int, head: Optional[int], words: bool) -> tuple:
    """One side of ``attn compare --transformer``: ``text``'s matrix at ``layer`` (one head, or
    the heads' mean), by token or by word, as (weights (R, C), tokens, key tokens, meta). ``model``
    is a loaded pretrained model (attncli.hf's)."""
    enc = model.encode(text)
    view = pv.select(model.attentions(enc), layer=layer, head=head, words=words, tokens=enc.tokens,
                     segments=enc.segments, special=enc.special, word_ids=enc.word_ids, word_texts=enc.words,
                     texts=texts_of(enc))
    v = view.words if words else view
    meta = {"text": text, "model": model.name, "backend": model.backend, "layer": layer, "head": head}
    if not words:  # each token's text (" John" for "ĠJohn"), what the views draw; a word is its text already
        meta.update(token_texts=view.texts, key_token_texts=view.key_texts)
    return v.weights, v.tokens, v.key_tokens, meta
