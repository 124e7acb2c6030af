"""What :func:`attncli.pipeline.compute_view` returns: :class:`ViewResult`, a pretrained model's view
speaking the one result protocol (attncli.views.result): renderables at a width, the ``--json``
document, the command line, exports (svg, png, json, and html: the interactive page), Jupyter's
``_repr_svg_`` / ``_repr_html_``.

One class per kind of view, each with its own fields and drawing, on a base that holds what they
share (the request, the model, the pass, the interactive page, the command line):
:class:`ViewResult` (``kind`` "pretrained": one head, a layer's heads, the rollout or the flow, by
token or by word; any stack) and :class:`ModelViewResult` (``kind`` "model_view": every head of
layers lo..hi-1 with its class).
Shapes: ``L`` layers, ``h`` heads, ``T`` query tokens, ``S`` key tokens, ``R`` x ``C`` the view.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from attncli.attention import long_view as lvm
from attncli.attention import checkpoint_views as pv
from attncli.attention.heads import ScoredInput, classify
from attncli.attention.model_view import head_classes, model_view_document
from attncli.attention.value_norms import explain_norm
from attncli.io.textio import texts_of
from attncli.errors import BadInput
from attncli.io.export_target import write_export
from attncli.rules.option_conflicts import CONTRIBUTIONS
from attncli.pipeline.view_request import ViewRequest
from attncli.views.long_view import long_renderables
from attncli.views.model_view import model_view_renderables
from attncli.views.page import check_size, extra_size, interactive_page, page_data
from attncli.views.checkpoint_heatmaps import pretrained_heatmaps
from attncli.views.explanation import explanation_renderables
from attncli.views.render import heatmap_renderables
from attncli.views.result import Result

NO_CELL_EXPLANATION = "the explanation of a cell needs attn's NumPy forward pass (BERT and GPT-2 families)"


@dataclass
class PretrainedResult(Result):
    """What every view of a pretrained model's attention holds and does alike."""

    request: ViewRequest
    model: Any  # the model, or one stack of an encoder-decoder (.name, .layers, .heads, .is_decoder, ...)
    enc: Any  # the rows' Encoding (an encoder-decoder's decoder stacks: the target's)
    layer: int
    meta: dict[str, Any]
    attentions: np.ndarray  # (L, h, T, S)
    title: str = "attn matrix"
    reads: Any = None  # attncli.pipeline.reads.Reads: the one traced pass
    keys: Optional[pv.KeySide] = None  # the columns' side when they are other tokens (cross-attention)
    source: Any = None  # an encoder-decoder's source Encoding

    is_pretrained = True  # explore's panels answer the same (a pretrained model's view)
    is_model_view = False
    kind = "pretrained"

    def write_json(self, write) -> None:
        pv.write_document(self.document(), write)  # one matrix row per line

    def command_line(self) -> str:
        return self.request.command_line()


@dataclass
class ModelViewResult(PretrainedResult):
    """``--model-view``: every head of layers lo..hi-1 at a glance, each with its class."""

    lo: int = 0
    hi: int = 0
    classes: Optional[list] = None  # [layer][head]: {"label", "score"}

    is_model_view = True
    kind = "model_view"
    explanation = None  # no cell of its own: a head opens as a ViewResult

    def grid_cell(self, grid: Optional[tuple[int, int]]) -> tuple[int, int]:
        """The model view's ``grid`` (layer, head) within the view (None: its first head)."""
        layer, head = grid if grid is not None else (self.lo, 0)
        return min(max(layer, self.lo), self.hi - 1), min(max(head, 0), self.model.heads - 1)

    def explainable(self) -> Optional[str]:
        return "the model view has no cell explanation: open a head (Enter)"

    def heatmaps(self, width: Optional[int], row_span=None, col_span=None, *, cursor=None, cell_meta: bool = False,
                 lines: bool = False) -> list:
        return model_view_renderables(self.model, self.enc, self.attentions, self.lo, self.hi, width,
                                      hide_special=self.request.hide_special, classes=self.classes,
                                      cursor=cursor, cell_meta=cell_meta)

    def renderables(self, width: Optional[int], row_span=None, col_span=None) -> list:
        return self.heatmaps(width, row_span, col_span)

    def document(self) -> dict[str, Any]:
        return model_view_document(self.model, self.enc, self.attentions, self.meta, self.lo, self.hi, self.classes)

    def page(self) -> str:
        return page_of(self, self.classes)

    def export(self, fmt: str, target: str | Path, *, width: Optional[int] = None, option: str = "") -> None:
        export_with_page(self, fmt, target, width=width, option=option)


