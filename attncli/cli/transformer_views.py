"""The terminal view of a pretrained model's attention: one matrix (a head, a layer's heads, the
rollout, by token or by word) with its numbers (views.render; the heatmaps are built by
views.pretrained, shared with attn explore). The model view is drawn by views.model_view.
"""

from __future__ import annotations

from typing import Any, Optional


def render_view(console, view, meta: dict[str, Any], enc, row_span=None, col_span=None,
                explanation: Optional[dict] = None) -> None:
    from attncli.views.pretrained import pretrained_heatmaps
    from attncli.views.render import render_explanation, render_heatmap

    for hm in pretrained_heatmaps(view, meta, enc, row_span, col_span):
        render_heatmap(console, hm)
    if explanation is not None:
        render_explanation(console, explanation)
