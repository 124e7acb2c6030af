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

    group = typer.main.get_command(app)
    without = sorted(name for name, command in group.commands.items()
                     if not any("--json" in p.opts for p in command.params))
    assert without == ["explore"]
