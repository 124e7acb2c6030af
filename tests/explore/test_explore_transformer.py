"""``attn explore --transformer``: a pretrained model's attention in the app (Textual's harness),
checked against ``attn matrix --transformer ... --json`` run from the command the app copies.
The model is the tiny random BERT of the transformer tests (WordPiece: "flies" -> "fl ##ies")."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")

import re  # noqa: E402

from test_explore import drive, lines_of, press, settle  # noqa: E402

from _tolerance import f32_close  # noqa: E402

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
    (("N",), {"norms": True}),  # --show norms: the explanation is alpha, ||f(x)|| and their product
])
def test_the_drawn_view_is_attn_matrix_transformer_json(tiny_bert_dir, keys, expect):
    async def script(app, pilot):
        await press(app, pilot, "right", "down", *keys)
        assert app.message == ""
        for name, value in expect.items():
            assert getattr(app.state, name) == value
        explained = app.result.explainable() is None
        doc = transformer_json(app.state.command_line(explain=explained))
        view = app.result.view
        weights = np.array(doc["words"]["weights"] if app.state.words else doc["weights"], dtype=float)
        rtol = 1e-5 if app.state.norms else 0  # fixed: JSON's 6 digits; norms reach 10 and more: the JSON keeps 6 significant digits
        np.testing.assert_allclose(view.words.weights if app.state.words else view.weights, weights, atol=1e-6, rtol=rtol)  # fixed: JSON's 6 digits
        tokens = doc["words"]["tokens"] if app.state.words else doc["tokens"]
        drawn = last_table(lines_of(app), tokens)
        np.testing.assert_allclose(drawn, weights, atol=5e-4 + 1e-9)  # fixed: as drawn
        if explained:
            assert doc["explanation"]["query"]["index"] == 1 and doc["explanation"]["key"]["index"] == 1
            assert app.explanation["weight"] == pytest.approx(doc["explanation"]["weight"], abs=1e-6)  # fixed: JSON's 6 digits
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
        np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits
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
    """The pass after a key is held in its worker until the test has looked (an event, not a
    sleep: a 0.5 s sleep let the pass end before the first look on a busy machine, and in CI)."""
    import threading

    import attncli.explore.checkpoint_state as pretrained

    real = pretrained.compute
    armed, release = threading.Event(), threading.Event()

    def held(state, models):
        if armed.is_set():
            release.wait(timeout=30)
        return real(state, models)

    monkeypatch.setattr(pretrained, "compute", held)

    async def script(app, pilot):
        scroll = app.query_one("#matrix-scroll")
        armed.set()
        await pilot.press("left_square_bracket")
        assert scroll.loading and app.computing  # the key returned at once, the pass goes on
        await pilot.press("down")  # the UI still takes keys (the cursor waits for the new matrix)
        assert scroll.loading and app.computing
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not scroll.loading and not app.computing and app.state.layer == 0

    try:
        drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))
    finally:
        release.set()  # never leave a worker waiting


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
    from attncli.explore.checkpoint_state import command_line

    async def script(app, pilot):
        await press(app, pilot, "right", "down")
        assert app.message == "" and app.state.cursor == (1, 1)
        doc = matrix_doc(SENTENCE, "--transformer", str(tiny_bert_dir), "--pair", PAIR, "--filter", "a-b")
        view = app.result.view
        assert doc["filter"] == app.result.meta["filter"] == "a-b"
        assert view.tokens == doc["tokens"] and view.key_tokens == doc["key_tokens"]  # A's queries, B's keys
        assert set(app.result.enc.segments[t] for t in view.cols) == {"b"}
        np.testing.assert_allclose(view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits
        np.testing.assert_allclose(last_table(lines_of(app), doc["tokens"]), np.array(doc["weights"]), atol=5e-4 + 1e-9)  # fixed: as drawn
        # the cursor's cell (1, 1) of the block is input cell (rows[1], cols[1]): the command takes those
        command = command_line(app.result, app.state)
        args = shlex.split(command)
        assert args[args.index("--filter") + 1] == "a-b"
        i, j = int(view.rows[1]), int(view.cols[1])
        assert j != 1 and args[args.index("--explain") + 1:args.index("--explain") + 3] == [str(i), str(j)]
        copied = transformer_json(command)
        assert copied["explanation"]["key"]["index"] == j and copied["explanation"]["query"]["index"] == i
        assert app.explanation["weight"] == pytest.approx(copied["explanation"]["weight"], abs=1e-6)  # fixed: JSON's 6 digits
        assert app.explanation["weight"] == pytest.approx(view.weights[1, 1], abs=1e-6)  # fixed: JSON's 6 digits

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR, filter="a-b"), size=(160, 50))


def test_f_and_b_cycle_the_filter_and_the_backend_in_the_app(tiny_bert_dir):
    needed("transformers")

    async def script(app, pilot):
        await press(app, pilot, "f")  # no --pair yet: matrix's refusal, the view stays
        assert "--filter picks a block of a sentence pair" in app.message and app.state.filter is None
        app.state = replace(app.state, pair=PAIR)
        await press(app, pilot, "f", "f")
        assert app.message == "" and app.state.filter == "a-b" == app.result.meta["filter"]
        doc = matrix_doc(SENTENCE, "--transformer", str(tiny_bert_dir), "--pair", PAIR, "--filter", "a-b")
        np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits
        assert "--filter a-b" in app.state.command_line(explain=False)
        await press(app, pilot, "F", "F")  # back through a-a to no filter
        assert app.state.filter is None and app.result.meta["filter"] == "all"
        await press(app, pilot, "b")
        assert app.state.backend == "numpy" == app.result.meta["backend"]
        numpy_weights = app.result.view.weights
        await press(app, pilot, "b")
        assert app.state.backend == "torch" == app.result.meta["backend"] and app.message == ""
        f32_close(app.result.view.weights, numpy_weights, depth=2, length=37, per_element=True)  # torch's float32
        assert "--backend torch" in app.state.command_line(explain=False)
        await press(app, pilot, "b")
        assert app.state.backend == "auto"

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def test_backend_torch_and_numpy_give_the_same_weights_and_the_meta_names_each(tiny_bert_dir):
    needed("torch")
    needed("transformers")
    from attncli.explore.checkpoint_state import compute

    models: dict = {}
    state = ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR)
    numpy_res = compute(replace(state, backend="numpy"), models)
    torch_res = compute(replace(state, backend="torch"), models)
    assert (numpy_res.meta["backend"], torch_res.meta["backend"]) == ("numpy", "torch")
    assert set(models) == {(str(tiny_bert_dir), "numpy"), (str(tiny_bert_dir), "torch")}  # one model per backend
    f32_close(torch_res.attentions, numpy_res.attentions, depth=2, length=37, per_element=True)  # (L, h, T, T)
    assert torch_res.explainable() is not None  # the explanation needs the NumPy pass
    assert compute(replace(state, backend="torch"), models).model is torch_res.model  # loaded once
    command = replace(state, backend="torch").command_line(explain=False)
    assert "--backend torch" in command
    doc = transformer_json(command)
    assert doc["backend"] == "torch"
    np.testing.assert_allclose(torch_res.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits


def test_truncate_cuts_a_long_text_and_without_it_the_message_is_attn_matrixs(tiny_bert_dir):
    from attncli.errors import BadInput
    from attncli.explore.checkpoint_state import compute

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
    np.testing.assert_allclose(res.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits
    assert transformer_json(replace(state, truncate=True).command_line(explain=False))["truncated"] is True


def test_the_command_line_and_explore_args_carry_filter_backend_truncate(monkeypatch):
    import attncli.explore.app as explore_app

    state = ExploreState(SENTENCE, transformer="some/model", pair=PAIR, filter="b-a", backend="torch",
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
                                  ["--transformer", "TINY", "--layer", "-1"], ["--model-view"], ["--layers", "0-1"],
                                  ["--transformer", "TINY", "--model-view", "--head", "1"],
                                  ["--transformer", "TINY", "--model-view", "--rollout"],
                                  ["--transformer", "TINY", "--model-view", "--explain", "1", "1"],
                                  ["--transformer", "TINY", "--layers", "0-1"],
                                  ["--transformer", "TINY", "--model-view", "--layers", "x"]])
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

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), pair=PAIR, filter="a-a"), size=(160, 50))


# ---------------------------------------------------------------- the model view (M, --model-view)


def matrix_at(columns: int, *args: str):
    """attn matrix ARGS with a console COLUMNS wide (made afresh: it is cached per process)."""
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    try:
        result = CliRunner().invoke(cli, ["matrix", *args], env={"COLUMNS": str(columns)})
    finally:
        cli_app._consoles.clear()
    assert result.exit_code == 0, result.output
    return result.stdout


def drawn_shades(lines: list[str], layer: int, heads: int, T: int, width: int) -> np.ndarray:
    """(heads, T, T) the shade characters of one layer's maps as drawn (the layout of the model view:
    a map is T cells of 2 characters, a block max(2T, 10) wide and 2 apart, as many per row as fit)."""
    cell = 2 if (T * 2 + 2) * 2 <= width else 1
    block_w = max(T * cell, 10)
    per_row = (width - 1) // (block_w + 2)
    y = lines.index(next(line for line in lines if line.rstrip() == f"layer {layer}")) + 1
    out = np.empty((heads, T, T), dtype=object)
    for start in range(0, heads, per_row):
        rows = lines[y + 1:y + 1 + T]  # below the group's header
        for n, h in enumerate(range(start, min(start + per_row, heads))):
            x0 = n * (block_w + 2)
            for i, row in enumerate(rows):
                out[h, i] = [row.ljust(width)[x0 + j * cell] for j in range(T)]
        y += 1 + T
    return out


def expected_shades(m: np.ndarray) -> np.ndarray:
    """The shade of each weight (bins of docs/transformers.md: ' ' < 0.05 <= ░ < 0.2 <= ▒ < 0.4 <= ▓ < 0.7 <= █)."""
    bins = np.array([0.05, 0.2, 0.4, 0.7])
    return np.array([" ", "░", "▒", "▓", "█"], dtype=object)[np.searchsorted(bins, m, side="right")]


@pytest.mark.parametrize("keys,start,args", [
    (("M",), {}, []),
    ((), {"model_view": True, "layers": "1-1", "hide_special": True, "pair": PAIR},
     ["--layers", "1-1", "--hide-special", "--pair", PAIR]),
])
def test_the_model_view_is_attn_matrix_model_view(tiny_bert_dir, keys, start, args):
    async def script(app, pilot):
        await press(app, pilot, *keys)
        assert app.message == "" and app.state.model_view and app.result.is_model_view
        command = app.state.command_line()
        assert "--model-view" in shlex.split(command) and "--explain" not in command
        doc = transformer_json(command)
        assert doc == matrix_doc(SENTENCE, "--transformer", str(tiny_bert_dir), "--model-view", *args)
        lo, hi = doc["layer_range"][0], doc["layer_range"][1] + 1
        L, H = hi - lo, doc["heads"]
        T = len(doc["tokens"])
        attentions = np.array(doc["attentions"]).reshape(L, H, T, T)  # layer-major, as documented
        np.testing.assert_allclose(app.result.attentions[lo:hi], attentions, atol=1e-6)  # fixed: JSON's 6 digits
        assert [app.result.classes[layer] for layer in range(lo, hi)] == doc["classes"]
        # the drawing: every map's shades are those of the JSON's weights (rows renormalised over
        # the other keys with --hide-special), and the lines are attn matrix --model-view's at this width
        keep = ~np.array(doc["special"]) if app.state.hide_special else np.ones(T, dtype=bool)
        width = app.query_one("#matrix").content_size.width - 1
        lines = lines_of(app)
        for layer in range(lo, hi):
            m = attentions[layer - lo][:, keep][:, :, keep]  # (h, T', T')
            m = m / m.sum(axis=-1, keepdims=True)
            shades = drawn_shades(lines, layer, H, int(keep.sum()), width)
            assert (shades == expected_shades(m)).all(), layer
        cli_lines = matrix_at(width, SENTENCE, "--transformer", str(tiny_bert_dir), "--model-view", *args).splitlines()
        legend = next(n for n, line in enumerate(cli_lines) if line.startswith("each map:"))
        assert [line.rstrip() for line in lines[:legend]] == [line.rstrip() for line in cli_lines[:legend]]

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), **start), size=(160, 50))


def test_the_model_view_title_wraps_as_attn_matrix_whatever_its_length(tiny_bert_dir, tmp_path, monkeypatch):
    """The title holds the model's path: at the view's width plus 0, 1 or 2 characters it wraps in
    the app where attn matrix --model-view wraps it at that width (the app once wrapped it a column
    later, so a test passed or failed with the length of pytest's temp path)."""
    import shutil

    monkeypatch.chdir(tmp_path)
    probe = matrix_at(400, SENTENCE, "--transformer", str(tiny_bert_dir), "--model-view").splitlines()[0]
    rest = len(probe) - len(str(tiny_bert_dir))  # the title without the model's name

    async def script(app, pilot):
        width = app.query_one("#matrix").content_size.width - 1
        for over in (0, 1, 2):
            name = "m" * (width + over - rest)
            shutil.copytree(tiny_bert_dir, tmp_path / name)
            app.recompute(replace(app.state, transformer=name))
            await settle(app, pilot)
            assert app.query_one("#matrix").content_size.width - 1 == width
            lines = lines_of(app)
            cli_lines = matrix_at(width, SENTENCE, "--transformer", name, "--model-view").splitlines()
            assert len(name) + rest == width + over and cli_lines[0].startswith(name)
            tokens = next(n for n, line in enumerate(cli_lines) if line.startswith("tokens:"))
            assert [line.rstrip() for line in lines[:tokens + 1]] == [line.rstrip() for line in cli_lines[:tokens + 1]], over

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), model_view=True), size=(160, 50))


