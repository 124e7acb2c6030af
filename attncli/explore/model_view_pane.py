"""The model view in ``attn explore --transformer`` (``M``, or ``--model-view`` at the start):
every layer x head of the input as small shaded maps (the drawing of ``attn matrix
--model-view``), a cursor over the heads (arrows, ``[`` ``]`` ``{`` ``}``, a click), and Enter
(or ``M`` again) to open the head under it in the ordinary view. Part of the app."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.app import App

from attncli.explore.state import ExploreState
from attncli.explore.view_keys import WORD_VECTORS, kind_of
from attncli.explore.widgets import Drawing
from attncli.io.textio import texts_of
from attncli.io.textio import token_label
from attncli.views.model_view import class_text, layer_maps, shown_positions, strongest


class ModelViewPane(App):
    """The model view's part of the app (ExploreApp derives from it)."""

    def _in_model_view(self) -> bool:
        """The model view is on screen and is the current state's (the grid's cursor keys apply)."""
        return self.state.model_view and kind_of(self.result) == "model_view" and not self.computing

    def _draw_model_view(self, view, width: int) -> None:
        res, state = self.result, self.state
        grid = res.grid_cell(state.grid)
        view.show(*res.heatmaps(width, cursor=grid, cell_meta=True), width=width)
        self.explanation = None
        self.query_one("#explain", Drawing).show(*grid_panel(res, state, grid))
        self._scroll_to(view, "grid", grid)
        self._settings_line()

    def _grid_class(self) -> str:
        """' · CLASS SCORE' of the head under the model view's cursor, for the status line ('' elsewhere)."""
        res, grid = self.result, self.state.grid
        if not (self.state.model_view and kind_of(res) == "model_view" and grid is not None):
            return ""
        layer, head = res.grid_cell(grid)
        return f" · {class_text(res.classes[layer][head])}"

    def _move_grid(self, dl: int, dh: int) -> None:
        layer, head = self.result.grid_cell(self.state.grid)
        self._put_grid(layer + dl, head + dh)

    def set_grid(self, layer: int, head: int) -> None:
        """A click on a head of the model view moves the cursor there."""
        if self._in_model_view():
            self._put_grid(layer, head)

    def _put_grid(self, layer: int, head: int) -> None:
        """The model view's cursor on (layer, head), kept within the heads drawn (``grid_cell``)."""
        self.state = self.good_state = replace(self.state, grid=self.result.grid_cell((layer, head)))
        self._draw()

    def action_model_view(self) -> None:
        """M: the model view, its cursor on this view's layer and head; in the model view, the head
        under the cursor in the ordinary view (as Enter)."""
        if not self._transformer_only("--model-view") or kind_of(self.result) == WORD_VECTORS:
            return
        if self.state.model_view:
            self.action_open_head()
            return
        layers = self.result.model.layers
        self.recompute(self.state.enter_model_view(layers - 1 if self.state.layer is None else self.state.layer))

    def action_open_head(self) -> None:
        """Enter in the model view: the head under the cursor in the ordinary view (--layer L --head H)."""
        if self._in_model_view():
            self.recompute(self.state.open_head(self.result.grid_cell(self.state.grid)))


def grid_panel(res, state: ExploreState, grid: tuple[int, int]) -> list:
    """Beside the model view: the head under the cursor, its class and its strongest cell."""
    layer, head = grid
    tokens = [token_label(texts_of(res.enc)[t]) for t in shown_positions(res.enc, state.hide_special)]
    m = layer_maps(res.attentions, layer, res.enc, state.hide_special)[head]  # (T, T)
    return [Text(f"layer {layer} head {head}: {class_text(res.classes[layer][head])}", style="bold"),
            Text(f"strongest cell: {strongest(m, tokens)}"),
            Text("arrows (or a click) move over the heads; Enter or M opens this one in the ordinary view "
                 f"(attn matrix ... --layer {layer} --head {head})", style="dim")]
