"""The keys of ``attn explore`` that act on the view on screen: the word-vector matrix's settings
(v c w a p n; s / S also a transformer's --show), the cursor (arrows, a click), the panes, copy
(y), export (x) and help. Part of the app (ExploreApp derives from it); which keys apply is read
from the kind of the result (attncli.explore.drawing.view_kind: "pretrained", "model_view", "panel",
"word_vectors")."""

from __future__ import annotations

from dataclasses import replace

from textual import work
from textual.app import App
from textual.widgets import ContentSwitcher, Input

from attncli.errors import AttnError
from attncli.explore import checkpoint_state
from attncli.explore.drawing import PRETRAINED_KINDS, WORD_VECTORS, view_kind
from attncli.explore.state import DEFAULT_EXPORT, ExploreState, export
from attncli.explore.widgets import ExportScreen, HelpScreen
from attncli.io.textio import visible

kind_of = view_kind  # the kind of view a result is (attncli.explore.drawing)


class ViewKeys(App):
    """The view's keys (ExploreApp derives from it)."""

    def _n_keys(self) -> int:
        return self.result.n_real_keys if self.result is not None else 1

    def _word_vectors_only(self, what: str) -> bool:
        """True in the word-vector view; in a transformer's, says why the key does nothing."""
        if self.state.transformer is None:
            return True
        self._say(f"{what} belongs to the word-vector matrix; the pretrained model's attention is its own "
                  "(T switches back)", error=True)
        return False

    def action_variant(self, step: int) -> None:
        if self._word_vectors_only('variant'):
            self.recompute(self.state.next_variant(step))

    def action_causal(self) -> None:
        if self._word_vectors_only('causal'):
            self.recompute(self.state.toggle_causal())

    def action_window(self, step: int) -> None:
        if self._word_vectors_only('window'):
            self.recompute(self.state.step_window(step))

    def action_pad(self, step: int) -> None:
        if self._word_vectors_only('pad'):
            self.recompute(self.state.step_pad_to(step, self._n_keys()))

    def action_projection(self, step: int) -> None:
        if self._word_vectors_only('projection'):
            self.recompute(self.state.next_projection(step))

    def action_positions(self) -> None:
        if self._word_vectors_only('positions'):
            self.recompute(self.state.toggle_positions())

    def action_show(self, step: int) -> None:
        """s / S: the word vectors' weights, scores or output; a transformer's weights, scores
        (before the softmax) or value norms (--show), a new pass each."""
        if self.state.transformer is not None:
            self.recompute(self.state.next_transformer_show(step))
            return
        state = self.state.next_show(step)
        if self.result is not None and not self.computing:
            self.state = self.good_state = state  # same matrix, another view of it
            self._draw()
        else:
            self.recompute(state)

    def action_move(self, di: int, dj: int) -> None:
        if self.result is None or self.computing:
            return
        if self._in_model_view():  # up / down: layers, left / right: heads
            self._move_grid(di, dj)
            return
        if kind_of(self.result) != "pretrained" and kind_of(self.result) != WORD_VECTORS:  # no cursor there
            return
        self.state = self.good_state = self.state.move_cursor(di, dj, self._shape(self.result))
        self._draw()

    def set_cursor(self, i: int, j: int) -> None:
        if self.result is None or self.computing or kind_of(self.result) not in ("pretrained", WORD_VECTORS):
            return
        self.state = self.good_state = replace(self.state, cursor=(0, 0)).move_cursor(i, j, self._shape(self.result))
        self._draw()

    def action_edit(self, which: str) -> None:
        self.action_pane("matrix")
        self.query_one(f"#{which}", Input).focus()

    def action_focus_matrix(self) -> None:
        self.query_one("#matrix").focus()

    def action_pane(self, name: str) -> None:
        self.query_one(ContentSwitcher).current = f"{name}-pane"
        self.query_one("#query" if name == "lookup" else "#matrix").focus()
        self._update_footer()

    def action_copy(self) -> None:
        if kind_of(self.result) in PRETRAINED_KINDS:
            command = checkpoint_state.command_line(self.result, self.good_state or self.state)  # the view on screen's
        else:
            command = self.state.command_line()
        self.copy_to_clipboard(command)
        self.notify(visible(command), title="copied: the attn matrix command of this view", timeout=10, markup=False)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_export(self) -> None:
        if self.result is None:
            self._say("nothing to export yet: the matrix has not been computed", error=True)
            return
        self.push_screen(ExportScreen(str(self.last_export or DEFAULT_EXPORT)), self._export_to)

    def _export_to(self, given: str | None) -> None:
        if given is not None:
            self._export(self.result, self.state, given, self.split_shown())

    @work(thread=True, exclusive=True, group="export", exit_on_error=False)
    def _export(self, res, state: ExploreState, given: str, split: checkpoint_state.Split | None = None) -> None:
        try:
            path = export(res, state, given, self.cwd, split=split)  # laid out for the file, not this window
        except AttnError as exc:
            self._from_thread(self._say, str(exc), error=True)
        except Exception as exc:
            self._from_thread(self._say, f"internal error: {type(exc).__name__}: {exc}", error=True)
        else:
            self.last_export = path
            self._from_thread(self._say, f"wrote {path}")
            self._from_thread(self.notify, visible(str(path)), title="exported", markup=False)
