"""A view of ``attn explore`` drawn for an export: the renderables and the command line under them,
recorded by rich (attncli.views.export); and :func:`view_kind`, which of the app's views a result
is: a pretrained model's view or model view (attncli.pipeline.view_result), a panel (any other
result of the protocol, attncli.views.result: the lens, a comparison, G, D, R and E, which replace the
heatmap and have no cursor), or the word vectors' matrix. One floor below the app's state and its views, so each of them
(state.py, checkpoint_state.py, lens_compare.py, causal_view.py) reaches it without a circle."""

from __future__ import annotations

from attncli.views.export import html_text, png_bytes, record, svg_text
from attncli.views.result import Result

PRETRAINED_KINDS = ("pretrained", "model_view", "panel")  # the views of a transformer
WORD_VECTORS = "word_vectors"
CAUSAL_VIEWS = {"ablate": ("G", "head ablation"), "dla": ("D", "direct logit attribution"),  # causal_view: key, name
                "patch": ("R", "activation patching"), "attribute": ("E", "attribution patching")}


def export_drawing(draw, command: str, text: str, fmt: str, width: int | None = None) -> str | bytes:
    """``draw(width)``'s renderables and the ``command`` line under them, recorded at ``width``
    columns, else as wide as the view needs, as SVG (titled by ``text``, offline fonts), HTML or
    PNG (bytes)."""
    console, parts = record(draw, width, command)
    title = f"attn explore: {text[:60]}"
    if fmt == ".html":
        return html_text(console)
    return png_bytes(console, parts, title) if fmt == ".png" else svg_text(console, title)


def view_kind(res) -> str:
    """"pretrained" or "model_view" (a ViewResult's kind), "panel" (another result: the lens, a
    comparison, G, D), else "word_vectors" (the word vectors' matrix)."""
    kind = getattr(res, "kind", None)
    if kind in ("pretrained", "model_view"):
        return kind
    return "panel" if isinstance(res, Result) else WORD_VECTORS


class Panel(Result):
    """A result of the app's own (G, D, R, E) that replaces the heatmap: its ``command`` is its command
    line."""

    command = ""

    @property
    def title(self) -> str:
        enc = getattr(self, "enc", None)
        return f"attn explore: {getattr(enc, 'text', '')[:60]}"

    def command_line(self) -> str:
        return self.command
