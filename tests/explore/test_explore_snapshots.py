"""attn explore at every width: Textual snapshots (pytest-textual-snapshot; the SVGs are under
tests/explore/__snapshots__/) at 40, 80, 120, 133 and 200 columns, and at each width the explanation's
values and notes drawn whole (at 120-133 columns its note column was once squeezed to one
character, each row wrapping into five lines)."""

from __future__ import annotations

import pytest

from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("pytest_textual_snapshot", reason="the snapshot tests need pytest-textual-snapshot")

from attncli.explore.app import ExploreApp  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402
from attncli.views.explanation import _fmt  # noqa: E402
from test_explore import SENTENCE, drive, lines_of, settle  # noqa: E402

WIDTHS = [40, 80, 120, 133, 200]


async def _settled(pilot) -> None:
    await settle(pilot.app, pilot)


@pytest.mark.parametrize("width", WIDTHS)
def test_snapshot(snap_compare, width):
    app = ExploreApp(ExploreState(SENTENCE, causal=True, cursor=(3, 1)))
    assert snap_compare(app, terminal_size=(width, 40), run_before=_settled)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_explanation_keeps_every_value_and_note_whole(width):
    seen = {}

    async def script(app, pilot):
        scroll = app.query_one("#explain-scroll")
        await pilot.resize_terminal(width, 200)  # room for the whole explanation, below the matrix too
        await settle(app, pilot)
        seen["lines"] = [line.rstrip() for line in lines_of(app, "#explain")]
        seen["steps"] = app.explanation["steps"]
        seen["panel"] = scroll.content_size.width

    drive(script, ExploreState(SENTENCE, causal=True, cursor=(3, 1)), size=(width, 200))
    text = seen["lines"]
    for step in seen["steps"]:
        value = _fmt(step["value"])
        assert any(value in line for line in text), (width, value, text)  # never cut or wrapped
        head = step["note"][:min(len(step["note"]), 20)]  # a note's start reads on one line: not a column of letters
        assert any(head in line for line in text), (width, step["note"], text)
    assert max(len(line) for line in text) <= seen["panel"]