@dataclass
class ViewResult(PretrainedResult):
    """One layer's heads, one head, the rollout or the flow (by token or by word; any stack), with
    ``--explain I J``, ``--show`` and a long text's views."""

    view: Any = None  # attncli.attention.checkpoint_views.PretrainedView
    qk: Optional[tuple[np.ndarray, np.ndarray]] = None  # the layer's (h, T, d_head) queries and keys
    values: Optional[tuple[np.ndarray, np.ndarray]] = None  # --show norms: the layer's A (h, T, T), f(x) (h, T, d)
    explanation: Optional[dict[str, Any]] = None  # --explain I J's document
    long: Any = None  # --top-k / --pool: attncli.attention.long_view.LongView (None: the matrix itself)
    rows_only: bool = False  # the pass kept only --rows' query rows (attentions: (1, h, R, T))
    one_layer: bool = False  # the pass kept only the layer shown (attentions: (1, h, R, T), maybe one head)

    # --- the cells ----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        if self.long is not None:  # the cursor moves over the pooled matrix, or the rows' ranked keys
            return self.long.pooled.weights.shape if self.long.pooled is not None else self.long.top.keys.shape
        m = self.view.words.weights if self.view.words is not None else self.view.weights
        return m.shape  # (R, C)

    def input_cell(self, cell: tuple[int, int]) -> tuple[int, int]:
        """A view's cell as input positions (query, key): what ``--explain I J`` takes (with
        --filter or --hide-special the view's rows and columns are a subset of them)."""
        return int(self.view.rows[cell[0]]), int(self.view.cols[cell[1]])

    def explainable(self) -> Optional[str]:
        """None when a cell of this view can be explained, else why not."""
        r = self.request
        if self.long is not None:
            return "no explanation of a cell with --top-k or --pool (a cell there is no single query and key)"
        if r.show == "norms" and self.values is not None:
            return None
        if r.show in CONTRIBUTIONS:
            return (f"no explanation of a cell of --show {r.show}: a cell is token j's share of the whole block's "
                    "output at token i (the JSON's formula says how it is made)")
        if self.qk is None:
            return NO_CELL_EXPLANATION
        for flag, option in ((r.words, "--words"), (r.rollout, "--rollout"), (r.hide_special, "--hide-special"),
                             (r.flow, "--flow")):
            if flag:
                return f"no explanation of a cell with {option} (attn matrix --explain I J takes one head's input positions)"
        return None

    def explain(self, i: int, j: int) -> dict[str, Any]:
        """``--explain I J`` (input positions) from the pass already run."""
        if self.values is not None:
            return with_texts(explain_norm(*self.values, self.enc.tokens, i, j, head=self.request.head), self.enc)
        if self.qk is None:
            raise BadInput(NO_CELL_EXPLANATION)
        q, k = self.qk
        return with_texts(pv.explain_cell(q, k, self.model.scale(self.layer), bool(self.model.is_decoder),
                                          self.attentions[self.layer], self.enc.tokens, i, j, head=self.request.head),
                          self.enc)

    def at_cell(self, cell: Optional[tuple[int, int]]) -> "ViewResult":
        """This result with ``--explain I J`` of ``cell`` (input positions; None: none)."""
        return replace(self, request=replace(self.request, explain=cell),
                       explanation=None if cell is None else self.explain(*cell))

    # --- the protocol -------------------------------------------------------------------------------
    def heatmaps(self, width: Optional[int], row_span=None, col_span=None, *, cursor=None, cell_meta: bool = False,
                 lines: bool = False) -> list:
        """The view drawn without its explanation (explore draws that beside it)."""
        if self.long is not None:  # --top-k / --pool (views.long_view); no cursor drawn
            return long_renderables(self.view, self.meta, self.enc, self.long, self.request.long, width,
                                    words=self.request.words, auto=False)
        return [part for hm in pretrained_heatmaps(self.view, self.meta, self.enc, row_span, col_span, cursor=cursor,
                                                   cell_meta=cell_meta)
                for part in heatmap_renderables(hm, width, lines=lines)]

    def renderables(self, width: Optional[int], row_span=None, col_span=None) -> list:
        """The view at ``width`` as the command line draws it: a matrix too wide to draw whole is
        drawn pooled or by its rows' strongest keys, with a note (views.long_view)."""
        explained = explanation_renderables(self.explanation) if self.explanation is not None else []
        if self.source is None:  # one stack of tokens: --rows picked the rows
            return [*long_renderables(self.view, self.meta, self.enc, self.long, self.request.long, width,
                                      words=self.request.words, col_span=col_span), *explained]
        return [*self.heatmaps(width, row_span, col_span), *explained]

    def document(self) -> dict[str, Any]:
        doc = pv.document(self.view, self.meta, segments=self.enc.segments, special=self.enc.special,
                          explanation=self.explanation, keys=self.keys)
        if self.request.long:
            lvm.long_document(doc, self.long, self.view, self.enc, self.request.long, words=self.request.words)
        return doc

    # --- the interactive page -----------------------------------------------------------------------
    def page(self) -> str:
        """The interactive page (attncli.views.page) opened on this view; any stack (cross: T x S),
        its model view's classes of this input (a cross stack's read its source's keys)."""
        layers = self.every_layer()
        if self.keys is not None:
            return page_of(self, cross_classes(self), layers)
        return page_of(self, head_classes(self.model, self.enc, layers, self.request.hide_special), layers)

    def every_layer(self) -> np.ndarray:
        """(L, h, T, S) every layer's attention: a view that kept only its layer (the Python API's
        export("html") of it) reads them again, in a pass of their own."""
        return self.reads.attentions() if self.one_layer and self.reads is not None else self.attentions

    def export(self, fmt: str, target: str | Path, *, width: Optional[int] = None, option: str = "") -> None:
        export_with_page(self, fmt, target, width=width, option=option)


