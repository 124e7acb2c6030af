"""attn explore --corrupt: R draws attn patch's restored-fraction grid and E attn attribute's AtP
grid of the sentence's top prediction, the same documents as the commands' --json for the
command line the view gives (the top prediction the clean text's own forward pass makes); the
explanation panel says what a cell is; without --corrupt the keys are disabled and say how to
enable them; on the built-in LM R runs and E is refused by name; a blank or oversized --corrupt
is refused at start, exit 2, as the commands refuse it."""

from __future__ import annotations

import json
import re
import shlex

import numpy as np
import pytest

from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")

from typer.testing import CliRunner  # noqa: E402

from test_causal_builtin import run_command  # noqa: E402
from test_explore import drive, lines_of, press  # noqa: E402
from test_keys import footer  # noqa: E402
from attncli.cli.main import app as cli  # noqa: E402
from attncli.explore.state import ExploreState, export_text  # noqa: E402
from attncli.io.textio import MAX_TEXT_CHARS  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog sat on the mat and the cat"  # 14 tokens each


def the_commands_json(command: str) -> dict:
    result = CliRunner().invoke(cli, shlex.split(command)[1:] + ["--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("kind", ["patch", "attribute"])
def test_the_view_is_the_commands_json_with_the_top_prediction(tiny_gpt2_dir, kind):
    needed("tokenizers")
    needed("safetensors")
    from attncli.explore.checkpoint_state import command_line, compute

    state = ExploreState(CLEAN, transformer=str(tiny_gpt2_dir), corrupt=CORRUPT, causal_view=kind)
    res = compute(state, {})
    command = command_line(res, state)
    assert shlex.split(command)[:4] == ["attn", kind, CLEAN, CORRUPT] and "--target-id" in command
    expected = the_commands_json(command)
    assert json.loads(json.dumps(res.doc)) == expected
    assert json.loads(export_text(res, state, ".json")) == expected  # x's .json: the command's --json
    svg = export_text(res, state, ".svg")
    assert "restored fraction" in svg.replace("&#160;", " ") and kind in svg
    assert res.doc["command"] == kind and np.asarray(res.doc["grid"]).shape == (res.model.layers, len(res.enc.ids))
    logits = res.model.trace(res.enc.ids, "logits")["logits"][-1]  # (V,): the clean text's next token
    assert res.doc["target"]["id"] == int(np.argmax(logits))


def test_R_and_E_draw_explain_and_return(tiny_gpt2_dir):
    needed("tokenizers")
    needed("safetensors")
    seen = {}

    async def script(app, pilot):
        assert {"patch", "AtP"} <= footer(app)
        for key, kind in (("R", "patch"), ("E", "attribute")):
            await press(app, pilot, key)
            assert app.message == "" and app.state.causal_view == kind, app.message
            seen[kind] = (" ".join("\n".join(lines_of(app)).split()), " ".join("\n".join(lines_of(app, "#explain")).split()),
                          str(app.query_one("#settings").render()), app.result.document())
        await press(app, pilot, "E")
        seen["back"] = (app.state.causal_view, app.result.kind)

    drive(script, ExploreState(CLEAN, transformer=str(tiny_gpt2_dir), corrupt=CORRUPT), size=(160, 45))
    for kind, key, what in (("patch", "R", "activation patching"), ("attribute", "E", "attribution patching")):
        drawn, explained, settings, doc = seen[kind]
        assert f"{what} ({key} returns)" in settings
        assert f"{key} returns" in explained
        assert ("(patched - corrupt) / (clean - corrupt)" if kind == "patch" else "one backward pass") in explained
        assert "L1" in drawn and "0 the" in drawn.replace("Ġ", "")  # layers x positions, the clean tokens
        grid = np.asarray(doc["grid"])  # (L, T): the document's largest cell is the one the colour scale names
        scale = re.search(r"white = 0, orange = (\d+\.(\d+))", drawn)  # rounded to the decimals drawn
        assert abs(float(scale.group(1)) - np.abs(grid).max()) <= 0.5 * 10.0 ** -len(scale.group(2))
    assert seen["back"] == (None, "pretrained")


@pytest.mark.parametrize("key", ["R", "E"])
def test_without_corrupt_the_keys_are_disabled_and_say_how(tiny_gpt2_dir, key):
    needed("tokenizers")
    needed("safetensors")
    seen = {}

    async def script(app, pilot):
        before = app.result
        action = "causal_test('patch')" if key == "R" else "causal_test('attribute')"
        seen["enabled"] = app.check_action("causal_test", ("patch" if key == "R" else "attribute",))
        seen["footer"] = footer(app)
        await press(app, pilot, key)
        seen["message"], seen["view"], seen["same"] = app.message, app.state.causal_view, app.result is before
        seen["action"] = action

    drive(script, ExploreState(CLEAN, transformer=str(tiny_gpt2_dir)), size=(140, 40))
    assert seen["enabled"] is None and seen["view"] is None and seen["same"]
    assert not {"patch", "AtP"} & seen["footer"]  # left out of the footer: only the help lists them
    assert "--corrupt" in seen["message"] and seen["message"].startswith(f"{key} draws")


def test_R_runs_on_the_builtin_lm_and_E_is_refused_by_name(monkeypatch):
    clean, corrupt = "time flies like an arrow", "fruit flies like an arrow"
    seen = {}

    async def script(app, pilot):
        seen["footer"] = footer(app)  # R and E right after quit and help: in the footer at 50 columns
        await press(app, pilot, "R")
        seen["R"] = (app.message, app.state.causal_view, app.result.document(), app.result.command_line())
        await press(app, pilot, "R", "E")
        seen["E"] = (app.message, app.state.causal_view)

    drive(script, ExploreState(clean, corrupt=corrupt), size=(50, 40))
    assert {"patch", "AtP"} <= seen["footer"]
    message, view, doc, command = seen["R"]
    assert message == "" and view == "patch"
    assert shlex.split(command)[:4] == ["attn", "patch", clean, corrupt] and "--transformer" not in command
    assert json.loads(json.dumps(doc)) == run_command(command, monkeypatch)
    message, view = seen["E"]
    assert view is None and "give the model with --transformer NAME" in message


def test_E_on_the_torch_backend_runs_attn_attributes_numpy_pass(tiny_gpt2_dir):
    """attn attribute has no --backend: its backward pass is attn's NumPy one. E with --backend torch
    loads that pass beside the view's model, and its numbers are still the command's; R stays on torch."""
    needed("torch")
    needed("tokenizers")
    needed("safetensors")
    from attncli.explore.causal_view import refusal
    from attncli.explore.checkpoint_state import command_line, compute

    models: dict = {}
    state = ExploreState(CLEAN, transformer=str(tiny_gpt2_dir), corrupt=CORRUPT, backend="torch")
    view = compute(state, models)
    assert view.model.backend == "torch" and refusal(view.model, "attribute", state) is None
    res = compute(ExploreState(CLEAN, transformer=str(tiny_gpt2_dir), corrupt=CORRUPT, backend="torch",
                               causal_view="attribute"), models)
    assert res.model.backend == "numpy" and models[(str(tiny_gpt2_dir), "numpy")] is res.model
    command = command_line(res, state)
    assert "--backend" not in command
    assert json.loads(json.dumps(res.doc)) == the_commands_json(command)
    patched = compute(ExploreState(CLEAN, transformer=str(tiny_gpt2_dir), corrupt=CORRUPT, backend="torch",
                                   causal_view="patch"), models)
    assert patched.model.backend == "torch" and "--backend torch" in command_line(patched, state)


def test_an_encoder_without_a_head_is_the_model_interfaces_refusal(tiny_bert_dir):
    needed("tokenizers")
    needed("safetensors")

    async def script(app, pilot):
        before = app.result
        for key in ("R", "E"):
            await press(app, pilot, key)
            assert "no masked-language-model head" in app.message and app.state.causal_view is None, app.message
            assert app.result is before

    drive(script, ExploreState(CLEAN, transformer=str(tiny_bert_dir), corrupt=CORRUPT), size=(120, 30))


@pytest.mark.parametrize("corrupt, expected", [
    ("   ", "the corrupted text is empty"), ("", "the corrupted text is empty"), ("\t\n", "the corrupted text is empty"),
    ("a " * (MAX_TEXT_CHARS // 2 + 1), f"the corrupted text is {MAX_TEXT_CHARS + 2:,} characters long"),
])
def test_a_bad_corrupt_is_refused_at_start(corrupt, expected):
    result = CliRunner().invoke(cli, ["explore", CLEAN, "--corrupt", corrupt])
    assert result.exit_code == 2
    assert expected in " ".join(result.stderr.split()) and "Traceback" not in result.output


def test_corrupt_reaches_the_state_and_the_serve_arguments(monkeypatch):
    import attncli.explore.app as explore_app

    started = {}
    monkeypatch.setattr(explore_app, "run", lambda state: started.setdefault("state", state) and 0)
    result = CliRunner().invoke(cli, ["explore", CLEAN, "--corrupt", CORRUPT])
    assert result.exit_code == 0, result.output
    state = started["state"]
    assert state.corrupt == CORRUPT and state.explore_args()[-2:] == ["--corrupt", CORRUPT]


def test_every_key_is_bound_once_and_R_E_say_the_commands():
    """R and E take letters no other key had (a second binding of a key would shadow the first), and
    the state's command line of their views names both texts."""
    from attncli.explore.keys import KEYS

    keys = [key for k in KEYS for key in k.key.split(",")]
    assert len(keys) == len(set(keys)) and {"R", "E"} <= set(keys)
    for kind in ("patch", "attribute"):
        state = ExploreState(CLEAN, transformer="gpt2", corrupt=CORRUPT, causal_view=kind)
        assert shlex.split(state.command_line()) == ["attn", kind, CLEAN, CORRUPT, "--transformer", "gpt2"]
