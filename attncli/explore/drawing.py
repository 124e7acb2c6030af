"""A view of ``attn explore`` drawn for an export: the renderables and the command line under them,
recorded by rich (attncli.views.export); and :class:`Panel`, what the app's panels (the lens, a
comparison, G and D) share. One floor below the app's state and its views, so each of them
(state.py, checkpoint_state.py, lens_compare.py, causal_view.py) reaches it without a circle."""

from __future__ import annotations

from attncli.views.export import html_text, png_bytes, record, svg_text


def export_drawing(draw, command: str, text: str, fmt: str, width: int | None = None) -> str | bytes:
    """``draw(width)``'s renderables and the ``command`` line under them, recorded at ``width``
    columns, else as wide as the view needs, as SVG (titled by ``text``, offline fonts), HTML or
    PNG (bytes)."""
    console, parts = record(draw, width, command)
    title = f"attn explore: {text[:60]}"
    if fmt == ".html":
        return html_text(console)
    return png_bytes(console, parts, title) if fmt == ".png" else svg_text(console, title)


class Panel:
    """A view of a transformer that replaces the heatmap and has no cursor: the whole view is one
    drawing (its ``kind`` is one of explore.state.PRETRAINED_KINDS)."""

    kind = "panel"
    is_pretrained = True
    is_model_view = False