def page_of(result: PretrainedResult, classes: list, attentions: Optional[np.ndarray] = None) -> str:
    """The interactive page (attncli.views.page) opened on ``result``'s view, ``classes`` each head's,
    over ``attentions`` (L, h, T, S) (default: the result's)."""
    r, enc, keys = result.request, result.enc, result.keys
    key_count = len(keys.tokens) if keys is not None else len(enc.tokens)
    check_size(result.model.layers, result.model.heads, max(len(enc.tokens), key_count),
               any(enc.special) or (keys is not None and any(keys.special)),
               extra_size(result.model.heads, r.show, r.flow))
    block = r.filter if r.filter not in (None, "all") else None
    data = page_data(result.model, enc, result.attentions if attentions is None else attentions,
                     {**result.meta, "show": "weights", "flow": False},
                     classes, layer=result.layer, head=r.head, words=r.words,
                     hide_special=r.hide_special, rollout=r.rollout, block=block, model_view=r.model_view,
                     show=r.show, flow=r.flow, reads=result.reads, keys=keys)
    return interactive_page(data, result.title)


def export_with_page(result: PretrainedResult, fmt: str, target: str | Path, *, width: Optional[int] = None,
           option: str = "") -> None:
    """As the protocol's, but "html" is the interactive page (``attn matrix --html``)."""
    if fmt == "html" and not result.request.long:  # a long view's --html is its drawing, as --svg
        write_export(target, result.page(), option or "--html")
        return
    Result.export(result, fmt, target, width=width, option=option)


def cross_classes(result: ViewResult) -> list[list[dict[str, Any]]]:
    """Each cross-attention head's class on this input: its rows are the decoder's tokens, its keys
    the source's (separators: the source's special tokens after the first)."""
    keys = np.asarray(result.keys.special, dtype=bool)
    separators = keys.copy()
    separators[0] = False
    rows = ~np.asarray(result.enc.special, dtype=bool)
    report = classify([ScoredInput(result.attentions, queries=rows if rows.sum() >= 1 else ~rows,
                                   separators=separators if separators.any() else None)],
                      layers=result.model.layers, heads=result.model.heads, causal=False, window=3)
    out = [[{} for _ in range(result.model.heads)] for _ in range(result.model.layers)]
    for h in report["heads"]:
        score = h.get(h["label"])
        out[h["layer"]][h["head"]] = {"label": h["label"], "score": None if score is None else round(score, 4)}
    return out


def with_texts(explanation: dict[str, Any], enc) -> dict[str, Any]:
    """An ``--explain`` document with its query's and key's text beside their token ("text": " John"
    for "ĠJohn"), which the panel draws."""
    texts = texts_of(enc)
    for side in ("query", "key"):
        explanation[side]["text"] = texts[explanation[side]["index"]]
    return explanation
