"""attn explore fits its terminal, read off the rendered screen at 80 x 24 and 160 x 40: every key
hint of the footer whole (on two rows at most; what is left out is counted by "? help +N more"),
the export prompt whole, and a notice (a toast) never over the message line."""

from __future__ import annotations

import re

import pytest

from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")

from attncli.explore.footer import fit_hints, hint_width  # noqa: E402
from attncli.explore.keys import FOOTER  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402
from test_explore import SENTENCE, drive, press, settle  # noqa: E402

SIZES = [(80, 24), (160, 40)]


def screen_lines(app) -> list[str]:
    """The whole screen as drawn, one string per row (the modal screens over the app included)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def footer_rows(app) -> list[str]:
    footer = app.screen_stack[0].query_one("Footer")
    lines = screen_lines(app)
    return lines[footer.region.y:footer.region.bottom]


def hints_on(rows: list[str]) -> list[tuple[str, str]]:
    """(key, label) of each hint drawn on the footer's rows (hints are 2 spaces apart)."""
    return [tuple(hint.split(" ", 1)) for row in rows for hint in re.split(r"\s{2,}", row.strip()) if hint]


def expected_hints(app, mode: str) -> list[tuple[str, str]]:
    keys = {"help": "?", "quit": "q"}
    shown = dict(FOOTER[mode])
    if mode == "word-vector" and app.transformer_name is not None:
        shown["transformer"] = "transformer"
    table = {b.action: app.get_key_display(b) for bindings in app._bindings.key_to_bindings.values() for b in bindings}
    return [(keys.get(action) or table[action], label) for action, label in shown.items()]


def check_footer(app, mode: str, width: int) -> int:
    """Asserts the footer shows the mode's hints whole, in order, from the first, each row within
    ``width``; the count left out (said by help's label). Returns it."""
    rows = footer_rows(app)
    assert 1 <= len(rows) <= 2, rows
    assert all(len(row.rstrip()) <= width for row in rows)
    drawn = hints_on(rows)
    expected = expected_hints(app, mode)
    help_label = next(label for key, label in drawn if key == "?")
    hidden = int(re.fullmatch(r"help(?: \+(\d+) more)?", help_label).group(1) or 0)
    assert [(k, "help" if k == "?" else label) for k, label in drawn] == expected[:len(expected) - hidden], (rows, expected)
    return hidden


@pytest.mark.parametrize("size", SIZES)
def test_the_word_vector_footer_shows_every_key_whole(size):
    seen = {}

    async def script(app, pilot):
        seen["hidden"] = check_footer(app, "word-vector", size[0])
        seen["rows"] = len(footer_rows(app))

    drive(script, ExploreState(SENTENCE), size=size)
    assert seen == {"hidden": 0, "rows": 2 if size[0] == 80 else 1}


@pytest.mark.parametrize("size", SIZES)
def test_the_transformer_footer_fits_and_counts_what_it_leaves_out(tiny_bert_dir, size):
    seen = {}

    async def script(app, pilot):
        seen["transformer"] = check_footer(app, "transformer", size[0])
        await press(app, pilot, "M")
        seen["model view"] = check_footer(app, "model view", size[0])

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=size)
    assert seen["model view"] == 0
    assert (seen["transformer"] > 0) == (size[0] == 80)  # 80 columns: two rows cannot hold the 19 keys


def test_fit_hints_leaves_out_from_the_end_and_makes_room_for_the_count():
    hints = [("q", "quit"), ("?", "help"), ("e", "sentence"), ("k", "context"), ("v", "variant")]
    width = sum(hint_width(*h) for h in hints[:4])  # four fit on one row, not five
    assert fit_hints(hints, width + 20, rows=1) == ([[0, 1, 2, 3, 4]], 0)
    assert fit_hints(hints, width, rows=2) == ([[0, 1, 2, 3], [4]], 0)
    laid, hidden = fit_hints(hints, width, rows=1)  # "help +1 more" takes 7 columns more: k goes too
    assert (laid, hidden) == ([[0, 1, 2]], 2)


@pytest.mark.parametrize("size", SIZES)
def test_the_export_prompt_is_drawn_whole(size):
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "x")
        box = app.screen.query_one("#export")
        lines = screen_lines(app)[box.region.y:box.region.bottom]
        inside = [line[box.region.x:box.region.right] for line in lines]
        seen["text"] = " ".join(" ".join(line.strip(" █▌▐▊▎") .split()) for line in inside)
        seen["fits"] = box.region.right <= size[0]

    drive(script, ExploreState(SENTENCE), size=size)
    text = " ".join(seen["text"].split())
    assert seen["fits"]
    assert "Export the view to (.svg, .html, .png or .json; relative to the current directory):" in text, text
    assert "attn-explore.svg" in text and "Enter writes it, Esc cancels." in text, text


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("key", ["y", "T"])  # a notice (the copied command) and an error (T without --transformer)
def test_a_notice_never_covers_the_message_line(size, key):
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "k", *"a dog", "enter", "c")  # refused: a long error on the message line
        await press(app, pilot, key)
        await pilot.pause(0.2)
        message = app.query_one("#message").region
        drawn = app.screen._compositor.find_widget  # where each toast is drawn: its region within its clip
        toasts = [drawn(toast).region.intersection(drawn(toast).clip) for toast in app.screen.query("Toast")]
        seen["toasts"] = len(toasts)
        seen["overlaps"] = [t for t in toasts if t.overlaps(message)]
        lines = screen_lines(app)
        seen["drawn"] = " ".join(lines[message.y:message.bottom])
        seen["message"] = app.message

    drive(script, ExploreState(SENTENCE), size=size, notifications=True)
    assert seen["toasts"] >= 1 and seen["overlaps"] == []
    assert " ".join(seen["message"].split())[:60] in " ".join(seen["drawn"].split())


def test_the_footer_lays_itself_out_again_when_the_terminal_is_resized():
    seen = []

    async def script(app, pilot):
        for size in SIZES[::-1] + SIZES[1:]:  # 160 -> 80 -> 160
            await pilot.resize_terminal(*size)
            await settle(app, pilot)
            seen.append((len(footer_rows(app)), check_footer(app, "word-vector", size[0])))

    drive(script, ExploreState(SENTENCE), size=SIZES[1])
    assert seen == [(1, 0), (2, 0), (1, 0)]
