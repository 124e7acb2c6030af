"""A pretrained transformer's attention in ``attn explore`` (``--transformer``): the app's state
made into the :class:`~attncli.pipeline.ViewRequest` that ``attn matrix --transformer`` builds,
computed by the same :func:`attncli.pipeline.compute_view` (so the app's numbers are the command's),
and the app's own views (the logit lens, a comparison, the causal tests G, D, R and E), which
replace the heatmap.

The model is loaded once per (name, backend) and kept; a forward pass runs in the app's worker.
What is drawn, exported and copied is the result's (attncli.pipeline.view_result: ViewResult,
ModelViewResult); the cursor's cell only adds ``--explain I J``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from attncli.attention.checkpoint_views import write_document
from attncli.explore import disabled_keys
from attncli.explore.causal_view import compute_causal, gradient_model
from attncli.explore.drawing import export_drawing, view_kind
from attncli.explore.head_map_view import compute_head_map
from attncli.explore.lens_compare import compute_compare, compute_lens
from attncli.pipeline.compute_view import compute as compute_view
from attncli.pipeline.compute_view import load_for
from attncli.pipeline.view_result import ModelViewResult, ViewResult
from attncli.views.explanation import explanation_renderables


class Split(NamedTuple):
    """The QK split of the cursor's cell as explore shows it (key Q: attncli.explore.qk_split)."""

    document: dict[str, Any]  # attn qk --json's document
    drawing: tuple  # its renderables, as the explanation panel draws them (the attn qk command line under them)


def check(state) -> None:
    """The refusals of ``attn matrix --transformer`` that need no model (the table's explore rows,
    then the request's one check)."""
    disabled_keys.check(state)
    state.view_request().check()


def compute(state, models: dict[tuple[str, str], Any]):
    """What ``attn matrix TEXT --transformer NAME [--pair ...] [--layer/--head/--words/--flow...]``
    computes (with ``--model-view [--layers A-B]``: every head of those layers; with ``state.lens``,
    ``state.compare_text`` or ``state.causal_view``: those views). ``models`` keeps each model
    loaded, by (name, backend)."""
    request = state.view_request()
    request.check()
    key = (state.transformer, state.backend)
    if key not in models:
        models[key] = load_for(request)
    model = models[key]
    if state.head_map is not None:  # H: attn heads --weights --role's head map
        return compute_head_map(model, state, models)
    if state.causal_view == "attribute":  # E: attn attribute's view, on the NumPy pass as the command
        return compute_causal(gradient_model(model, state, models), state)
    if state.causal_view is not None:  # G, D, R: attn ablate's, attn dla's or attn patch's view
        return compute_causal(model, state)
    if state.lens or state.compare_text is not None:  # L, C: attn lens's or attn compare's view
        return compute_lens(model, state) if state.lens else compute_compare(model, state)
    return compute_view(request, model)


def explain(res: ViewResult, state) -> Optional[dict[str, Any]]:
    """The ``--explain I J`` document of the cursor's cell, or None where the view has none."""
    if res.explainable() is not None:
        return None
    return res.explain(*res.input_cell(state.cursor))


def at_cursor(res: ViewResult, state) -> ViewResult:
    """The result with ``--explain I J`` of the cursor's cell, where the view has one."""
    if not isinstance(res, ViewResult) or res.explainable() is not None:
        return res
    return res.at_cell(res.input_cell(state.cursor))


def command_line(res, state) -> str:
    """The command of this view, with ``--explain I J`` of the cursor's cell (as input positions)
    where the command has an explanation; the panels' (lens, compare, G, D, R, E) their own."""
    if view_kind(res) == "panel":  # the lens, a comparison, G, D, R, E: the result's own
        return res.command_line()
    return at_cursor(res, state).command_line()


def renderables(res: ViewResult, state, width: int, *, cursor=None, cell_meta: bool = False,
                lines: bool = False) -> list:
    """The view's heatmaps as rich renderables, as ``attn matrix --transformer`` draws them."""
    return res.heatmaps(width, cursor=cursor, cell_meta=cell_meta, lines=lines)


def model_view_renderables(res: ModelViewResult, state, width: int, *, cursor=None, cell_meta: bool = False) -> list:
    """The model view's lines, as ``attn matrix --transformer ... --model-view`` draws them."""
    return res.heatmaps(width, cursor=cursor, cell_meta=cell_meta)


def export_text(res, state, fmt: str, width: int | None = None, split: Optional[Split] = None) -> str | bytes:
    """The view as .json (``attn matrix --transformer ... --json``'s document, with the cursor's
    --explain), .html (the interactive page), .svg or .png (the drawing and its command line).
    ``split``: the QK split on screen (key Q), added to the .json as "qk_split" (``attn qk --json``'s
    document) and drawn under the explanation in .svg and .png (and a long view's .html)."""
    if view_kind(res) == "panel":  # the logit lens, a comparison, G, D, R, E: the result protocol's
        return res.json_text() if fmt == ".json" else getattr(res, fmt[1:])(width)
    shown = at_cursor(res, state)
    if fmt == ".json":
        if split is None:
            return shown.json_text()
        parts: list[str] = []
        write_document({**shown.document(), "qk_split": split.document}, parts.append)
        return "".join(parts)
    if fmt == ".html" and not shown.request.long:  # a long view's .html is its drawing
        return shown.page()
    explained = explanation_renderables(shown.explanation) if shown.explanation is not None else []
    drawn = list(split.drawing) if split is not None else []
    return export_drawing(lambda w: [*shown.heatmaps(w), *explained, *drawn], shown.command_line(), res.enc.text, fmt,
                          width)