def click_offset(app, meta_key: str, value) -> tuple[int, int]:
    """(x, y) in the matrix view of the first character whose style carries meta {meta_key: value}."""
    view = app.query_one("#matrix")
    y = view.line_of(meta_key, value)
    x = 0
    for segment in view._strips[y]:
        if segment.style is not None and segment.style.meta.get(meta_key) == value:
            return x, y
        x += segment.cell_length
    raise AssertionError(f"no {meta_key} {value} drawn")


def test_the_cursor_picks_a_head_and_enter_opens_it(tiny_bert_dir):
    async def script(app, pilot):
        await press(app, pilot, "M")
        assert app.state.grid == (1, 0)  # this view's layer (the last) and head (all heads: 0)
        await press(app, pilot, "up", "right", "right", "right", "right", "left")
        assert app.state.grid == (0, 2) and app.state.model_view  # stopped at the edges
        model_doc = transformer_json(app.state.command_line())
        label = model_doc["classes"][0][2]["label"]
        assert "layer 0 head 2" in app.state.summary()
        status = str(app.query_one("#settings").render())
        assert "layer 0 head 2" in status and label in status
        assert f"layer 0 head 2: {label}" in "\n".join(lines_of(app, "#explain"))
        await press(app, pilot, "enter")
        assert (app.state.layer, app.state.head, app.state.model_view) == (0, 2, False)
        assert not app.result.is_model_view and app.message == ""
        doc = transformer_json(app.state.command_line(explain=False))
        assert (doc["layer"], doc["head"]) == (0, 2)
        weights = np.array(doc["weights"])
        np.testing.assert_allclose(app.result.view.weights, weights, atol=1e-6)  # fixed: JSON's 6 digits
        np.testing.assert_allclose(last_table(lines_of(app), doc["tokens"]), weights, atol=5e-4 + 1e-9)  # fixed: as drawn
        # M comes back with the cursor on that head; a click on another head moves it; M opens it
        await press(app, pilot, "M")
        assert app.state.model_view and app.state.grid == (0, 2) and app.state.layer is None
        await press(app, pilot, "right_square_bracket", "left_curly_bracket")
        assert app.state.grid == (1, 1)  # [ ] and { } move over the layers and heads here
        await pilot.click("#matrix", offset=click_offset(app, "grid", (1, 3)))
        await settle(app, pilot)
        assert app.state.grid == (1, 3)
        await press(app, pilot, "M")
        assert (app.state.layer, app.state.head, app.state.model_view) == (1, 3, False)
        doc = transformer_json(app.state.command_line(explain=False))
        np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))


