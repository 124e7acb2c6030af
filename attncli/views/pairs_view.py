"""A causal test's mean over prompt pairs drawn (``--pairs FILE``): the mean grid as the single
pair's heatmap (PuOr, white at 0, every cell's number in it), "mean over N pairs" in the title;
a circuit's strongest edges as a one-column heatmap of their mean scores. Input: the document of
attncli.pipeline.pairs_document."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.io.textio import visible
from attncli.views.render import Heatmap, heatmap_renderables
from attncli.views.result import DocumentView


def pairs_heatmap(doc: dict[str, Any]) -> Heatmap:
    grid = np.asarray(doc["grid"], dtype=np.float64)  # (rows, columns)
    return Heatmap(grid, [visible(r) for r in doc["row_labels"]], [visible(c) for c in doc["column_labels"]],
                   doc["title"], diverging=True, notes=tuple(doc["notes"]), decimals=(3, 2, 1))


def pairs_renderables(doc: dict[str, Any], width: Optional[int] = None) -> list:
    return heatmap_renderables(pairs_heatmap(doc), width)


class PairsView(DocumentView):
    """A --pairs result (attncli.views.result's protocol)."""

    draw = staticmethod(pairs_renderables)
