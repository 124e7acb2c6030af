"""A pretrained transformer's attention in ``attn explore`` (``--transformer``): the same steps as
``attn matrix --transformer`` (load, encode, every layer's attentions, the view of one head, a
layer's heads or the rollout, special tokens hidden, pieces merged into words; or, with
``--model-view``, every head of a range of layers with its class), as plain data.

The model is loaded once per name and kept; a forward pass runs in the app's worker. Shapes: L
layers, h heads, T input tokens, R x C the view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from attncli.attention import long_view as lvm
from attncli.errors import BadInput
from attncli.explore import disabled_keys


@dataclass
class PretrainedResult:
    is_pretrained = True
    is_model_view = False
    model: Any
    enc: Any
    layer: int
    meta: dict[str, Any]
    view: Any  # attncli.attention.pretrained.PretrainedView
    attentions: np.ndarray  # (L, h, T, T)
    qk: Optional[tuple[np.ndarray, np.ndarray]]  # the layer's (h, T, d_head) queries and keys, numpy backend
    values: Optional[tuple[np.ndarray, np.ndarray]] = None  # --show norms: the layer's A (h, T, T), f(x) (h, T, d)
    long: Any = None  # (LongView or None, LongSpec): --rows / --top-k / --pool (attncli.attention.long_view)

    @property
    def long_view(self):
        return self.long[0] if self.long is not None else None

    @property
    def shape(self) -> tuple[int, int]:
        lv = self.long_view
        if lv is not None:  # the cursor moves over the pooled matrix, or the rows' ranked keys
            return lv.pooled.weights.shape if lv.pooled is not None else lv.top.keys.shape  # (P, Q) or (R, K)
        m = self.view.words.weights if self.view.words is not None else self.view.weights
        return m.shape  # (R, C)

    def input_cell(self, state) -> tuple[int, int]:
        """The cursor's cell as input positions (query, key): what ``attn matrix --explain I J`` takes
        (the view's rows and columns are a subset of them with --filter)."""
        return int(self.view.rows[state.cursor[0]]), int(self.view.cols[state.cursor[1]])

    def explainable(self, state) -> Optional[str]:
        """None when a cell of this view can be explained, else why not."""
        if self.long_view is not None:
            return "no explanation of a cell with --top-k or --pool (a cell there is no single query and key)"
        if state.norms and self.values is not None:
            return None
        if self.qk is None:
            return "the explanation of a cell needs attn's NumPy forward pass (BERT and GPT-2 families)"
        for flag, option in ((state.words, "--words"), (state.rollout, "--rollout"), (state.hide_special, "--hide-special"),
                             (state.flow, "--flow")):
            if flag:
                return f"no explanation of a cell with {option} (attn matrix --explain I J takes one head's input positions)"
        return None


@dataclass
class ModelViewResult:
    """What ``attn matrix --transformer ... --model-view [--layers A-B]`` computes: every head of
    layers lo..hi-1 and each head's class on the input."""

    is_pretrained = True
    is_model_view = True
    model: Any
    enc: Any
    meta: dict[str, Any]
    attentions: np.ndarray  # (L, h, T, T)
    lo: int
    hi: int
    classes: list[list[dict[str, Any]]]  # [layer][head]: {"label", "score"}

    def grid_cell(self, grid: Optional[tuple[int, int]]) -> tuple[int, int]:
        """``grid`` (layer, head) within the view (None: the first head of the first layer)."""
        layer, head = grid if grid is not None else (self.lo, 0)
        return min(max(layer, self.lo), self.hi - 1), min(max(head, 0), self.model.heads - 1)


def check(state) -> None:
    """The refusals of ``attn matrix --transformer`` that need no model (attncli.option_conflicts)."""
    disabled_keys.check(state)


def compute(state, models: dict[tuple[str, str], Any]):
    """What ``attn matrix TEXT --transformer NAME [--pair ...] [--layer/--head/--words/--flow...]``
    computes (with ``--model-view [--layers A-B]``: every head of those layers; with ``state.lens``
    or ``state.compare_text``: attncli.explore.lens_compare's views). ``models`` keeps each model
    loaded, by (name, backend)."""
    from attncli.attention import pretrained as pv

    check(state)
    pv.check_texts(state.text, state.pair)
    spec = long_spec(state)
    key = (state.transformer, state.backend)
    if key not in models:
        from attncli.transformer import load

        models[key] = load(state.transformer, backend=state.backend, allow_missing_weights=state.allow_missing_weights)
    model = models[key]
    if state.causal_view is not None:  # G, D: attn ablate's or attn dla's view
        from attncli.explore.causal_view import compute_causal

        return compute_causal(model, state)
    if state.lens or state.compare_text is not None:  # L, C: attn lens's or attn compare's view
        from attncli.explore.lens_compare import compute_compare, compute_lens

        return compute_lens(model, state) if state.lens else compute_compare(model, state)
    layer = pv.layer_shown(model, state.layer, state.head)
    enc = model.encode(state.text, pair=state.pair, truncate=state.truncate)
    if state.flow:
        from attncli.attention.flow import check_tokens

        check_tokens(len(enc.ids))  # before the forward pass
    from attncli.transformer.reads import Reads, view_sites

    # one traced pass: the patterns, and this layer's q, k (--explain) and v (norms)
    reads = Reads(model, enc, view_sites(model.layers, layer, qk=model.backend == "numpy" and not state.model_view,
                                         values=state.norms and not state.model_view))
    attentions = reads.attentions()  # (L, h, T, T)
    block = state.pair_filter or "all"
    meta = pv.view_meta(model, enc, layer=layer, head=state.head, rollout=state.rollout, block=block,
                        hide_special=state.hide_special, words=state.words, flow=state.flow)
    if state.model_view:
        from attncli.attention.model_view import head_classes, layer_range

        lo, hi = layer_range(state.layers, model.layers)
        return ModelViewResult(model, enc, meta, attentions, lo, hi,
                               head_classes(model, enc, attentions, state.hide_special))
    positions = lvm.row_positions(spec.rows, enc) if spec.rows is not None else None  # (R,) input positions
    shown, at, combined, values = attentions, layer, None, None
    if state.norms:  # as attn matrix --show norms
        from attncli.attention import value_norms

        values = reads.value_vectors(layer)  # (h, T, T), (h, T, d)
        shown, at, combined = value_norms.head_norms(*values)[None], 0, value_norms.summed_norms(*values)
        meta["show"] = "norms"
    view = pv.select(shown, layer=at, head=state.head, rollout=state.rollout, hide_special=state.hide_special,
                     block=block, words=state.words, tokens=enc.tokens, segments=enc.segments,
                     special=enc.special, word_ids=enc.word_ids, word_texts=enc.words, combined=combined,
                     flow=state.flow, query_rows=positions)
    if view.weights.size == 0:
        raise BadInput("the view is empty: no token is left after --hide-special or --filter")
    qk = None
    if model.backend == "numpy" and not getattr(model.arch, "position_bias", False):
        qk = reads.qk(layer)  # (h, T, d_head) each
    long = None
    if spec:
        if positions is not None:
            view.notes.append(lvm.rows_note(spec.rows, positions, len(enc.ids), computed=False))
        long = (lvm.apply_long_view(view, spec, enc, words=state.words), spec)
    return PretrainedResult(model, enc, layer, meta, view, attentions, qk, values, long)


def long_spec(state):
    """The long-text options of ``state`` (attncli.attention.long_view), checked."""
    spec = lvm.LongSpec(rows=getattr(state, "rows", None), top_k=getattr(state, "top_k", None),
                        pool=getattr(state, "pool", None))
    lvm.check_view(spec, model_view=state.model_view, show="norms" if state.norms else "weights", flow=state.flow,
                   words=state.words)
    return spec


def explain(res: PretrainedResult, state) -> Optional[dict[str, Any]]:
    """The ``--explain I J`` document of the cursor's cell, or None where the view has none."""
    from attncli.attention import pretrained as pv

    if res.explainable(state) is not None:
        return None
    i, j = res.input_cell(state)
    if state.norms and res.values is not None:
        from attncli.attention.value_norms import explain_norm

        return explain_norm(*res.values, res.enc.tokens, i, j, head=state.head)
    q, k = res.qk
    return pv.explain_cell(q, k, res.model.scale(res.layer), bool(res.model.is_decoder), res.attentions[res.layer],
                           res.enc.tokens, i, j, head=state.head)


def command_line(res: PretrainedResult, state) -> str:
    """The ``attn matrix --transformer`` command of this view, with ``--explain I J`` of the cursor's
    cell (as input positions) where the command has an explanation."""
    if getattr(res, "command", None):  # G, D: the command with the target the view measured
        return res.command
    if res.is_model_view or getattr(res, "is_panel", False):
        return state.command_line(explain=False)
    explained = res.explainable(state) is None
    return state.command_line(explained, res.input_cell(state) if explained else None)


def renderables(res: PretrainedResult, state, width: int, *, cursor=None, cell_meta: bool = False,
                lines: bool = False) -> list:
    """The view's heatmaps as rich renderables, as ``attn matrix --transformer`` draws them."""
    from attncli.views.pretrained import pretrained_heatmaps
    from attncli.views.render import heatmap_renderables

    if getattr(res, "long_view", None) is not None:  # --top-k / --pool (views.long_view); no cursor drawn
        from attncli.views.long_view import long_renderables

        lv, spec = res.long
        return long_renderables(res.view, res.meta, res.enc, lv, spec, width, words=state.words, auto=False)
    return [part for hm in pretrained_heatmaps(res.view, res.meta, res.enc, cursor=cursor, cell_meta=cell_meta)
            for part in heatmap_renderables(hm, width, lines=lines)]


def export_text(res: PretrainedResult, state, fmt: str, width: int | None = None) -> str | bytes:
    """The view as .json (``attn matrix --transformer ... --json``'s document), .svg or .html."""
    if getattr(res, "is_panel", False):  # the logit lens, a comparison
        from attncli.explore.lens_compare import export_panel

        return export_panel(res, state, fmt, width)
    if res.is_model_view:
        return model_view_export(res, state, fmt, width)
    explanation = explain(res, state)
    if fmt == ".json":
        from attncli.attention import pretrained as pv

        doc = pv.document(res.view, res.meta, segments=res.enc.segments, special=res.enc.special,
                          explanation=explanation)
        if getattr(res, "long", None) is not None:
            lvm.long_document(doc, res.long[0], res.view, res.enc, res.long[1], words=state.words)
        parts: list[str] = []
        pv.write_document(doc, parts.append)
        return "".join(parts)
    if fmt == ".html" and getattr(res, "long", None) is None:  # a long view's .html is its drawing
        return page_export(res, state, None, model_view=False)
    from attncli.explore.state import export_drawing
    from attncli.views.render import explanation_renderables

    explained = explanation_renderables(explanation) if explanation is not None else []
    return export_drawing(lambda w: [*renderables(res, state, w), *explained], command_line(res, state),
                          res.enc.text, fmt, width)


def model_view_renderables(res: ModelViewResult, state, width: int, *, cursor=None, cell_meta: bool = False) -> list:
    """The model view's lines, as ``attn matrix --transformer ... --model-view`` draws them."""
    from attncli.views.model_view import model_view_renderables as lines

    return lines(res.model, res.enc, res.attentions, res.lo, res.hi, width, hide_special=state.hide_special,
                 classes=res.classes, cursor=cursor, cell_meta=cell_meta)


def model_view_export(res: ModelViewResult, state, fmt: str, width: int | None = None) -> str | bytes:
    """The model view as .json (``attn matrix ... --model-view --json``'s document), .svg or .html
    (its drawing at ``width`` columns, None: as wide as it needs, and the command line)."""
    if fmt == ".json":
        from attncli.attention.model_view import model_view_document
        from attncli.attention.pretrained import write_document

        parts: list[str] = []
        write_document(model_view_document(res.model, res.enc, res.attentions, res.meta, res.lo, res.hi, res.classes),
                       parts.append)
        return "".join(parts)
    if fmt == ".html":
        return page_export(res, state, res.classes, model_view=True)
    from attncli.explore.state import export_drawing

    return export_drawing(lambda w: model_view_renderables(res, state, w), command_line(res, state),
                          res.enc.text, fmt, width)


def page_export(res, state, classes, *, model_view: bool) -> str:
    """The .html export of a pretrained view: the interactive page ``attn matrix --transformer ...
    --html`` writes (attncli.views.page), opened on the same view."""
    from attncli.attention.model_view import head_classes
    from attncli.views.page import check_size, extra_size, interactive_page, page_data

    show = "norms" if state.norms else "weights"
    check_size(res.model.layers, res.model.heads, len(res.enc.tokens), any(res.enc.special),
               extra_size(res.model.heads, show, state.flow))
    if classes is None:
        classes = head_classes(res.model, res.enc, res.attentions, state.hide_special)
    block = state.pair_filter if state.pair_filter not in (None, "all") else None
    data = page_data(res.model, res.enc, res.attentions, {**res.meta, "show": "weights", "flow": False}, classes,
                     layer=res.meta["layer"], head=state.head, words=state.words, hide_special=state.hide_special,
                     rollout=state.rollout, block=block, model_view=model_view, show=show, flow=state.flow)
    return interactive_page(data, f"attn matrix: {res.enc.text[:60]}")
