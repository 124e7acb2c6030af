"""The lookup pane of ``attn explore``: type a query, see its attention weights over the keys of
the dictionary (``--dict``, default the shipped car.json) update as you type. Part of the app:
the lookups run in a thread worker, the newest query wins."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import App
from textual.widgets import Input

from attncli.errors import AttnError
from attncli.explore.state import ExploreState
from attncli.explore.widgets import Drawing
from attncli.io.textio import visible
from attncli.lookup import dictionary as core
from attncli.env.paths import data_dir

LOOKUP_ROWS = 20
EIGHTHS = ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")


class WeightBar:
    """A weight in [0, 1] as a bar across the whole width its table column gets (in eighths of a
    cell, as attn lookup draws it), measured at any width from 4 up, so a wide pane's bar column
    is filled by a weight of 1, not 20 characters of it."""

    def __init__(self, weight: float) -> None:
        self.weight = weight

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement(4, max(4, options.max_width))

    def __rich_console__(self, console, options):
        eighths = int(round(self.weight * options.max_width * 8))
        full, part = divmod(eighths, 8)
        yield Text("█" * full + EIGHTHS[part], style="cyan", no_wrap=True, overflow="crop")


class LookupPane(App):
    """The lookup pane's part of the app (ExploreApp derives from it; a Textual class, so that its
    ``@on`` handlers are registered)."""

    @on(Input.Changed, "#query")
    def _query_changed(self, event: Input.Changed) -> None:
        if event.value.strip():
            self._lookup(event.value, self.state)

    @on(Input.Submitted, "#query")
    def _query_done(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self._lookup(event.value, self.state)

    @work(thread=True, exclusive=True, group="lookup", exit_on_error=False)
    def _lookup(self, query: str, state: ExploreState) -> None:
        try:
            if self._dictionary is None:
                self._dictionary = core.read_dictionary(state.dict_path or data_dir() / "car.json")
            result = core.lookup(query, self._dictionary, self._vectors_for(state.model))
        except AttnError as exc:
            self._from_thread(self._lookup_refused, query, str(exc))
        except Exception as exc:
            self._from_thread(self._lookup_refused, query, f"internal error: {type(exc).__name__}: {exc}")
        else:
            self._from_thread(self._looked_up, query, result)

    def _current_query(self) -> str:
        return self.query_one("#query", Input).value

    def _lookup_refused(self, query: str, message: str) -> None:
        if query == self._current_query():
            self.lookup_result = None
            self.query_one("#lookup-result", Drawing).show(Text(visible(message), style="bold red"))
            self._say(message, error=True, toast=False)  # a prefix typed so far: no toast to outlive the answer

    def _looked_up(self, query: str, result) -> None:
        if query != self._current_query():
            return
        self.lookup_result = result
        self._say("")
        # keys, values and the query are data: shown through visible() in Text (no markup)
        table = Table(title=Text(visible(f"attention over {result.n_keys:,} keys for {query!r}, T = {result.temperature:g}")),
                      title_justify="left", expand=True)
        table.add_column("key", overflow="fold")
        table.add_column("similarity", justify="right")
        table.add_column("weight", justify="right")
        table.add_column("", no_wrap=True, ratio=1)
        table.add_column("value", overflow="fold")
        for e in result.head(LOOKUP_ROWS):
            table.add_row(Text(visible(e.key)), f"{e.similarity:.3f}", f"{e.weight:.3f}", WeightBar(e.weight),
                          Text(visible(str(e.value))))
        best = result.best
        how = "exact key" if result.exact else f"weight {best.weight:.3f}"
        parts = [table, Text.assemble("answer: ", (visible(str(best.value)), "bold"), visible(f"  (key {best.key!r}, {how})"))]
        if result.soft_value is not None:  # as attn lookup prints it
            parts.append(Text.assemble("soft value (sum of weight * value): ", (f"{result.soft_value:.6g}", "bold")))
        self.query_one("#lookup-result", Drawing).show(*parts)