def test_enter_opens_a_head_when_the_model_view_started_with_layers(tiny_bert_dir):
    """--layers is the model view's: leaving the view keeps it for the next M, and is no refusal."""
    async def script(app, pilot):
        assert app.result.is_model_view and app.state.grid == (1, 0)
        await press(app, pilot, "right", "enter")
        assert app.message == "" and not app.result.is_model_view
        assert (app.state.layer, app.state.head, app.state.model_view) == (1, 1, False)
        doc = transformer_json(app.state.command_line(explain=False))
        assert "--layers" not in app.state.command_line(explain=False)
        np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits
        await press(app, pilot, "M")
        assert app.message == "" and app.result.is_model_view and app.state.layers == "1-1"

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), model_view=True, layers="1-1"), size=(160, 50))


def test_what_the_model_view_refuses_is_attn_matrixs_message(tiny_bert_dir):
    refused = CliRunner().invoke(cli, ["matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--model-view",
                                       "--words"])
    words_message = " ".join(refused.stderr.split()).removeprefix("error: ")
    out_of_range = CliRunner().invoke(cli, ["matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--model-view",
                                            "--layers", "0-5"])
    assert refused.exit_code == out_of_range.exit_code == 2

    async def script(app, pilot):
        assert app.message == " ".join(out_of_range.stderr.split()).removeprefix("error: ")  # needs the model: in the app
        app.state = replace(app.state, layers=None)
        app.recompute()
        await settle(app, pilot)
        assert app.message == "" and app.result.is_model_view
        await press(app, pilot, "u")  # --words does not apply to the model view
        assert app.message == words_message and not app.state.words and app.state.model_view
        await press(app, pilot, "z")  # --hide-special does
        assert app.message == "" and app.state.hide_special and app.result.is_model_view

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), model_view=True, layers="0-5"), size=(160, 50))


