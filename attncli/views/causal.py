"""The causal tests drawn (``attn ablate``, ``attn patch``, ``attn dla``): a layers x heads (or
layers x positions) heatmap on PuOr, white at 0, every cell's signed number printed in it, so the
sign and size read without colour; DLA as a table of parts. Input: the JSON documents of
attncli/causal/documents.py. :class:`AblateResult`, :class:`PatchResult` and :class:`DlaResult` are
the three commands' results (attncli.views.result's protocol), made by attncli.pipeline.compute_causal;
:class:`AttributeResult` is ``attn attribute``'s (attncli.pipeline.compute_gradients)."""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.io.textio import token_label, visible
from attncli.views.render import Heatmap, abbreviate, heatmap_renderables
from attncli.views.result import DocumentView, Requested


def grid_heatmap(doc: dict[str, Any]) -> Heatmap:
    grid = np.asarray(doc["grid"], dtype=np.float64)  # (L, C)
    cols = doc["columns"]
    col_labels = [f"H{c}" for c in range(grid.shape[1])] if cols == "heads" else \
        [f"{t} {abbreviate(token_label(text), 8)}" for t, text in enumerate(doc.get("token_texts") or doc["tokens"])]
    rows = [visible(r) for r in doc["row_labels"]] if "row_labels" in doc else [f"L{l}" for l in range(grid.shape[0])]
    return Heatmap(grid, rows, col_labels, doc["title"], diverging=True,
                   notes=tuple(doc["notes"]), decimals=(3, 2, 1))


def grid_renderables(doc: dict[str, Any], width: int | None = None) -> list:
    return heatmap_renderables(grid_heatmap(doc), width)


def render_grid(console, doc: dict[str, Any]) -> None:
    for part in grid_renderables(doc, console.width):
        console.print(part)


def dla_renderables(doc: dict[str, Any], width: int | None = None) -> list:
    """The parts of the logit, largest first, and each head's per-token heatmap."""
    from rich.table import Table
    from rich.text import Text

    title = Text(visible(doc["title"]), style="table.title")  # wrapped to the terminal, not to the narrow table
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("part")
    table.add_column("direct contribution", justify="right")
    parts = sorted(doc["parts"], key=lambda p: -abs(p["value"]))
    for p in parts[:40]:
        table.add_row(visible(p["name"]), Text(f"{p['value']:+.4f}", style="bold" if p["value"] >= 0 else ""))
    out: list = [title, table, Text(f"sum of every part = {doc['sum']:+.6f}; the logit = {doc['logit']:+.6f}"
                             + (f" ({len(parts) - 40} smaller parts not listed: see --json)" if len(parts) > 40 else ""),
                             style="dim")]
    heads = np.asarray(doc["heads"], dtype=np.float64)  # (L, h)
    out += heatmap_renderables(Heatmap(heads, [f"L{l}" for l in range(heads.shape[0])],
                                       [f"H{h}" for h in range(heads.shape[1])], "each head's direct contribution",
                                       diverging=True, decimals=(3, 2, 1)), width)
    return out


def render_dla(console, doc: dict[str, Any]) -> None:
    for part in dla_renderables(doc, console.width):
        console.print(part)


class GridView(DocumentView):
    """``attn ablate`` or ``attn patch`` as a result (attncli.views.result): its layers x heads (or
    positions) grid."""

    draw = staticmethod(grid_renderables)


class DlaView(DocumentView):
    """``attn dla`` as a result: the parts of the logit and each head's heatmap."""

    draw = staticmethod(dla_renderables)


class AblateResult(Requested, GridView):
    """``attn ablate``'s result: layers x heads, the change in the target's measure."""


class PatchResult(Requested, GridView):
    """``attn patch``'s result: layers x positions (or heads), the fraction of the difference restored."""


class DlaResult(Requested, DlaView):
    """``attn dla``'s result: the parts of the logit and each head's heatmap."""


class AttributeResult(Requested, GridView):
    """``attn attribute``'s result: attn patch's grid, each cell estimated by attribution patching."""


RESULTS = {"ablate": AblateResult, "patch": PatchResult, "dla": DlaResult, "attribute": AttributeResult}


def causal_view(doc: dict[str, Any], **kwargs: Any) -> DocumentView:
    """The result of a causal document (``doc["command"]``: ablate, patch or dla)."""
    return (DlaView if doc["command"] == "dla" else GridView)(doc, **kwargs)


def causal_result(doc: dict[str, Any], request: Any) -> DocumentView:
    """The result of ``request`` (its ``command``: ablate, patch, dla or attribute), whose document is ``doc``."""
    return RESULTS[request.command](doc, request)
