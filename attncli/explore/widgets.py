"""The widgets of ``attn explore``: a drawing of rich renderables (the heatmap, the explanation,
the lookup table), the matrix view with its cursor keys, Enter and clicks, the help and export
screens, and the prompt for a comparison's second text."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from attncli.explore.keys import KEYS, help_rows


class Drawing(Widget):
    """Rich renderables drawn once into lines (Textual's line API) when they change: a redraw of
    the screen then costs nothing, where a Static would render its tables again for every
    measurement and refresh."""

    DEFAULT_CSS = "Drawing { height: auto; width: 1fr; }"

    def __init__(self, *parts, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts = list(parts)
        self._strips: list[Strip] = []
        self._drawn_width = 0

    def show(self, *parts, width: int | None = None) -> None:
        """Draw ``parts``; ``width``: the columns they were laid out for, when fewer than the
        widget's (a long line then wraps where ``attn matrix`` at that width wraps it)."""
        self._parts = list(parts)
        self._draw_lines(self.content_size.width, fit=width)

    def _draw_lines(self, width: int, fit: int | None = None) -> None:
        width = max(width, 20)
        wrap = width if fit is None else max(min(fit, width), 20)
        console = self.app.console
        lines = console.render_lines(Group(*self._parts), console.options.update_width(wrap), pad=False)
        base = self.rich_style  # the widget's colours under the drawing (computed once per drawing)
        self._strips = [Strip(line).apply_style(base) for line in lines]
        self._drawn_width = width
        self.refresh(layout=True)

    def on_resize(self, event) -> None:
        if event.size.width != self._drawn_width:
            self._draw_lines(event.size.width)

    def on_mount(self) -> None:
        self._draw_lines(self.content_size.width)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._strips)

    def render_line(self, y: int) -> Strip:
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.rich_style)

    def text(self) -> str:
        """What is drawn, as plain text (tests)."""
        return "\n".join(strip.text for strip in self._strips)

    def line_of(self, meta_key: str, value) -> int | None:
        """The first line with a segment whose style meta has ``meta_key == value``."""
        for y, strip in enumerate(self._strips):
            for segment in strip:
                if segment.style is not None and segment.style.meta.get(meta_key) == value:
                    return y
        return None


class MatrixView(Drawing, can_focus=True):
    """The heatmap; a click on a cell moves the cursor there. The arrows move the cursor here,
    before the scrolling container around it would take them."""

    BINDINGS = [Binding(k.key, f"app.{k.action}", k.help, show=False) for k in KEYS
                if k.action.startswith("move(") or k.action == "open_head"]

    def on_resize(self, event) -> None:
        if event.size.width != self._drawn_width and self.app.result is not None:
            self.app._draw()  # the heatmap fits its width: redo it, not just redraw it
        else:
            super().on_resize(event)

    def on_click(self, event) -> None:
        meta = event.style.meta if event.style else {}
        if meta.get("cell") is not None:
            self.app.set_cursor(*meta["cell"])
        elif meta.get("grid") is not None:  # a head of the model view
            self.app.set_grid(*meta["grid"])


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark,f1", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        table = Table(title="attn explore: keys", title_justify="left", expand=True)
        table.add_column("key", no_wrap=True, style="bold")
        table.add_column("what it does")
        for shown, text in help_rows():
            table.add_row(Text(shown), Text(text))
        with VerticalScroll(id="help"):
            yield Static(table, id="help-keys")
            yield Static("Every view is what `attn matrix` prints for the same options: y copies that command. "
                         "Esc closes this help.", classes="dim")


class ExportScreen(ModalScreen[str | None]):
    """Asks where to export; the name's suffix (.svg, .html, .png, .json) picks the format."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="export"):
            yield Label("Export the view to (.svg, .html, .png or .json; relative to the current directory):")
            yield Input(self.default, id="export-path")
            yield Label("Enter writes it, Esc cancels.", classes="dim")

    @on(Input.Submitted, "#export-path")
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class CompareScreen(ModalScreen[str | None]):
    """Asks for the second text of a comparison (key C: attn compare's TEXT_B)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="compare"):
            yield Label("Compare the sentence with (a second text; its attention at the same layer and head):")
            yield Input(self.default, placeholder="e.g. fruit flies like a banana", id="compare-text")
            yield Label("Enter compares, Esc cancels.", classes="dim")

    @on(Input.Submitted, "#compare-text")
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