def test_model_view_exports_are_what_attn_matrix_model_view_writes(tiny_bert_dir, tmp_path):
    async def script(app, pilot):
        for name in ("mv.json", "mv.html", "mv.svg"):
            await press(app, pilot, "x")
            app.screen.query_one("#export-path").value = name
            await pilot.press("enter")
            await settle(app, pilot)
            assert app.message == f"wrote {tmp_path / name}"

    app = drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), model_view=True, layers="0-1"),
                size=(160, 50), cwd=tmp_path)
    args = [SENTENCE, "--transformer", str(tiny_bert_dir), "--model-view", "--layers", "0-1"]
    assert json.loads((tmp_path / "mv.json").read_text()) == matrix_doc(*args)
    matrix_at(160, *args, "--html", str(tmp_path / "matrix.html"), "--svg", str(tmp_path / "matrix.svg"))

    def data_of(page: str) -> dict:
        return json.loads(re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', page, re.S).group(1))

    # .html: the interactive page, on the same data and state as attn matrix's (tests/views/test_page.py)
    assert data_of((tmp_path / "mv.html").read_text()) == data_of((tmp_path / "matrix.html").read_text())
    from test_export import svg_lines

    drawn, printed = svg_lines((tmp_path / "mv.svg").read_text()), svg_lines((tmp_path / "matrix.svg").read_text())
    assert drawn[:len(printed)] == printed  # both laid out for the file, whatever the window or terminal
    assert " ".join(s.strip() for s in drawn[len(printed):] if s.strip()) == app.state.command_line()  # wrapped
    assert any("▓" in line for line in printed)
    svg = (tmp_path / "mv.svg").read_text()
    assert svg.startswith("<svg") and "model&#160;view" in svg


def test_the_command_line_and_explore_args_carry_the_model_view(monkeypatch):
    import attncli.explore.app as explore_app

    state = ExploreState(SENTENCE, transformer="some/model", pair=PAIR, hide_special=True, model_view=True, layers="0-1")
    args = shlex.split(state.command_line())
    assert args[:2] == ["attn", "matrix"] and "--model-view" in args and args[args.index("--layers") + 1] == "0-1"
    assert not {"--explain", "--layer", "--head"} & set(args)
    opened = state.open_head((1, 2))
    assert (opened.layer, opened.head, opened.model_view) == (1, 2, False)
    assert "--model-view" not in opened.command_line() and "--layers" not in opened.command_line()
    started = []
    monkeypatch.setattr(explore_app, "run", lambda s: started.append(s) or 0)
    result = CliRunner().invoke(cli, ["explore", *state.explore_args()])  # what --serve starts in each tab
    assert result.exit_code == 0, result.output
    assert started == [state]


def test_norms_key_explains_an_off_diagonal_cell_as_attn_matrix_does(tiny_bert_dir):
    """N (--show norms): the cursor's explanation (alpha, ||f(x_J)||, product) is the command line's."""
    async def script(app, pilot):
        await press(app, pilot, "right", "right", "down", "N")
        assert app.message == "" and app.state.norms and app.state.cursor == (1, 2)
        command = app.state.command_line(explain=True)
        assert "--show norms" in command and "--explain 1 2" in command
        doc = transformer_json(command)
        assert doc["show"] == "norms" and doc["explanation"]["show"] == "norms"
        assert app.explanation["weight"] == pytest.approx(doc["explanation"]["weight"], rel=1e-5)  # fixed: JSON's 6 digits
        assert app.explanation["weight"] == pytest.approx(app.result.view.weights[1, 2], rel=1e-9)
        await press(app, pilot, "r")  # rollout and norms do not mix: refused, the last good view stays
        assert "--rollout" in app.message

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(160, 50))
