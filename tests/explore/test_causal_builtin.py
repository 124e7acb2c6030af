"""attn explore's G and D without --transformer: attn ablate's and attn dla's views of attn's built-in
LM (the model every user has offline), the same documents as the commands' --json for the
copied command line, the top prediction the LM's own forward pass makes; with --model NAME,
that model's LM, and a command line that says so (ATTN_MODEL)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")

from typer.testing import CliRunner  # noqa: E402

from _attention_fixtures import SENTENCES, make_random_attention  # noqa: E402
from test_explore import drive, lines_of, press  # noqa: E402
from attncli.cli.main import app as cli  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402
from attncli.tinylm.model import load_trained  # noqa: E402

SENTENCE = "time flies like an arrow"


def run_command(command: str, monkeypatch) -> dict:
    """The copied command line run through the CLI (an ``ATTN_MODEL=...`` prefix set in the environment)."""
    words = shlex.split(command)
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        monkeypatch.setenv(name, value)
    assert words[:1] == ["attn"], command
    result = CliRunner().invoke(cli, words[1:] + ["--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def top_word(model: str | None, text: str) -> str:
    """The next word the built-in LM predicts after ``text``, by its own forward pass (not the trace)."""
    att = load_trained(model)
    return att.output_words[int(np.argmax(att.logits(text.split())[-1]))]


@pytest.mark.parametrize("key, kind", [("G", "ablate"), ("D", "dla")])
def test_G_and_D_run_on_the_builtin_lm(monkeypatch, key, kind):
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, key)
        seen["message"], seen["kind"] = app.message, app.state.causal_view
        seen["doc"] = json.loads(json.dumps(app.result.document()))
        seen["drawn"] = " ".join("\n".join(lines_of(app)).split())
        seen["settings"] = str(app.query_one("#settings").render())
        await press(app, pilot, "y")
        seen["command"] = app.result.command_line()
        await press(app, pilot, key)  # again: back to the word-vector matrix
        seen["back"] = (app.state.causal_view, type(app.result).__name__)

    drive(script, ExploreState(SENTENCE), size=(140, 45))
    assert seen["message"] == "" and seen["kind"] == kind
    assert seen["command"].startswith(f"attn {kind} ") and "--transformer" not in seen["command"]
    assert seen["doc"] == run_command(seen["command"], monkeypatch)
    assert seen["doc"]["target"]["token"].strip() == top_word(None, SENTENCE)
    assert "built-in LM" in seen["settings"]
    assert seen["back"] == (None, "MatrixResult")


def test_G_reads_the_lm_of_the_model_given(monkeypatch):
    """--model NAME: that model's built-in LM, and ATTN_MODEL=NAME before the copied command."""
    make_random_attention("rand", layers=2, heads=4)
    text = SENTENCES[4]
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "G")
        seen["message"], seen["doc"] = app.message, json.loads(json.dumps(app.result.document()))
        seen["command"], seen["shape"] = app.result.command_line(), np.shape(seen["doc"]["grid"])

    drive(script, ExploreState(text, model="rand"), size=(140, 45))
    assert seen["message"] == ""
    assert seen["command"].startswith("ATTN_MODEL=rand attn ablate ")
    assert seen["shape"] == (2, 4)  # rand's 2 layers x 4 heads, not the default LM's
    assert seen["doc"] == run_command(seen["command"], monkeypatch)
    assert seen["doc"]["target"]["token"].strip() == top_word("rand", text)
