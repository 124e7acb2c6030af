"""The footer of ``attn explore``: the keys that work in the current mode (the word-vector matrix,
a transformer's view, its model view, the lookup pane; ``keys.FOOTER``), and Esc, which leaves a
box. Part of the app (ExploreApp derives from it)."""

from __future__ import annotations

from dataclasses import replace

from textual.app import App
from textual.widgets import ContentSwitcher, Input

from attncli.explore.keys import FOOTER, KEYS


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
