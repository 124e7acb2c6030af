"""The footer of ``attn explore``: the keys that work in the current mode (the word-vector matrix,
a transformer's view, its model view, the lookup pane; ``keys.FOOTER``), laid out on at most two
rows of the terminal's width (:class:`KeyFooter`; what does not fit is left out from the end of the
mode's list, and "? help" says how many keys it lists beside them), and Esc, which leaves a box.
Part of the app (ExploreApp derives from it)."""

from __future__ import annotations

from dataclasses import replace

from textual.app import App, ComposeResult
from textual.containers import HorizontalGroup
from textual.widgets import ContentSwitcher, Footer, Input
from textual.widgets._footer import FooterKey

from attncli.explore.keys import CORRUPT_FOOTER, FOOTER, KEYS


FOOTER_ROWS = 2  # at most: the rest of the screen is the view's


def hint_width(key: str, label: str) -> int:
    """Columns of a footer hint (Textual's FooterKey: a space, the key, a space, the label, a space)."""
    return len(key) + len(label) + 3


def fit_hints(hints: list[tuple[str, str]], width: int, rows: int = FOOTER_ROWS,
              help_at: int = 1) -> tuple[list[list[int]], int]:
    """The hints ((key, label), most important first; ``hints[help_at]`` is help's) laid out on
    at most ``rows`` rows of ``width`` columns: (the rows, as indices into ``hints``; how many
    were left out). What does not fit is left out from the end; help's label then grows by
    " +N more", and room is made for that too.

    >>> fit_hints([("q", "quit"), ("?", "help"), ("e", "sentence")], 20, rows=1)
    ([[0, 1]], 1)
    """

    def lay_out(n: int, extra: int) -> list[list[int]] | None:
        laid: list[list[int]] = [[]]
        used = 0
        for i in range(n):
            w = hint_width(*hints[i]) + (extra if i == help_at else 0)
            if laid[-1] and used + w > width:
                laid.append([])
                used = 0
            laid[-1].append(i)
            used += w
        return laid if len(laid) <= rows else None

    for n in range(len(hints), help_at, -1):
        hidden = len(hints) - n
        laid = lay_out(n, len(more(hidden)))
        if laid is not None:
            return laid, hidden
    return [list(range(min(help_at + 1, len(hints))))], max(len(hints) - help_at - 1, 0)  # a terminal too narrow for less


def more(hidden: int) -> str:
    """What help's label gains when ``hidden`` keys are left out of the footer."""
    return f" +{hidden} more" if hidden else ""


class KeyFooter(Footer):
    """Textual's Footer (its keys click, a disabled one is greyed) on up to two rows: every key of
    the mode where they fit, else the first ones and "? help +N more" (the help lists them all)."""

    DEFAULT_CSS = """
    KeyFooter { layout: vertical; height: auto; max-height: 2; }
    KeyFooter > HorizontalGroup { height: 1; width: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__(show_command_palette=False)  # ctrl+p still opens it; its hint is not worth 12 columns
        self._laid_width = 0

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        shown: dict[str, tuple] = {}  # action -> its first binding, as Footer groups them
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in shown:
                shown[binding.action] = (binding, enabled, tooltip)
        ordered = list(shown.values())  # the mode's order (FooterModes._update_footer), quit and help first
        hints = [(self.app.get_key_display(b), b.description) for b, _, _ in ordered]
        help_at = next((i for i, (b, _, _) in enumerate(ordered) if b.action == "help"), 0)
        self._laid_width = self.size.width or self.app.size.width
        laid, hidden = fit_hints(hints, self._laid_width, help_at=help_at)
        for row in laid:
            with HorizontalGroup():
                for i in row:
                    binding, enabled, tooltip = ordered[i]
                    label = binding.description + (more(hidden) if i == help_at else "")
                    yield FooterKey(binding.key, hints[i][0], label, binding.action, disabled=not enabled,
                                    tooltip=tooltip).data_bind(compact=Footer.compact)

    def on_resize(self, event) -> None:
        """A new width lays the hints out again (the app's redraw after a resize also refreshes the
        bindings, which recomposes the footer; this does not lean on it)."""
        if event.size.width != self._laid_width:
            self.call_after_refresh(self.recompose)


class FooterModes(App):
    """The footer's keys per mode, and Esc (ExploreApp derives from it)."""

    def footer_mode(self) -> str:
        """'lookup', 'model view', 'transformer' or 'word-vector': what the footer lists keys for."""
        if self.query_one(ContentSwitcher).current == "lookup-pane":
            return "lookup"
        if self.state.model_view and getattr(self.result, "kind", None) == "model_view":
            return "model view"
        return "transformer" if self.state.transformer is not None else "word-vector"

    def _update_footer(self) -> None:
        """Show in the footer the keys that work in this mode (keys.FOOTER), and only those."""
        mode = self.footer_mode()
        if mode == self._footer_mode:
            self.refresh_bindings()  # the keys the options table disables change with the state
            return
        self._footer_mode = mode
        shown = dict(FOOTER[mode])
        if mode in ("word-vector", "transformer") and self.state.corrupt is not None:  # R and E after quit, help
            shown = {**dict(list(shown.items())[:2]), **CORRUPT_FOOTER, **shown}
        if mode == "word-vector" and self.transformer_name is not None:
            shown["transformer"] = "transformer"
        ours = {(key, k.action) for k in KEYS for key in k.key.split(",")}  # not Textual's own ctrl+q
        table = self._bindings.key_to_bindings
        for key, bindings in table.items():
            table[key] = [replace(b, show=b.action in shown and key != "ctrl+c",  # "q quit", not "^c quit"
                                  description=shown.get(b.action, b.description))
                          if (key, b.action) in ours else b for b in bindings]
        # the footer lists keys in the table's order: put the shown ones first, in FOOTER's order
        order = {action: n for n, action in enumerate(shown)}
        rank = {key: min((order.get(b.action, len(order)) for b in bindings if b.show), default=len(order))
                for key, bindings in table.items()}
        ranked = sorted(table.items(), key=lambda item: rank[item[0]])  # stable: q before ctrl+c
        table.clear()
        table.update(ranked)
        self.refresh_bindings()

    def action_escape(self) -> None:
        """Esc: out of the box being typed in; in the lookup pane, out of the box first (then m
        and q work), then back to the matrix."""
        if self.query_one(ContentSwitcher).current != "lookup-pane":
            self.action_focus_matrix()
        elif isinstance(self.focused, Input):
            self.query_one("#lookup-scroll").focus()
        else:
            self.action_pane("matrix")
