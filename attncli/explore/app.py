"""The Textual app of ``attn explore``: the heatmap of :mod:`attncli.views.render`, the
explanation of the cell under the cursor (and its QK split, key Q: ``QKSplit``), a lookup pane,
the model view of a pretrained model (``ModelViewPane``), and keys for every setting (the
transformer's: ``TransformerKeys``).

Work that may take time (loading the word vectors, the matrix, a lookup, an export) runs in
thread workers, newest first (``exclusive``): the UI never waits on it. Every refusal of the core
(:class:`~attncli.errors.AttnError`) is shown as a message and the last good view stays; any other
exception in a worker is shown as an internal error, and the app keeps running.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Region
from textual.widgets import ContentSwitcher, Input, Static
from textual.widgets._toast import ToastRack

from attncli.attention.explain import explain
from attncli.attention import matrix as word_vector_matrix
from attncli.errors import AttnError, BadInput
from attncli.explore import checkpoint_state
from attncli.explore.causal_view import compute_on_builtin
from attncli.explore.footer import FooterModes, KeyFooter
from attncli.explore.keys import KEYS
from attncli.explore.lens_compare import panel_notes
from attncli.explore.lookup_pane import LookupPane
from attncli.explore.model_view_pane import ModelViewPane
from attncli.explore.qk_split import QKSplit
from attncli.explore.state import ExploreState
from attncli.explore.transformer_keys import TransformerKeys
from attncli.explore.view_keys import ViewKeys, kind_of
from attncli.explore.widgets import Drawing, HelpScreen, MatrixView  # noqa: F401 - HelpScreen: the app's, as tests name it
from attncli.io.textio import visible
from attncli.vectors.model import load_vectors
from attncli.views.explanation import explanation_renderables
from attncli.views.render import matrix_renderables

INLINE_WORDS = 64  # up to this many tokens a matrix takes milliseconds: no worker needed


class ExploreApp(LookupPane, ModelViewPane, TransformerKeys, QKSplit, ViewKeys, FooterModes):
    """``attn explore``: change the settings with keys, watch the matrix follow."""

    TITLE = "attn explore"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    CSS = """
    #inputs { height: auto; }
    #inputs Input { width: 1fr; height: 1; border: none; padding: 0 1; background: $boost; }
    #inputs Input:focus { background: $primary 30%; }
    Screen.-wide #inputs #sentence { margin-right: 1; }
    Screen.-narrow #inputs { layout: vertical; }
    #panels { height: 1fr; }
    #matrix-scroll { width: 1fr; }
    #explain-scroll { width: 1fr; border-left: solid $primary-darken-2; }
    Screen.-narrow #panels { layout: vertical; }
    Screen.-narrow #matrix-scroll { width: 1fr; height: 3fr; }
    Screen.-narrow #explain-scroll { width: 1fr; height: 2fr; border-left: none; border-top: solid $primary-darken-2; }
    #message { height: auto; max-height: 3; color: $text-muted; }
    #message.-error { color: $error; text-style: bold; }
    #settings { height: 1; background: $panel; color: $text; }
    #lookup-result { height: auto; }
    ContentSwitcher { height: 1fr; }
    ExportScreen, HelpScreen, CompareScreen { align: center middle; }
    #export, #compare { width: 80%; min-width: 36; max-width: 100; height: auto; border: thick $primary;
                        background: $surface; padding: 1; }
    #export Label, #compare Label { width: 1fr; }  /* a prompt wraps in a narrow terminal, never cut */
    #help { width: 90%; height: 90%; border: thick $primary; background: $surface; }
    .dim { color: $text-muted; }
    """
    # one binding per key; only Ctrl-C quits even from a box (q is typed into it); the footer's
    # keys change with the mode (_update_footer)
    BINDINGS = [Binding(key, k.action, k.label or k.help, show=bool(k.label), priority=key == "ctrl+c")
                for k in KEYS for key in k.key.split(",")]

    def __init__(self, state: ExploreState | None = None, *, vectors: Any = None, cwd: Path | None = None) -> None:
        super().__init__()
        self.state = state or ExploreState()
        self.good_state: ExploreState | None = None  # the settings of the matrix on screen
        self.result = None  # its MatrixResult
        self.explanation: dict | None = None
        self.lookup_result = None
        self.message = ""
        self.computing = False
        self.cwd = cwd or Path.cwd()
        self.last_export: Path | None = None
        self._vectors: dict[str | None, Any] = {} if vectors is None else {state.model if state else None: vectors}
        self._dictionary = None
        self._models: dict[tuple[str, str], Any] = {}  # pretrained transformers by (name, backend), loaded once each
        self.transformer_name = self.state.transformer  # what T switches to and from
        self._footer_mode = ""

    # ---------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="inputs"):
            yield Input(self.state.text, placeholder="sentence (queries)", id="sentence")
            if self.state.transformer is None:
                yield Input(self.state.context or "", placeholder="--context sentence (empty: self-attention)", id="context")
            else:
                yield Input(self.state.pair or "", placeholder="--pair sentence (one input with the first)", id="context")
        with ContentSwitcher(initial="matrix-pane"):
            with Horizontal(id="matrix-pane"):
                with Horizontal(id="panels"):
                    with VerticalScroll(id="matrix-scroll"):
                        yield MatrixView(Text("computing ..."), id="matrix")
                    with VerticalScroll(id="explain-scroll"):
                        yield Drawing(id="explain")
            with Vertical(id="lookup-pane"):
                yield Input(placeholder="lookup query, e.g. colour", id="query")
                with VerticalScroll(id="lookup-scroll"):
                    yield Drawing(Text("Type a query: its attention weights over the dictionary's keys appear here."),
                                  id="lookup-result")
        yield Static("", id="message")
        yield Static(Text(visible(self.state.summary())), id="settings")  # a Text: no markup in a path
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#matrix").focus()
        self.screen.screen_layout_refresh_signal.subscribe(self, self._lift_notices)
        self.recompute()

    def _lift_notices(self, screen=None) -> None:
        """Notices (Textual's toasts) stand above the message line, never over it: Textual docks
        them on the footer, and the message line, the settings and the footer's rows under it
        change height with what they say and the terminal's width."""
        main = self.screen_stack[0]
        lift = max(main.size.height - self.query_one("#message").region.y, 1)  # rows from the message line down
        for screen in self.screen_stack:
            for rack in screen.query(ToastRack):
                if rack.styles.margin.bottom != lift:
                    rack.styles.margin = (0, 0, lift, 0)

    def _fatal_error(self) -> None:
        """A bug outside the workers (they catch everything) still ends the app with the terminal
        restored (Textual does that), but with attn's one-line message instead of a traceback,
        as the command line does; ATTN_DEBUG=1 shows the traceback."""
        if os.environ.get("ATTN_DEBUG"):
            return super()._fatal_error()
        error = self._exception
        self._exit_renderables.append(Text.assemble(
            ("internal error: ", "bold red"), visible(f"{type(error).__name__}: {error}") + "\n",
            "This is a bug in attn; run again with ATTN_DEBUG=1 for the traceback."))
        self._close_messages_no_wait()

    # ---------------------------------------------------------------- computing

    def _vectors_for(self, model: str | None):
        if model not in self._vectors:
            self._vectors[model] = load_vectors(model)
        return self._vectors[model]

    def recompute(self, state: ExploreState | None = None) -> None:
        """Compute ``state`` (default: the current one); the newest request wins. A small matrix
        of loaded vectors (a few milliseconds) is computed at once; anything else (loading a
        model, a long text) in a thread worker, while the UI goes on."""
        if state is not None:
            self.state = state
        self.computing = True
        state = self.state
        words = len(state.text.split()) + len((state.context or "").split()) + (state.pad_to or 0)
        if state.transformer is None and state.causal_view is None and state.model in self._vectors and words <= INLINE_WORDS:
            self._finish(state, *self._compute_now(state))
        else:
            self._settings_line()
            if state.transformer is not None:  # a forward pass: the spinner until it is done
                self.query_one("#matrix-scroll").loading = True
            self._compute(state)

    def _compute_now(self, state: ExploreState) -> tuple[Any, str | None]:
        """(MatrixResult or a pretrained model's result, None) or (None, the message that refuses it)."""
        try:
            if state.transformer is not None:
                return checkpoint_state.compute(state, self._models), None
            if state.causal_view is not None:  # G, D, R, E without --transformer: on attn's built-in LM
                return compute_on_builtin(state, self._models), None
            return word_vector_matrix.compute(state.request(), vectors=self._vectors_for(state.model)), None
        except AttnError as exc:
            return None, str(exc)
        except Exception as exc:  # a bug: say so, keep the app
            return None, f"internal error: {type(exc).__name__}: {exc}"

    def _finish(self, state: ExploreState, res, message: str | None) -> None:
        if state == self.state:
            self.query_one("#matrix-scroll").loading = False
        if message is None:
            self._computed(state, res)
        else:
            self._refused(state, message)

    @work(thread=True, exclusive=True, group="matrix", exit_on_error=False)
    def _compute(self, state: ExploreState) -> None:
        self._from_thread(self._finish, state, *self._compute_now(state))

    def _from_thread(self, fn, *args, **kwargs) -> None:
        try:
            self.call_from_thread(fn, *args, **kwargs)
        except RuntimeError:  # the app is closing
            pass

    def _computed(self, state: ExploreState, res) -> None:
        if state != self.state:  # a newer request is on its way
            return
        if kind_of(res) == "model_view":
            state = replace(state, grid=res.grid_cell(state.grid))
        elif kind_of(res) != "panel":  # the lens, a comparison, G, D, R and E have no cursor: it waits
            T, S = self._shape(res)
            i, j = state.cursor
            state = replace(state, cursor=(min(i, T - 1), min(j, S - 1)))
        self.state = self.good_state = state
        self.result = res
        self.computing = False
        self._say("")
        self._draw()

    def _refused(self, state: ExploreState, message: str) -> None:
        if state != self.state:
            return
        self.computing = False
        if self.good_state is not None:
            self.state = self.good_state  # the settings on screen stay those of the view
        self._say(message, error=True)
        self._settings_line()
        if self.result is None:
            self.query_one("#matrix", MatrixView).show(Text(visible(message), style="bold red"))

    @staticmethod
    def _shape(res) -> tuple[int, int]:
        """Rows and columns the cursor moves over."""
        return res.shape if kind_of(res) == "pretrained" else res.attention.weights.shape

    def _draw(self) -> None:
        """The heatmap and the explanation of the cursor's cell (cheap: no recomputation)."""
        res, state = self.result, self.state
        view = self.query_one("#matrix", MatrixView)
        width = max((view.content_size.width or self.query_one("#matrix-scroll").size.width or self.size.width) - 1, 20)
        if kind_of(res) == "model_view":
            self._draw_model_view(view, width)
            return
        if kind_of(res) == "panel":  # the logit lens (L), a comparison (C), G, D, R, E
            view.show(*res.screen_renderables(width), width=width)
            self.explanation = None
            self.query_one("#explain", Drawing).show(*[Text(visible(note), style="dim") for note in panel_notes(res)])
            self._settings_line()
            return
        if kind_of(res) == "pretrained":
            view.show(*res.heatmaps(width, cursor=state.cursor, cell_meta=True, lines=True), width=width)
            self.explanation = checkpoint_state.explain(res, state)
            why = res.explainable()
            self.query_one("#explain", Drawing).show(*(explanation_renderables(self.explanation) if why is None
                                                       else [Text(visible(why), style="dim")]),
                                                     *self.qk_split_renderables())  # Q: the cell's QK split under it
            self._scroll_to_cursor(view)
            self._settings_line()
            return
        parts = matrix_renderables(res, width, state.show, cursor=state.cursor, cell_meta=True, lines=True)
        view.show(*parts, width=width)
        self._scroll_to_cursor(view)
        self.explanation = explain(res, *state.cursor)
        self.query_one("#explain", Drawing).show(*explanation_renderables(self.explanation))
        self._settings_line()

    def _scroll_to_cursor(self, view: MatrixView) -> None:
        self._scroll_to(view, "cell", self.state.cursor)

    def _scroll_to(self, view: MatrixView, meta_key: str, value) -> None:
        y = view.line_of(meta_key, value)
        if y is not None:  # keep the cursor's row in sight (a long sentence, a short terminal)
            scroll = self.query_one("#matrix-scroll")
            self.call_after_refresh(scroll.scroll_to_region, Region(0, max(y - 2, 0), 1, 5), animate=False)

    def _settings_line(self) -> None:
        busy = " · computing ..." if self.computing else ""
        line = self.state.summary() + self._grid_class()
        self.query_one("#settings", Static).update(Text(visible(line + busy), no_wrap=True, overflow="ellipsis"))
        self._update_footer()

    def _say(self, message: str, *, error: bool = False, toast: bool = True) -> None:
        """``message`` on the message line (an error in red, and as a toast unless ``toast`` is
        False); anything else (a success) clears the error toasts still on screen, now stale."""
        self.message = message
        widget = self.query_one("#message", Static)
        widget.update(Text(visible(message)))  # messages quote the user's sentences and paths
        widget.set_class(error, "-error")
        if error and toast:
            self.notify(visible(message), severity="error", timeout=6, markup=False)
        elif not error:
            self.clear_notifications()

    # ---------------------------------------------------------------- the inputs

    @on(Input.Submitted, "#sentence")
    def _sentence_submitted(self, event: Input.Submitted) -> None:
        self.recompute(replace(self.state, text=event.value))
        self.action_focus_matrix()

    @on(Input.Submitted, "#context")
    def _context_submitted(self, event: Input.Submitted) -> None:
        second = event.value if event.value.strip() else None
        self.recompute(replace(self.state, **{"pair" if self.state.transformer else "context": second}))
        self.action_focus_matrix()


def run(state: ExploreState) -> int:
    """Run the app in this terminal (refused without one, where Textual would spin); its return code."""
    import sys

    if not os.environ.get("TEXTUAL_DRIVER") and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput("attn explore needs a terminal (stdin and stdout are not one): run it in a terminal, "
                       "or serve it to a browser with --serve")
    app = ExploreApp(state)
    app.run()
    return app.return_code or 0
