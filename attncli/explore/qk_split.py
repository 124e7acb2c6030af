"""Key Q of ``attn explore --transformer``: the QK split of the cursor's cell beside its
explanation. The score of (query row, key column) in the view's layer and head, split into
query-side x key-side component parts by :func:`attncli.hf.methods.qk_attribution.qk_parts` (what
``attn qk`` prints for the same layer, head, query and key), drawn by ``attn qk``'s own view under
``--explain``'s arithmetic, with its command line. The split follows the cursor (one traced pass
per cell, in a thread worker); Q again hides it. Where the model or the view cannot give one (a
model without ``qk``, a backend other than NumPy, all heads at once, a view with no single
query and key) the key says why, with the model interface's refusal."""

from __future__ import annotations

import shlex
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App

from attncli.errors import AttnError
from attncli.explore.checkpoint_state import Split
from attncli.explore.drawing import view_kind
from attncli.hf.methods import qk_attribution
from attncli.model.interface import has, refusal
from attncli.io.textio import visible
from attncli.views.qk_view import qk_renderables

DOING = "the QK split (Q, attn qk)"
TOP = 8  # parts listed in the panel (attn qk's --top; every part is in the export of attn qk --json)


def split_refusal(res: Any, state: Any) -> str | None:
    """Why the cursor's cell of ``res`` (the view on screen) has no QK split, or None."""
    if state.transformer is None:
        return f"{DOING} is of a pretrained transformer's cell: start with --transformer NAME_OR_PATH"
    if res is None or view_kind(res) != "pretrained":
        return f"{DOING} is of a cell of one head's matrix: the view on screen has no such cell"
    model = res.model
    if not has(model, "qk"):
        return refusal(model, "qk", DOING)
    why = qk_attribution.supported(model)
    if why:
        return f"{DOING}: attn qk {why}"
    if res.keys is not None:
        return f"{DOING} splits a self-attention score: the keys here are another stack's tokens"
    why = res.explainable()
    if why:
        return f"{DOING}: {why}"
    if state.head is None:
        return f"{DOING} splits one head's score: pick a head with {{ / }} (the view shows every head)"
    return None


def split_document(res: Any, state: Any, top: int = TOP) -> dict[str, Any]:
    """``attn qk --json``'s document of the cursor's cell (its input positions, the view's layer
    and head), computed from the view's model and encoding."""
    i, j = res.input_cell(state.cursor)
    parts = qk_attribution.qk_parts(res.model, res.enc, res.layer, state.head, i, j)
    return qk_attribution.document(res.model, res.enc, parts, top)


def command_line(doc: dict[str, Any], state: Any) -> str:
    """The ``attn qk`` command that prints this split."""
    pair = ["--pair", state.pair] if state.pair is not None else []
    return shlex.join(["attn", "qk", state.text, *pair, "--transformer", state.transformer, "--layer", str(doc["layer"]),
                       "--head", str(doc["head"]), "--query", str(doc["query"]["position"]),
                       "--key", str(doc["key"]["position"]), "--top", str(len(doc["top"]))])


def split_renderables(doc: dict[str, Any], state: Any) -> list:
    return [Text("QK split of this cell (Q hides it)", style="bold reverse"), *qk_renderables(doc),
            Text(visible(command_line(doc, state)), style="dim")]


class QKSplit(App):
    """Key Q (ExploreApp derives from it): ``qk_on`` shows the split under the explanation."""

    qk_on = False
    qk_doc: dict[str, Any] | None = None  # the split on screen (attn qk --json's document)
    _qk_for: tuple[Any, Any] | None = None  # (result, state) the split was asked for
    _qk_parts: list | None = None  # its drawing, once computed

    def action_qk_split(self) -> None:
        if self.qk_on:
            self.qk_on, self.qk_doc = False, None
        else:
            reason = split_refusal(self.result, self.state)
            if reason:
                self._say(reason, error=True)
                return
            self.qk_on = True
        self._draw()

    def split_shown(self) -> Split | None:
        """The split on screen, for the export (x), or None: Q off, or the cursor's split not computed yet."""
        if not self.qk_on or self.qk_doc is None or self._qk_for is None:
            return None
        if self._qk_for[0] is not self.result or self._qk_for[1] != self.state:
            return None
        return Split(self.qk_doc, tuple(self._qk_parts or ()))

    def qk_split_renderables(self) -> list:
        """What the explanation panel shows under the explanation: the split of the cursor's cell
        (asked for in a worker the first time), why there is none, or nothing when Q is off."""
        if not self.qk_on:
            return []
        res, state = self.result, self.state
        reason = split_refusal(res, state)
        if reason:
            self.qk_doc = None
            return [Text(visible(reason), style="dim")]
        if self._qk_for is not None and self._qk_for[0] is res and self._qk_for[1] == state and self._qk_parts:
            return self._qk_parts
        self._qk_for, self._qk_parts, self.qk_doc = (res, state), None, None
        self._split(res, state)
        return [Text("QK split: computing ...", style="dim")]

    @work(thread=True, exclusive=True, group="qk", exit_on_error=False)
    def _split(self, res: Any, state: Any) -> None:
        doc = None
        try:
            doc = split_document(res, state)
            parts = split_renderables(doc, state)
        except AttnError as exc:  # a masked key, a cell outside the text: said in the panel
            parts = [Text(visible(f"{DOING}: {exc}"), style="dim")]
        except Exception as exc:  # a bug: say so, keep the app
            parts = [Text(visible(f"internal error: {type(exc).__name__}: {exc}"), style="red")]
        self._from_thread(self._split_done, res, state, doc, parts)

    def _split_done(self, res: Any, state: Any, doc: dict[str, Any] | None, parts: list) -> None:
        if self._qk_for is None or self._qk_for[0] is not res or self._qk_for[1] != state:
            return  # the cursor moved on: a newer split is on its way
        self._qk_parts, self.qk_doc = parts, doc
        if self.qk_on and self.result is res and self.state == state:
            self._draw()
