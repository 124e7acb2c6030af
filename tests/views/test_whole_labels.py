"""Tables never cut the answer: the class of each head in ``attn heads`` (and ``--transformer``)
and the words of ``attn matrix --words`` are whole at 40 and 80 columns; what does not fit is
left out and said, never cut to 'bro…'."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attncli.cli.main import app

LABELS = {"previous_token", "next_token", "first_token", "separator", "self", "duplicate_token", "local", "broad",
          "mixed", "induction"}


def run(*args, columns: int):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()  # a console sized by COLUMNS is made afresh for every run
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def table_rows(stdout: str) -> list[list[str]]:
    """The body rows of a rich box table: the cells between the │ separators, stripped."""
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in stdout.splitlines()
            if line.startswith("│")]


def labels_in_table(stdout: str) -> list[str]:
    return [row[-1] for row in table_rows(stdout) if row[-1]]


@pytest.mark.parametrize("columns", [40, 80])
def test_heads_of_the_builtin_model_show_whole_labels(columns):
    table = run("heads", columns=columns)
    assert table.exit_code == 0, table.stderr
    doc = json.loads(run("heads", "--json", columns=columns).stdout)
    assert labels_in_table(table.stdout) == [h["label"] for h in doc["heads"]]
    assert "…" not in table.stdout and max(len(line) for line in table.stdout.splitlines()) <= columns


@pytest.mark.parametrize("columns", [40, 80])
def test_heads_of_a_transformer_show_whole_labels(minilm_dir, tmp_path, columns):
    sentences = tmp_path / "s.txt"
    sentences.write_text("the cat sat on the mat and the dog sat on the log\n"
                         "a quick brown fox jumps over the lazy dog\n", encoding="utf-8")
    args = ("heads", "--transformer", str(minilm_dir), "--file", str(sentences))
    table = run(*args, columns=columns)
    assert table.exit_code == 0, table.stderr
    doc = json.loads(run(*args, "--json", columns=columns).stdout)
    labels = [h["label"] for h in doc["heads"]]
    assert any(len(label) > 10 for label in labels)  # e.g. previous_token: what was cut to 'pre…'
    assert labels_in_table(table.stdout) == labels and set(labels) <= LABELS
    assert "…" not in table.stdout and max(len(line) for line in table.stdout.splitlines()) <= columns
    if columns == 40:  # the score columns that did not fit are named on stderr
        assert "scores left out at 40 columns" in table.stderr


def test_heads_table_keeps_label_and_drops_scores_from_the_right():
    from rich.console import Console

    from attncli.views.heads_table import heads_table

    scores = ["previous_token", "next_token", "first_token", "separator", "self", "duplicate_token", "local", "entropy"]
    head = dict.fromkeys(scores, 0.5) | {"layer": 11, "head": 11, "label": "duplicate_token"}
    report = {"scores": scores, "heads": [head], "uniform": dict.fromkeys(scores, 0.1)}
    for width, kept in ((40, 0), (60, 3), (200, 8)):
        table, left_out = heads_table(report, "t", width)
        assert left_out == scores[kept:]
        console = Console(width=width, record=True, file=None, color_system=None)
        with console.capture() as cap:
            console.print(table)
        assert "duplicate_token" in cap.get() and "…" not in cap.get()


@pytest.mark.parametrize("columns", [40, 80])
def test_words_are_whole_column_headers(minilm_dir, columns):
    result = run("matrix", "the tokenization flies", "--transformer", str(minilm_dir), "--layer", "1", "--head", "1",
                 "--words", columns=columns)
    assert result.exit_code == 0, result.stderr
    headers = [line.split() for line in result.stdout.splitlines() if line.startswith("    ")]
    assert [w for line in headers for w in line] == ["[CLS]", "the", "tokenization", "flies", "[SEP]"]
    assert "…" not in result.stdout


@pytest.mark.parametrize("columns", [40, 80, 120, 200])
def test_matrix_explain_keeps_values_and_notes_whole(columns):
    """attn matrix --explain's steps at any width: each value on one line, uncut, and each note's
    start readable on one line (a table where the note column gets 24 columns, else stacked)."""
    from attncli.views.explanation import _fmt

    args = ("matrix", "time flies like an arrow", "--causal", "--explain", "3", "1")
    text = run(*args, columns=columns).stdout.splitlines()
    steps = json.loads(run(*args, "--json", columns=columns).stdout)["explanation"]["steps"]
    for step in steps:
        assert any(_fmt(step["value"]) in line for line in text), (columns, step)
        assert any(step["note"][:20] in line for line in text), (columns, step)
    assert max(len(line.rstrip()) for line in text) <= columns
