"""``attn explore --transformer``'s views beyond one layer's weights: o (attention flow), L (the
logit lens, decoders only) and C (compare with a second text). Each is driven with Textual's
pilot and a number drawn on screen is checked against the core function run here (the flow of
the model's attentions, the lens of its residual stream, the two texts' attentions and their
difference); the models' attentions and streams are themselves checked against transformers in
test_transformer_numpy / test_logit_lens. Snapshots of each view at 80 columns, and every view
drawn at 40 columns without an error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")

from test_explore import drive, lines_of, press, settle  # noqa: E402
from test_explore_transformer import last_table, transformer_json  # noqa: E402

from attncli.explore.state import ExploreState  # noqa: E402

SENTENCE, OTHER = "time flies like an arrow", "fruit flies like a banana"


def load(path):
    from attncli.hf import load as load_model

    return load_model(str(path), backend="numpy")


async def compare_with(app, pilot, text: str) -> None:
    await press(app, pilot, "C")
    await pilot.press(*text, "enter")
    await settle(app, pilot)


def test_o_draws_attention_flow_as_the_core_computes_it(tiny_bert_dir):
    from attncli.attention.flow import attention_flow

    model = load(tiny_bert_dir)
    enc = model.encode(SENTENCE)
    expected = attention_flow(model.attentions(enc), upto=0)  # (T, T) through layer 0

    async def script(app, pilot):
        await press(app, pilot, "o", "left_square_bracket")
        assert app.message == "" and app.state.flow and app.state.layer == 0
        drawn = last_table(lines_of(app), enc.tokens)
        np.testing.assert_allclose(drawn, expected, atol=5e-4 + 1e-9)  # fixed: as drawn; each cell as drawn, 3 decimals
        assert "--flow" in app.state.command_line(explain=False) and app.result.meta["flow"] is True
        doc = transformer_json(app.state.command_line(explain=False))
        np.testing.assert_allclose(np.array(doc["weights"]), expected, atol=1e-6)  # fixed: JSON's 6 digits
        assert "no explanation of a cell with --flow" in "\n".join(lines_of(app, "#explain"))
        await press(app, pilot, "z")  # --flow with --hide-special: attn matrix's refusal, the view stays
        assert "--flow is one matrix" in app.message and not app.state.hide_special and app.state.flow
        await press(app, pilot, "o")
        assert not app.state.flow and not app.result.meta["flow"]

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def lens_rows(lines: list[str], T: int) -> list[list[float]]:
    """The probabilities of the lens table as drawn: one row per position ("t token  tok 0.xx ...")."""
    rows = []
    for line in lines:
        m = re.match(r"^(\d+) \S+\s+(.*)$", line.strip())
        if m and int(m.group(1)) == len(rows) < T:
            rows.append([float(p) for p in re.findall(r"\d\.\d\d", m.group(2))])
    return rows


def test_L_draws_the_logit_lens_of_a_decoder(tiny_gpt2_dir):
    from attncli.attention.logit_lens import logit_lens

    model = load(tiny_gpt2_dir)
    ids = [int(i) for i in model.encode(SENTENCE).ids]
    lens = logit_lens(model.residual_stream(ids), model.lens_logits, k=5)  # (L + 1, T, 5)

    async def script(app, pilot):
        await press(app, pilot, "L")
        assert app.message == "" and app.state.lens
        drawn = np.array(lens_rows(lines_of(app), len(ids)))  # (T, L + 1): the top token's probability
        np.testing.assert_allclose(drawn, lens.top_probs[:, :, 0].T, atol=5e-3 + 1e-9)  # fixed: as drawn
        cells = app.result.doc["lens"]
        assert [[c[0]["id"] for c in layer] for layer in cells] == lens.top_ids[:, :, 0].tolist()
        assert app.state.command_line() == f"attn lens '{SENTENCE}' --transformer {tiny_gpt2_dir}"
        assert "logit lens" in "\n".join(lines_of(app, "#explain"))
        await press(app, pilot, "down", "right")  # no cursor here: nothing moves, nothing breaks
        assert app.message == ""
        await press(app, pilot, "L")
        assert not app.state.lens and app.result.view is not None

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir)), size=(120, 40))


def test_the_lens_is_attn_lens_json(tiny_gpt2_dir):
    """The app's lens document (what x writes as .json) is ``attn lens --transformer --json``'s."""
    import json

    from typer.testing import CliRunner

    from attncli.cli.main import app as cli
    from attncli.explore.checkpoint_state import compute

    res = compute(ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir), lens=True), {})
    result = CliRunner().invoke(cli, ["lens", SENTENCE, "--transformer", str(tiny_gpt2_dir), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert json.loads(json.dumps(res.doc)) == doc  # the same document: ids, probabilities, labels


def test_L_on_an_encoder_is_a_message_and_the_view_stays(tiny_bert_dir):
    async def script(app, pilot):
        before = app.result
        await press(app, pilot, "L")
        assert "is an encoder" in app.message and not app.state.lens and app.result is before
        assert "logit lens" in str(app.query_one("#message").render())

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(80, 30))


def delta_table(lines: list[str]) -> list[list[float]]:
    """The numbers of the table under the title 'delta = B - A'."""
    start = next(n for n, line in enumerate(lines) if "delta = B - A" in line)
    rows = []
    for line in lines[start:]:
        m = re.match(r"^\s*(\d+) \S+\s+(.*)$", line)
        if m:
            rows.append([float(c) for c in re.findall(r"-?\d+\.\d+", m.group(2))])
    return rows


def run_copied(command: str) -> dict:
    import json
    import shlex

    from typer.testing import CliRunner

    from attncli.cli.main import app as cli

    result = CliRunner().invoke(cli, [*shlex.split(command)[1:], "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_C_compares_with_a_second_text_as_the_core_computes_it(tiny_bert_dir):
    model = load(tiny_bert_dir)
    a, b = (model.attentions(model.encode(t))[0, 2] for t in (SENTENCE, OTHER))  # layer 0, head 2: (T, T) each
    R, C = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
    expected = b[:R, :C] - a[:R, :C]

    async def script(app, pilot):
        await press(app, pilot, "left_square_bracket", "right_curly_bracket", "right_curly_bracket",
                    "right_curly_bracket")
        assert app.state.layer == 0 and app.state.head == 2
        await compare_with(app, pilot, OTHER)
        assert app.message == "" and app.state.compare_text == OTHER
        np.testing.assert_allclose(app.result.comparison.delta, expected, atol=1e-9)
        drawn = np.array(delta_table(lines_of(app)))
        np.testing.assert_allclose(drawn, expected, atol=5e-4 + 1e-9)  # fixed: as drawn
        command = app.state.command_line()
        assert command.startswith(f"attn compare '{SENTENCE}' '{OTHER}'") and "--layer 0 --head 2" in command
        doc = run_copied(command)  # the command y copies prints the same comparison
        np.testing.assert_allclose(np.array(doc["delta"]), expected, atol=1e-6)  # fixed: JSON's 6 digits
        assert doc["cropped"] == app.result.comparison.cropped
        await press(app, pilot, "left_curly_bracket")  # head 1: both sides follow
        np.testing.assert_allclose(app.result.comparison.a, model.attentions(model.encode(SENTENCE))[0, 1][:R, :C],
                                   atol=1e-9)
        await press(app, pilot, "z")  # --hide-special is not attn compare's: refused, the comparison stays
        assert "drop --hide-special" in app.message and app.state.compare_text == OTHER and not app.state.hide_special
        await press(app, pilot, "C")
        assert app.state.compare_text is None and app.result.view is not None

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(200, 80))


def test_C_then_escape_changes_nothing(tiny_bert_dir):
    async def script(app, pilot):
        before = app.result
        await press(app, pilot, "C", "escape")
        assert app.state.compare_text is None and app.result is before and app.message == ""

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(80, 30))


@pytest.mark.parametrize("view", ["flow", "lens", "compare"])
def test_exports_of_the_new_views(tiny_bert_dir, tiny_gpt2_dir, tmp_path, view):
    import json

    from attncli.explore.checkpoint_state import compute
    from attncli.explore.state import export

    model = str(tiny_gpt2_dir if view == "lens" else tiny_bert_dir)
    state = ExploreState(SENTENCE, transformer=model, flow=view == "flow", lens=view == "lens",
                         compare_text=OTHER if view == "compare" else None)
    res = compute(state, {})
    doc = json.loads(export(res, state, "view.json", tmp_path).read_text())
    svg = export(res, state, "view.svg", tmp_path).read_text()
    assert svg.startswith("<svg") and "arrow" in svg
    key = {"flow": "weights", "lens": "lens", "compare": "delta"}[view]
    assert key in doc


@pytest.mark.parametrize("width", [40])
@pytest.mark.parametrize("view", ["flow", "lens", "compare"])
def test_the_new_views_draw_at_narrow_widths(tiny_bert_dir, tiny_gpt2_dir, width, view):
    model = tiny_gpt2_dir if view == "lens" else tiny_bert_dir

    async def script(app, pilot):
        if view == "compare":
            await compare_with(app, pilot, OTHER)
        else:
            await press(app, pilot, {"flow": "o", "lens": "L"}[view])
        assert app.message == "" and app.result is not None and getattr(app.result, "is_pretrained", False)
        assert any(line.strip() for line in lines_of(app))
        await pilot.resize_terminal(width + 20, 30)
        await settle(app, pilot)

    drive(script, ExploreState(SENTENCE, transformer=str(model)), size=(width, 30))


@pytest.mark.parametrize("view", ["flow", "lens", "compare"])
def test_snapshot_at_80_columns(snap_compare, tiny_bert_dir, tiny_gpt2_dir, tmp_path, monkeypatch, view):
    """Each new view as drawn at 80 x 40 (pytest-textual-snapshot; tests/explore/__snapshots__/). The
    model is named by a relative path, so the titles read the same on every machine."""
    needed("pytest_textual_snapshot", reason="the snapshot tests need pytest-textual-snapshot")
    from attncli.explore.app import ExploreApp

    name = "tiny-gpt2" if view == "lens" else "tiny-bert"
    (tmp_path / name).symlink_to(tiny_gpt2_dir if view == "lens" else tiny_bert_dir, target_is_directory=True)
    monkeypatch.chdir(tmp_path)

    async def run_before(pilot) -> None:
        app = pilot.app
        await settle(app, pilot)
        if view == "compare":
            await compare_with(app, pilot, OTHER)
        else:
            await press(app, pilot, {"flow": "o", "lens": "L"}[view])
        assert app.message == ""
        # the vertical scrollbar that a tall view brings narrows the pane, and the redraw that
        # follows can race the snapshot (a stray horizontal scrollbar, seen once in about six runs): draw
        # again at the settled width, then let the layout settle
        await pilot.pause(0.2)
        app._draw()
        await settle(app, pilot)

    assert snap_compare(ExploreApp(ExploreState(SENTENCE, transformer=name), cwd=tmp_path), terminal_size=(80, 40),
                        run_before=run_before)


def test_M_from_the_lens_or_a_comparison_opens_the_model_view(tiny_gpt2_dir):
    async def script(app, pilot):
        await press(app, pilot, "L", "M")
        assert app.state.model_view and not app.state.lens and getattr(app.result, "is_model_view", False)
        await press(app, pilot, "M")  # back to a head's ordinary view
        await compare_with(app, pilot, OTHER)
        await press(app, pilot, "M")
        assert app.state.model_view and app.state.compare_text is None and app.result.is_model_view

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir)), size=(120, 40))


def test_a_hostile_second_text_reaches_the_screen_escaped(tiny_bert_dir):
    async def script(app, pilot):
        app._compare_with("\x1b[2Jfruit\x07 flies")  # what the prompt hands over (a paste can hold anything)
        await settle(app, pilot)
        assert app.message == "" and app.state.compare_text.startswith("\x1b")
        drawn = "\n".join(lines_of(app) + lines_of(app, "#settings"))
        assert "\x1b" not in drawn and "\x07" not in drawn and "\\x1b[2Jfruit" in drawn

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 60))


@pytest.mark.parametrize("args,needle", [
    (["--flow", "--head", "1"], "drop --head"), (["--flow", "--rollout"], "drop --rollout"),
    (["--flow", "--show", "norms"], "drop --show"),
])
def test_explore_flow_refuses_what_attn_matrix_flow_refuses(tiny_bert_dir, args, needle):
    from typer.testing import CliRunner

    from attncli.cli.main import app as cli

    result = CliRunner().invoke(cli, ["explore", SENTENCE, "--transformer", str(tiny_bert_dir), *args])
    assert result.exit_code == 2 and needle in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    result = CliRunner().invoke(cli, ["explore", SENTENCE, "--flow"])
    assert result.exit_code == 2 and "--flow needs --transformer" in result.stderr


def test_the_flow_state_round_trips_through_explore_args(monkeypatch):
    """attn explore --flow starts where the app's state says (explore_args, which --serve uses)."""
    import attncli.explore.app as explore_app
    from typer.testing import CliRunner

    from attncli.cli.main import app as cli

    started = []
    monkeypatch.setattr(explore_app, "run", lambda state: started.append(state) or 0)
    state = ExploreState(SENTENCE, transformer="some-model", flow=True, layer=1)
    result = CliRunner().invoke(cli, ["explore", *state.explore_args()])
    assert result.exit_code == 0, result.stderr
    assert started == [state] and "--flow" in state.command_line()
