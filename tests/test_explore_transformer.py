"""``attn explore --transformer``: a pretrained model's attention in the app (Textual's harness),
checked against ``attn matrix --transformer ... --json`` run from the command the app copies.
The model is the tiny random BERT of the transformer tests (WordPiece: "flies" -> "fl ##ies")."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("textual", reason="attn explore needs the explore extra (textual)")
pytest.importorskip("safetensors", reason="the NumPy transformer path needs the pretrained extra")

import re  # noqa: E402

from test_explore import drive, lines_of, press, settle  # noqa: E402

from attncli.cli.main import app as cli  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402

SENTENCE, PAIR = "time flies like an arrow", "fruit flies like a banana"


def last_table(lines: list[str], tokens: list[str]) -> np.ndarray:
    """The numbers of the last heatmap drawn (the mean of the heads, or the one head): its rows are
    the last len(tokens) lines labelled "N token" (N: the input position)."""
    rows = []
    for line in lines:
        m = re.match(r"^\s*\d+ (?:[AB] )?(\S+)\s+(.*)$", line)
        if m and m.group(1).rstrip("…") and any(t.startswith(m.group(1).rstrip("…")) for t in tokens):
            cells = re.findall(r"-?\d+\.\d+", m.group(2))
            if cells:
                rows.append([float(c) for c in cells])
    return np.array(rows[-len(tokens):])


def transformer_json(command: str) -> dict:
    args = shlex.split(command)
    assert args[:2] == ["attn", "matrix"] and "--transformer" in args
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("keys,expect", [
    ((), {}),
    (("left_square_bracket",), {"layer": 0}),
    (("left_curly_bracket",), {"head": 3}),
    (("right_curly_bracket", "right_curly_bracket"), {"head": 1}),
    (("u",), {"words": True}),
    (("z",), {"hide_special": True}),
    (("r",), {"rollout": True}),
])
def test_the_drawn_view_is_attn_matrix_transformer_json(tiny_bert_dir, keys, expect):
    async def script(app, pilot):
        await press(app, pilot, "right", "down", *keys)
        assert app.message == ""
        for name, value in expect.items():
            assert getattr(app.state, name) == value
        explained = app.result.explainable(app.state) is None
        doc = transformer_json(app.state.command_line(explain=explained))
        view = app.result.view
        weights = np.array(doc["words"]["weights"] if app.state.words else doc["weights"], dtype=float)
        np.testing.assert_allclose(view.words.weights if app.state.words else view.weights, weights, atol=1e-6)
        tokens = doc["words"]["tokens"] if app.state.words else doc["tokens"]
        drawn = last_table(lines_of(app), tokens)
        np.testing.assert_allclose(drawn, weights, atol=5e-4 + 1e-9)
        if explained:
            assert doc["explanation"]["query"]["index"] == 1 and doc["explanation"]["key"]["index"] == 1
            assert app.explanation["weight"] == pytest.approx(doc["explanation"]["weight"], abs=1e-6)
            assert "cell (1, 1): query 'time' -> key 'time'" in "\n".join(lines_of(app, "#explain"))
        else:
            assert app.explanation is None and "no explanation" in "\n".join(lines_of(app, "#explain"))

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def test_a_pair_and_switching_to_the_word_vectors_and_back(tiny_bert_dir):
    async def script(app, pilot):
        await press(app, pilot, "k")
        await pilot.press(*PAIR, "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.state.pair == PAIR and "[SEP]" in app.result.enc.tokens[:-1]
        doc = transformer_json(app.state.command_line())
        np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)
        await press(app, pilot, "T")  # the word vectors' matrix of the same sentence
        assert app.state.transformer is None and app.result.tokens == SENTENCE.split()
        await press(app, pilot, "c")
        assert app.state.causal and app.message == ""
        await press(app, pilot, "T")
        assert app.state.transformer == str(tiny_bert_dir) and app.state.pair == PAIR

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def test_refusals_are_messages(tiny_bert_dir):
    async def script(app, pilot):
        await press(app, pilot, "left_curly_bracket", "r")
        assert "--rollout uses every head" in app.message and not app.state.rollout and app.state.head == 3
        await press(app, pilot, "v")
        assert "belongs to the word-vector matrix" in app.message
        for _ in range(3):
            await press(app, pilot, "right_square_bracket")
        assert app.state.layer == 1  # the last layer of two: it stays there
        await press(app, pilot, "down")
        assert app.state.cursor == (1, 0)

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def test_word_vector_mode_says_what_needs_a_transformer():
    async def script(app, pilot):
        await press(app, pilot, "u")
        assert "--words needs a pretrained transformer" in app.message
        await press(app, pilot, "T")
        assert "T needs a pretrained transformer" in app.message

    drive(script)


def test_the_forward_pass_runs_in_a_worker_with_a_spinner(tiny_bert_dir, monkeypatch):
    import attncli.explore.pretrained as pretrained

    real = pretrained.compute

    def slow(state, models):
        time.sleep(0.5)
        return real(state, models)

    monkeypatch.setattr(pretrained, "compute", slow)

    async def script(app, pilot):
        scroll = app.query_one("#matrix-scroll")
        await pilot.press("left_square_bracket")
        assert scroll.loading and app.computing  # the key returned at once, the pass goes on
        await pilot.press("down")  # the UI still takes keys (the cursor waits for the new matrix)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not scroll.loading and app.state.layer == 0

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def test_the_command_refuses_transformer_options_without_a_transformer():
    result = CliRunner().invoke(cli, ["explore", "--words"])
    assert result.exit_code == 2 and "--words needs --transformer" in result.stderr


def test_export_json_is_the_commands_json(tiny_bert_dir, tmp_path):
    async def script(app, pilot):
        await press(app, pilot, "down", "left_curly_bracket", "x")
        app.screen.query_one("#export-path").value = "view.json"
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.message == f"wrote {tmp_path / 'view.json'}"

    app = drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50), cwd=tmp_path)
    written = json.loads((tmp_path / "view.json").read_text())
    assert written == transformer_json(app.state.command_line())
    assert written["head"] == 3 and written["explanation"]["query"]["index"] == 1


# ---------------------------------------------------------------- --filter, --backend, --truncate


def matrix_run(*args: str):
    return CliRunner().invoke(cli, ["matrix", *args])


def matrix_doc(*args: str) -> dict:
    result = matrix_run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_filter_is_attn_matrix_filter_and_the_copied_command_explains_the_same_cell(tiny_bert_dir):
    from attncli.explore.pretrained import command_line

    async def script(app, pilot):
        await press(app, pilot, "right", "down")
        assert app.message == "" and app.state.cursor == (1, 1)
        doc = matrix_doc(SENTENCE, "--transformer", str(tiny_bert_dir), "--pair", PAIR, "--filter", "a-b")
        view = app.result.view
        assert doc["filter"] == app.result.meta["filter"] == "a-b"
        assert view.tokens == doc["tokens"] and view.key_tokens == doc["key_tokens"]  # A's queries, B's keys
        assert set(app.result.enc.segments[t] for t in view.cols) == {"b"}
        np.testing.assert_allclose(view.weights, np.array(doc["weights"]), atol=1e-6)
        np.testing.assert_allclose(last_table(lines_of(app), doc["tokens"]), np.array(doc["weights"]), atol=5e-4 + 1e-9)
        # the cursor's cell (1, 1) of the block is input cell (rows[1], cols[1]): the command takes those
        command = command_line(app.result, app.state)
        args = shlex.split(command)
        assert args[args.index("--filter") + 1] == "a-b"
        i, j = int(view.rows[1]), int(view.cols[1])
        assert j != 1 and args[args.index("--explain") + 1:args.index("--explain") + 3] == [str(i), str(j)]
        copied = transformer_json(command)
        assert copied["explanation"]["key"]["index"] == j and copied["explanation"]["query"]["index"] == i
        assert app.explanation["weight"] == pytest.approx(copied["explanation"]["weight"], abs=1e-6)
        assert app.explanation["weight"] == pytest.approx(view.weights[1, 1], abs=1e-6)

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR, pair_filter="a-b"), size=(160, 50))


def test_backend_torch_and_numpy_give_the_same_weights_and_the_meta_names_each(tiny_bert_dir):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from attncli.explore.pretrained import compute

    models: dict = {}
    state = ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR)
    numpy_res = compute(replace(state, backend="numpy"), models)
    torch_res = compute(replace(state, backend="torch"), models)
    assert (numpy_res.meta["backend"], torch_res.meta["backend"]) == ("numpy", "torch")
    assert set(models) == {(str(tiny_bert_dir), "numpy"), (str(tiny_bert_dir), "torch")}  # one model per backend
    np.testing.assert_allclose(torch_res.attentions, numpy_res.attentions, atol=1e-5)  # (L, h, T, T)
    assert torch_res.explainable(state) is not None  # the explanation needs the NumPy pass
    assert compute(replace(state, backend="torch"), models).model is torch_res.model  # loaded once
    command = replace(state, backend="torch").command_line(explain=False)
    assert "--backend torch" in command
    doc = transformer_json(command)
    assert doc["backend"] == "torch"
    np.testing.assert_allclose(torch_res.view.weights, np.array(doc["weights"]), atol=1e-6)


def test_truncate_cuts_a_long_text_and_without_it_the_message_is_attn_matrixs(tiny_bert_dir):
    from attncli.errors import BadInput
    from attncli.explore.pretrained import compute

    long = " ".join([SENTENCE] * 10)  # 60 word pieces: more than the tiny model's 40 positions
    state = ExploreState(long, transformer=str(tiny_bert_dir))
    refused = matrix_run(long, "--transformer", str(tiny_bert_dir))
    assert refused.exit_code == 2
    with pytest.raises(BadInput) as exc:
        compute(state, {})
    assert "error: " + str(exc.value) == " ".join(refused.stderr.split())
    res = compute(replace(state, truncate=True), {})
    doc = matrix_doc(long, "--transformer", str(tiny_bert_dir), "--truncate")
    assert res.meta["truncated"] is doc["truncated"] is True and len(res.enc.tokens) == len(doc["tokens"]) == 40
    np.testing.assert_allclose(res.view.weights, np.array(doc["weights"]), atol=1e-6)
    assert transformer_json(replace(state, truncate=True).command_line(explain=False))["truncated"] is True


def test_the_command_line_and_explore_args_carry_filter_backend_truncate(monkeypatch):
    import attncli.explore.app as explore_app

    state = ExploreState(SENTENCE, transformer="some/model", pair=PAIR, pair_filter="b-a", backend="torch",
                         truncate=True, layer=0, cursor=(2, 1))
    args = shlex.split(state.command_line(explain=False))
    assert args[:2] == ["attn", "matrix"]
    for option, value in (("--filter", "b-a"), ("--backend", "torch"), ("--pair", PAIR)):
        assert args[args.index(option) + 1] == value
    assert "--truncate" in args
    plain = shlex.split(ExploreState(SENTENCE, transformer="some/model").command_line(explain=False))
    assert not {"--filter", "--backend", "--truncate"} & set(plain)  # the defaults are left out
    started = []
    monkeypatch.setattr(explore_app, "run", lambda s: started.append(s) or 0)
    result = CliRunner().invoke(cli, ["explore", *state.explore_args()])  # what --serve starts in each tab
    assert result.exit_code == 0, result.output
    assert started == [state]


@pytest.mark.parametrize("args", [["--filter", "a-b"], ["--backend", "numpy"], ["--truncate"],
                                  ["--filter", "a-b", "--transformer", "TINY"],
                                  ["--filter", "b-b", "--transformer", "TINY", "--words"],
                                  ["--transformer", "TINY", "--rollout", "--head", "1"],
                                  ["--transformer", "TINY", "--layer", "-1"]])
def test_bad_combinations_exit_2_with_attn_matrixs_message(tiny_bert_dir, args):
    args = [str(tiny_bert_dir) if a == "TINY" else a for a in args]
    explore, matrix = CliRunner().invoke(cli, ["explore", SENTENCE, *args]), matrix_run(SENTENCE, *args)
    assert explore.exit_code == matrix.exit_code == 2, (explore.output, matrix.output)
    message = " ".join(explore.stderr.split())
    assert message.startswith("error: --") and "Traceback" not in explore.stderr
    assert message == " ".join(matrix.stderr.split())


def test_a_filter_whose_pair_is_removed_in_the_app_is_refused_there(tiny_bert_dir):
    async def script(app, pilot):
        assert app.result.meta["filter"] == "a-a"
        await press(app, pilot, "k")
        app.query_one("#context").value = ""
        await pilot.press("enter")
        await settle(app, pilot)
        assert "--filter picks a block of a sentence pair" in app.message
        assert app.state.pair == PAIR  # the settings of the view on screen stay

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR, pair_filter="a-a"), size=(160, 50))
