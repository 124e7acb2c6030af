"""attn explore's key table: what the help screen and the footer say about each key."""

from __future__ import annotations

import re

from attncli.explore.keys import KEYS


def test_a_key_pair_says_what_each_key_does():
    """A help row for a pair such as 'v / V' says both directions (next / previous, more / fewer):
    the help once said only "next attention variant" for v / V."""
    pairs = [k for k in KEYS if re.fullmatch(r"[a-z] / [A-Z]", k.shown)]
    assert len(pairs) >= 5
    for key in pairs:
        assert re.search(r"previous|fewer", key.help), f"{key.shown}: {key.help}"


def test_every_command_but_explore_takes_json():
    """The README says every command but attn explore takes --json (explore exports JSON with x)."""
    import typer.main

    from attncli.cli.main import app

    def commands(group, prefix: str = ""):
        """Every command a user can run, a group's by their full name ('stats merge'); a group's
        default command (``attn stats FILE`` is ``attn stats run FILE``) is one of them."""
        for name in group.list_commands(None):  # the lazy group loads each command as it is asked for
            command = group.get_command(None, name)
            if hasattr(command, "commands"):  # a group (typer's own click has no click.Group to test against)
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    walked = dict(commands(typer.main.get_command(app)))
    assert {"stats run", "stats merge"} <= set(walked)  # a group's subcommands are walked, not the group
    without = sorted(name for name, command in walked.items() if not any("--json" in p.opts for p in command.params))
    assert without == ["explore"]


# --- the app: the lookup pane's keys, stale errors, the footer of each mode ------------------------

import pytest  # noqa: E402

from conftest import needed  # noqa: E402

needed("textual", reason="attn explore needs the explore extra (textual)")

from attncli.explore.keys import FOOTER  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402
from test_explore import SENTENCE, drive, press  # noqa: E402


def footer(app) -> set[str]:
    from textual.widgets._footer import FooterKey

    return {f.description for f in app.query(FooterKey)} - {"palette"}


def test_lookup_pane_types_m_and_q_and_takes_esc():
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "l")
        await press(app, pilot, "m", "q")  # typed into the query, as any letter
        seen["typed"] = app.query_one("#query").value
        seen["pane after typing"] = app.query_one("ContentSwitcher").current
        await press(app, pilot, "escape")  # out of the box: now m and q are keys
        seen["focus after esc"] = app.focused.id
        await press(app, pilot, "m")
        seen["pane after m"] = app.query_one("ContentSwitcher").current
        await press(app, pilot, "l", "escape", "escape")  # Esc out of the box, then back to the matrix
        seen["pane after esc esc"] = app.query_one("ContentSwitcher").current
        await press(app, pilot, "l", "escape", "q")
        seen["running after q"] = app.is_running

    drive(script, ExploreState(SENTENCE))
    assert seen == {"typed": "mq", "pane after typing": "lookup-pane", "focus after esc": "lookup-scroll",
                    "pane after m": "matrix-pane", "pane after esc esc": "matrix-pane", "running after q": False}


def test_stale_lookup_errors_clear_when_the_query_succeeds():
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "l", "!")  # no word in it: refused
        seen["refused"] = app.message
        seen["toasts while typing"] = len(app._notifications)
        await press(app, pilot, "backspace", *"colour")
        seen["message"], seen["toasts"] = app.message, len(app._notifications)
        seen["answer"] = app.lookup_result.best.key

    drive(script, ExploreState(SENTENCE))
    assert "no word in it" in seen["refused"]
    assert (seen["toasts while typing"], seen["message"], seen["toasts"], seen["answer"]) == (0, "", 0, "color")


def test_a_matrix_error_toast_clears_when_the_next_view_succeeds():
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "k", *"a dog", "enter", "c")  # --causal with --context: refused, as attn matrix does
        seen["toasts"] = len(app._notifications)
        await press(app, pilot, "v")  # another variant: a good view
        seen["after"] = (app.message, len(app._notifications))

    drive(script, ExploreState(SENTENCE))
    assert seen == {"toasts": 1, "after": ("", 0)}


def test_the_footer_lists_the_keys_of_each_mode(tiny_bert_dir):
    seen = {}

    async def script(app, pilot):
        seen["transformer"] = (app.footer_mode(), footer(app))
        await press(app, pilot, "M")
        seen["model view"] = (app.footer_mode(), footer(app))
        await press(app, pilot, "M", "T")
        seen["word-vector"] = (app.footer_mode(), footer(app))
        await press(app, pilot, "l", "escape")
        seen["lookup"] = (app.footer_mode(), footer(app))

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)))
    for mode, (shown_mode, labels) in seen.items():
        assert shown_mode == mode
        expected = set(FOOTER[mode].values()) | ({"transformer"} if mode == "word-vector" else set())
        assert labels == expected, (mode, labels ^ expected)
    assert "variant" not in seen["transformer"][1] and "layer" in seen["transformer"][1]


@pytest.mark.parametrize("width", [80, 200])
def test_quit_and_help_lead_the_footer_and_the_boxes_take_two_rows(width):
    """At 80 columns the footer is cut at its end: "q quit" and "? help" come first in every mode
    (Ctrl-C still quits, but q is the key to show), and the sentence and context boxes take one
    row each (at most two rows together; one at 200 columns, side by side)."""
    from textual.widgets._footer import FooterKey

    seen = {}

    async def script(app, pilot):
        for mode, keys in (("word-vector", ()), ("lookup", ("l", "escape"))):
            await press(app, pilot, *keys)
            seen[mode] = [(f.key_display, f.description) for f in app.query(FooterKey)][:2]
        await press(app, pilot, "m")
        seen["rows"] = app.query_one("#inputs").outer_size.height

    drive(script, ExploreState(SENTENCE), size=(width, 24))
    for mode in ("word-vector", "lookup"):
        assert seen[mode] == [("q", "quit"), ("?", "help")], (mode, seen[mode])
    assert seen["rows"] == (2 if width < 100 else 1)


def test_every_export_suffix_is_named_where_export_is_explained():
    """docs/explore.md's key table, the help screen's x and the app's refusal of an empty name
    list every suffix the export takes (.png was once left out of the docs)."""
    from pathlib import Path

    from attncli.errors import BadInput
    from attncli.explore.keys import KEYS
    from attncli.explore.state import EXPORT_FORMATS, export_path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "explore.md").read_text(encoding="utf-8")
    row = next(line for line in docs.splitlines() if line.startswith("| `x` |"))
    key = next(k for k in KEYS if k.key == "x")
    with pytest.raises(BadInput) as refused:
        export_path("  ")
    for suffix in EXPORT_FORMATS:
        assert f"`{suffix}`" in row and suffix in key.help and suffix in str(refused.value), suffix
