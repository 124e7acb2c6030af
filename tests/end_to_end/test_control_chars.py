"""No terminal control sequence from data reaches the terminal (issue 15, class 3).

Dictionary keys and values, query lines, words on stdin, a model's metadata and the tokens of a
matrix go through ``attncli.cli.common.shown`` (``textio.visible`` + rich's markup escape) in every
rich view: ESC, OSC 52 (clipboard), C1 controls and bidi overrides are shown as visible escapes.
JSON output carries the exact text.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from _lookup_fixtures import save_plain
from attncli.cli.common import shown
from attncli.cli.main import app
from attncli.views.render import Heatmap, render_heatmap
from attncli.io.textio import visible
from attncli.vectors import store

runner = CliRunner()

HOSTILE = {
    "esc": "\x1b[2J\x1b[H",  # clear the screen
    "osc52": "\x1b]52;c;aGVsbG8=\x07",  # write the clipboard
    "title": "\x1b]0;pwned\x1b\\",  # set the window title
    "c1": "\x9b31m\x9d0;t\x9c",  # one-character CSI, OSC, ST
    "bidi": "\u202eevil\u202c\u2066x\u2069",  # right-to-left override, isolates
    "bell": "\x07\x08\r",
}
FORBIDDEN = ["\x1b", "\x07", "\x08", "\r", "\x9b", "\x9c", "\x9d", "\u202e", "\u202c", "\u2066", "\u2069"]


def assert_inert(text: str) -> None:
    bad = [repr(c) for c in FORBIDDEN if c in text]
    assert not bad, f"control characters reached the output: {bad}"


@pytest.mark.parametrize("kind", HOSTILE)
def test_visible_escapes_every_control(kind):
    out = visible(f"a{HOSTILE[kind]}b")
    assert_inert(out)
    assert out.startswith("a") and out.endswith("b") and "\\" in out
    assert visible("naïve 日本 café") == "naïve 日本 café"  # ordinary text untouched


def test_shown_escapes_markup_too():
    assert shown("[bold]x[/]") != "[bold]x[/]"
    assert_inert(shown("x\x1b[31m"))


@pytest.mark.parametrize("kind", HOSTILE)
def test_lookup_table_and_answer_show_data_inertly(tmp_path, kind):
    bad = HOSTILE[kind]
    wordless = "".join(c for c in bad if not c.isalnum())  # keys and queries need words with vectors
    d = {f"colour{wordless}": f"black{bad}", "speed": f"fast{bad}", "brand": "Porsche", f"engine{wordless}": 1}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    queries = tmp_path / "q.txt"
    queries.write_text(f"colour{wordless}\nspeed\n", encoding="utf-8")
    for args in (["lookup", f"color{wordless}", "--dict", str(path), "--explain", "--rows", "0"],
                 ["lookup", "--queries", str(queries), "--dict", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert_inert(result.stdout)
        assert_inert(result.stderr)
        assert "black" in result.stdout
    result = runner.invoke(app, ["lookup", f"color{wordless}", "--dict", str(path), "--json"])
    doc = json.loads(result.stdout)
    assert doc["best"]["value"] == f"black{bad}"  # JSON stays exact
    assert {e["key"] for e in doc["entries"]} == set(d)


def test_similar_words_from_stdin_and_errors_are_inert():
    bad = HOSTILE["osc52"] + HOSTILE["c1"]
    result = runner.invoke(app, ["similar", "-"], input=f"car{bad}\n{bad}\n")
    assert_inert(result.stdout)
    assert_inert(result.stderr)
    assert "\\x1b" in result.stdout  # shown, visibly
    lines = runner.invoke(app, ["similar", "-", "--json"], input=f"car{bad}\n").stdout.splitlines()
    assert json.loads(lines[0])["query"] == f"car{bad}"


def test_model_metadata_is_inert_in_attn_models():
    bad = HOSTILE["title"] + HOSTILE["bidi"]
    save_plain("meta")
    store.update_meta("meta", corpus_label=f"brown{bad}", algorithm=f"w2v{bad}", created=f"2026{bad}")
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    assert_inert(result.stdout)
    doc = json.loads(runner.invoke(app, ["models", "--json"]).stdout)
    assert [m for m in doc if m["name"] == "meta"][0]["corpus"] == f"brown{bad}"


def test_error_messages_quoting_data_are_inert():
    bad = HOSTILE["esc"] + HOSTILE["c1"]
    result = runner.invoke(app, ["lookup", "colour", "--model", f"x{bad}"])
    assert result.exit_code == 2
    assert_inert(result.stderr)


def test_heatmap_labels_titles_and_notes_are_inert():
    import io

    import numpy as np
    from rich.console import Console

    bad = HOSTILE["osc52"] + HOSTILE["bidi"] + HOSTILE["c1"]
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system="truecolor")
    hm = Heatmap(np.eye(2), [f"0 a{bad}", "1 b"], [f"a{bad}", "b"], f"title {bad}", notes=(f"note {bad}",))
    render_heatmap(console, hm)
    text = console.file.getvalue()
    # the only escape sequences are rich's own colours (SGR: ESC [ ... m)
    import re

    assert_inert(re.sub(r"\x1b\[[0-9;]*m", "", text))
    assert "\\x1b]52" in text
