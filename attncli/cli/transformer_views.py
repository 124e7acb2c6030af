"""The terminal view of a pretrained model's attention: one matrix (a head, a layer's heads, the
rollout, by token or by word) with its numbers (views.render; the heatmaps are built by
views.pretrained, shared with attn explore). The model view is drawn by views.model_view.
"""

from __future__ import annotations

from typing import Any, Optional


def view_renderables(view, meta: dict[str, Any], enc, row_span=None, col_span=None,
                     explanation: Optional[dict] = None, width: Optional[int] = None, *, long=None) -> list:
    """The view as rich renderables ``width`` columns wide (None: as wide as it needs, a file's).
    ``long``: (LongView or None, LongSpec, words) of attncli.attention.long_view: drawn by
    views.long_view (--top-k, --pool, and a matrix too wide to draw whole)."""
    from attncli.views.pretrained import pretrained_heatmaps
    from attncli.views.render import explanation_renderables, heatmap_renderables

    if long is not None:
        from attncli.views.long_view import long_renderables

        lv, spec, words = long
        parts = long_renderables(view, meta, enc, lv, spec, width, words=words, col_span=col_span)
    else:
        parts = [part for hm in pretrained_heatmaps(view, meta, enc, row_span, col_span)
                 for part in heatmap_renderables(hm, width)]
    return parts + (explanation_renderables(explanation) if explanation is not None else [])


def render_view(console, view, meta: dict[str, Any], enc, row_span=None, col_span=None,
                explanation: Optional[dict] = None, *, long=None) -> None:
    for part in view_renderables(view, meta, enc, row_span, col_span, explanation, console.width, long=long):
        console.print(part)
