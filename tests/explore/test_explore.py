"""``attn explore``: the Textual app through Textual's own harness (``App.run_test`` and its Pilot),
and the served page in headless Chromium.

The numbers the app draws are checked against ``attn matrix ... --json`` for the same settings,
run through the CLI runner from the command line the app copies. pytest-asyncio is not needed:
each test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import _needed_under_ci, needed
from typer.testing import CliRunner

needed("textual", reason="attn explore needs the explore extra (textual)")

from attncli.attention.explain import explain  # noqa: E402
from attncli.cli.main import app as cli  # noqa: E402
from attncli.explore.app import ExploreApp, HelpScreen, MatrixView  # noqa: E402
from attncli.explore.keys import KEYS  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402

SENTENCE = "time flies like an arrow"
REPO = Path(__file__).resolve().parents[2]


def drive(script, state: ExploreState | None = None, size=(120, 40), cwd: Path | None = None, app=None,
          notifications: bool = False):
    """Run ``await script(app, pilot)`` inside the app, headless (``notifications``: with the toasts
    drawn, which the harness leaves out by default); the app afterwards."""
    app = app or ExploreApp(state or ExploreState(SENTENCE), cwd=cwd)

    async def main():
        async with app.run_test(size=size, notifications=notifications) as pilot:
            await settle(app, pilot)
            await script(app, pilot)

    asyncio.run(asyncio.wait_for(main(), timeout=60))
    return app


async def settle(app, pilot) -> None:
    """Wait until every worker is done and the screen is redrawn."""
    await app.workers.wait_for_complete()
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def press(app, pilot, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await settle(app, pilot)


def lines_of(app, selector: str = "#matrix") -> list[str]:
    widget = app.screen.query_one(selector)
    return [strip.text for strip in widget.render_lines(widget.region.reset_offset)]


def drawn_matrix(lines: list[str], tokens: list[str]) -> np.ndarray:
    """The numbers of the (last) heatmap table as drawn: NaN where a cell shows '·' (masked)."""
    rows: dict[int, list[float]] = {}
    for line in lines:
        m = re.match(r"^\s*(\d+) (\S+)\s+(.*)$", line)
        if not m or int(m.group(1)) >= len(tokens) or not tokens[int(m.group(1))].startswith(m.group(2).rstrip("…")):
            continue
        cells = re.findall(r"-?\d+\.\d+|·", m.group(3))
        rows.setdefault(int(m.group(1)), []).extend(float("nan") if c == "·" else float(c) for c in cells)  # pages
    return np.array([rows[i] for i in range(len(tokens))])


def matrix_json(command: str) -> dict:
    """Run the copied ``attn matrix ...`` command with --json through the CLI runner."""
    args = shlex.split(command)
    assert args[:2] == ["attn", "matrix"]
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------------- the numbers


@pytest.mark.parametrize("keys,expect", [
    ((), {}),
    (("c",), {"causal": True}),
    (("w",), {"window": 1}),
    (("c", "w", "w"), {"causal": True, "window": 2}),
    (("a", "a"), {"pad_to": 7}),
    (("v",), {"variant": "additive"}),
    (("n",), {"positions": "none"}),
    (("p",), {"projection": "random"}),
    (("s",), {"show": "scores"}),
])
def test_the_drawn_matrix_is_attn_matrix_json(keys, expect):
    async def script(app, pilot):
        await press(app, pilot, *keys)
        for name, value in expect.items():
            assert getattr(app.state, name) == value
        doc = matrix_json(app.state.command_line())
        assert doc["tokens"] == app.result.tokens
        weights = np.array(doc["weights"], dtype=float)
        np.testing.assert_allclose(app.result.attention.weights, weights, atol=1e-6)  # fixed: JSON's 6 digits
        what = "scores" if app.state.show == "scores" else "weights"
        expected = np.array([[np.nan if x is None else x for x in row] for row in doc[what]], dtype=float)
        if what == "weights":
            expected[~app.result.attention.mask] = np.nan  # drawn as '·'
        drawn = drawn_matrix(lines_of(app), app.result.tokens)
        assert drawn.shape == expected.shape
        assert np.array_equal(np.isnan(drawn), np.isnan(expected))
        ok = ~np.isnan(expected)
        decimals = 3 if what == "weights" else 2
        np.testing.assert_allclose(drawn[ok], expected[ok], atol=0.5 * 10**-decimals + 1e-9)

    drive(script)


def test_settings_cycle_and_the_status_line_follows():
    async def script(app, pilot):
        variants = {app.state.variant}
        for _ in range(9):
            await press(app, pilot, "v")
            variants.add(app.state.variant)
            assert app.message == "" or "error" not in app.message
        assert len(variants) >= 8
        await press(app, pilot, "V")
        await press(app, pilot, "c", "w", "w", "W")
        assert (app.state.causal, app.state.window) == (True, 1)
        line = lines_of(app, "#settings")[0]
        assert "causal + window 1" in line and f"variant {app.state.variant}" in line
        await press(app, pilot, "W")
        assert app.state.window is None
        await press(app, pilot, "s", "s")
        assert app.state.show == "output"
        assert "output vectors" in "\n".join(lines_of(app))

    drive(script)


# ---------------------------------------------------------------------------------- the cursor


def test_the_explanation_follows_the_cursor_keys_and_clicks():
    async def script(app, pilot):
        await press(app, pilot, "right", "right", "down")
        assert app.state.cursor == (1, 2)
        assert app.explanation == explain(app.result, 1, 2)
        doc = matrix_json(app.state.command_line())  # the copied command carries --explain 1 2
        assert doc["explanation"]["query"] == {"index": 1, "token": "flies"}
        assert doc["explanation"]["key"] == {"index": 2, "token": "like"}
        assert doc["explanation"]["weight"] == pytest.approx(app.explanation["weight"], abs=1e-6)  # fixed: JSON's 6 digits
        panel = "\n".join(lines_of(app, "#explain"))
        assert "cell (1, 2): query 'flies' -> key 'like'" in panel
        assert f"{app.explanation['weight']:.6g}" in panel
        # the cursor stops at the edges
        await press(app, pilot, *["up"] * 5, *["left"] * 5)
        assert app.state.cursor == (0, 0)
        # a click on the cell of row 3 ('an'), column 4 ('arrow') moves the cursor there
        lines = lines_of(app)
        y = next(n for n, line in enumerate(lines) if line.startswith("3 an"))
        numbers = list(re.finditer(r"\d+\.\d+", lines[y]))
        x = numbers[4].start() + 1
        await pilot.click(MatrixView, offset=(x, y))
        await settle(app, pilot)
        assert app.state.cursor == (3, 4)
        assert app.explanation["query"]["token"] == "an" and app.explanation["key"]["token"] == "arrow"

    drive(script)


# ---------------------------------------------------------------------------------- editing


def test_editing_the_sentence_and_the_context():
    async def script(app, pilot):
        await press(app, pilot, "e")
        sentence = app.query_one("#sentence")
        assert app.focused is sentence
        sentence.value = ""
        await pilot.press(*"the cat sat on the mat", "enter")
        await settle(app, pilot)
        assert app.result.tokens == ["the", "cat", "sat", "on", "the", "mat"]
        assert app.focused is app.query_one("#matrix")
        await press(app, pilot, "k")
        await pilot.press(*"a dog", "enter")
        await settle(app, pilot)
        assert app.state.context == "a dog" and app.result.key_tokens == ["a", "dog"]
        doc = matrix_json(app.state.command_line())
        np.testing.assert_allclose(app.result.attention.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits

    drive(script)


def test_bad_input_is_a_message_and_the_app_survives():
    async def script(app, pilot):
        await press(app, pilot, "c", "k")
        await pilot.press(*"a dog", "enter")
        await settle(app, pilot)
        # attn matrix refuses --causal with --context: so does the app, and keeps the last view
        assert "--causal contradicts --context" in app.message
        assert "--causal contradicts --context" in "\n".join(lines_of(app, "#message"))
        assert app.state.context is None and app.state.causal
        assert app.result.key_tokens == app.result.tokens
        await press(app, pilot, "e")
        app.query_one("#sentence").value = "!!! ???"
        await pilot.press("enter")
        await settle(app, pilot)
        assert "has no word in it" in app.message
        assert app.result.tokens == SENTENCE.split()
        await press(app, pilot, "down", "c")  # still alive and responding
        assert app.state.cursor == (1, 0) and not app.state.causal and app.message == ""

    drive(script)


def test_a_crashing_worker_is_a_message_not_a_crash(monkeypatch):
    import attncli.attention.matrix as matrix

    real = matrix.compute

    def broken(req, vectors=None):
        if req.mask.causal:
            raise ZeroDivisionError("boom")
        return real(req, vectors)

    monkeypatch.setattr(matrix, "compute", broken)

    async def script(app, pilot):
        await press(app, pilot, "c")
        assert app.message.startswith("internal error: ZeroDivisionError: boom")
        assert not app.state.causal  # back to the last good view
        await press(app, pilot, "w")
        assert app.state.window == 1 and app.message == ""

    app = drive(script)
    assert app.return_code in (None, 0)


def test_a_bad_starting_state_is_a_message():
    async def script(app, pilot):
        assert "--pad-to 2 is shorter than the sentence" in app.message
        assert app.result is None
        await press(app, pilot, "A")  # no more padding: now it computes
        assert app.result is not None and app.state.pad_to is None

    drive(script, ExploreState(SENTENCE, pad_to=2))


# ---------------------------------------------------------------------------------- exports, copy


def test_copy_puts_the_command_on_the_clipboard_and_shows_it():
    async def script(app, pilot):
        await press(app, pilot, "c", "w", "right", "y")
        assert app.clipboard == "attn matrix 'time flies like an arrow' --causal --window 1 --explain 0 1"
        assert any(app.clipboard in str(n.message) for n in app._notifications)

    drive(script)


@pytest.mark.parametrize("name", ["view.json", "view.svg", "view.html"])
def test_export_writes_the_view(tmp_path, name):
    async def script(app, pilot):
        await press(app, pilot, "c", "down", "x")
        field = app.screen.query_one("#export-path")
        field.value = name
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.message == f"wrote {tmp_path / name}"

    app = drive(script, cwd=tmp_path)
    path = tmp_path / name
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temp file left behind
    text = path.read_text(encoding="utf-8")
    command = app.state.command_line()
    if name.endswith(".json"):
        result = CliRunner().invoke(cli, [*shlex.split(command)[1:], "--json"])
        assert json.loads(text) == json.loads(result.stdout)
    else:
        assert text.lstrip().startswith("<svg" if name.endswith(".svg") else "<!DOCTYPE html>")
        for value in app.result.attention.weights[1, :2]:
            assert f"{value:.3f}" in text
        assert "cell" in text and "query" in text


def test_export_refuses_bad_names(tmp_path):
    async def script(app, pilot):
        for given, message in (("view.txt", "must end in .svg, .html, .json"),
                               ("missing/view.svg", "does not exist"), (".", "is a directory")):
            await press(app, pilot, "x")
            app.screen.query_one("#export-path").value = given
            await pilot.press("enter")
            await settle(app, pilot)
            assert message in app.message, given
        assert list(tmp_path.iterdir()) == []

    drive(script, cwd=tmp_path)


# ---------------------------------------------------------------------------------- panes, help


def test_lookup_pane_updates_as_you_type():
    async def script(app, pilot):
        await press(app, pilot, "l")
        assert app.focused is app.query_one("#query")
        seen = []
        for ch in "colour":
            await press(app, pilot, ch)
            seen.append(app.lookup_result.query)
        assert seen == ["c", "co", "col", "colo", "colou", "colour"]
        result = CliRunner().invoke(cli, ["lookup", "colour", "--json"])
        doc = json.loads(result.stdout)
        assert app.lookup_result.best.key == doc["best"]["key"] == "color"
        weights = {e["key"]: e["weight"] for e in doc["entries"]}
        for e in app.lookup_result.head():
            assert e.weight == pytest.approx(weights[e.key], abs=1e-9)
        text = "\n".join(lines_of(app, "#lookup-result"))
        assert "answer: black" in text
        await press(app, pilot, "escape", "m")
        assert app.focused is app.query_one("#matrix")

    drive(script)


def test_lookup_with_a_dict_and_a_bad_one(tmp_path):
    good = tmp_path / "d.json"
    good.write_text(json.dumps({"speed": 250, "weight": 2300}))

    async def script(app, pilot):
        await press(app, pilot, "l", *"velocity")
        assert app.lookup_result.best.key == "speed"

    drive(script, ExploreState(SENTENCE, dict_path=str(good)))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")

    async def script_bad(app, pilot):
        await press(app, pilot, "l", "x")
        assert "must be a JSON object" in app.message
        await press(app, pilot, "escape", "c")
        assert app.state.causal

    drive(script_bad, ExploreState(SENTENCE, dict_path=str(bad)))


def test_the_lookup_bar_fills_its_column_and_the_soft_value_is_shown(tmp_path):
    """A weight of 1 (an exact key) draws a bar across the whole bar column, not 20 of its 51
    characters; a dictionary of numbers has a soft value, printed as attn lookup prints it."""
    d = tmp_path / "d.json"
    d.write_text(json.dumps({"speed": 250, "weight": 2300, "width": 1.9}))
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "l", *"speed")
        seen["lines"] = lines_of(app, "#lookup-result")
        seen["result"] = app.lookup_result

    drive(script, ExploreState(SENTENCE, dict_path=str(d)), size=(120, 30))
    result, lines = seen["result"], seen["lines"]
    assert result.exact and result.soft_value == pytest.approx(250)
    row = next(line for line in lines if " 1.000 " in line and "speed" in line)
    bar = max(re.findall(r"[█▏▎▍▌▋▊▉]+", row), key=len)
    assert len(bar) > 40, row  # the pane is 120 wide: its bar column is far wider than 20
    cli_out = " ".join(CliRunner().invoke(cli, ["lookup", "speed", "--dict", str(d)]).stdout.split())
    soft = re.search(r"soft value \(sum of weight \* value\): \S+", cli_out).group(0)
    assert soft in " ".join(" ".join(lines).split())


def test_help_lists_every_key():
    async def script(app, pilot):
        await press(app, pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_panel = app.screen.query_one("#help-keys")
        text = "\n".join(strip.text for strip in help_panel.render_lines(help_panel.region.reset_offset))
        for key in KEYS:
            if key.shown:
                assert key.shown in text, key
        await press(app, pilot, "escape")
        assert not isinstance(app.screen, HelpScreen)

    drive(script)


def test_forty_columns_stack_the_panels():
    async def script(app, pilot):
        matrix, explanation = app.query_one("#matrix-scroll"), app.query_one("#explain-scroll")
        assert matrix.region.width >= 38 and explanation.region.width >= 38
        assert explanation.region.y >= matrix.region.bottom
        drawn = drawn_matrix(lines_of(app), app.result.tokens)
        np.testing.assert_allclose(drawn, app.result.attention.weights, atol=5e-3)  # fixed: as drawn; 2 decimals when narrow
        await press(app, pilot, "c", "down")
        assert app.explanation["query"]["index"] == 1

    drive(script, size=(40, 40))


@pytest.mark.parametrize("key", ["ctrl+c", "q"])
def test_ctrl_c_and_q_quit(key):
    async def script(app, pilot):
        await pilot.press(key)
        await pilot.pause()
        assert app._exit

    app = drive(script)
    assert app.return_code == 0


# ---------------------------------------------------------------------------------- the command


def test_the_command_refuses_bad_input_like_matrix():
    runner = CliRunner()
    for args, message in ((["--layer", "1"], "--layer needs --proj trained"),
                          (["-"], "reads the keyboard"),
                          (["--dict", "nope.json"], "no such file"),
                          (["--port", "9000"], "--port belongs to --serve"),
                          (["--serve", "--port", "70000"], "--port must be between 1 and 65535")):
        result = runner.invoke(cli, ["explore", *args])
        assert result.exit_code == 2, result.output
        assert message in result.stderr


def test_without_the_extra_it_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("textual") else real(name, *a))
    result = CliRunner().invoke(cli, ["explore"])
    assert result.exit_code == 2
    assert "pip install -e '.[explore]'" in " ".join(result.stderr.split())


def test_matrix_does_not_import_textual():
    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from attncli.cli.main import app\n"
            "r = CliRunner().invoke(app, ['matrix', 'time flies', '--json'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in ('textual', 'textual_serve') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------- --serve


def test_the_served_page_fetches_nothing_from_the_network():
    import textual_serve

    from attncli.explore.serve import offline_template

    source = (Path(textual_serve.__file__).parent / "templates" / "app_index.html").read_text()
    assert "fonts.googleapis.com" in source  # what there is to replace
    page = offline_template(source)
    assert not re.findall(r'(?:href|src|url)\(?="?(https?://[^"\s)]*)', page)
    assert "fonts/RobotoMono-VariableFont_wght.ttf" in page


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_served_app_shows_the_heatmap_in_chromium(tmp_path):
    from _chromium import colours, find_chromium, screenshot_when

    from attncli.views.render import palette

    chromium = find_chromium()
    if chromium is None:
        message = "no Chromium installed (apt-get install chromium) to open the served page"
        _needed_under_ci(message)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "attncli", "explore", SENTENCE, "--serve", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        viridis = [tuple(int(palette(t / 50)[0][i:i + 2], 16) for i in (1, 3, 5)) for t in range(51)]

        def heatmap_colours(png: bytes) -> int:
            seen = colours(png)
            return sum(any(sum(abs(a - b) for a, b in zip(c, v)) <= 6 for c in seen) for v in viridis)

        requested: list[str] = []
        png = screenshot_when(chromium, f"http://127.0.0.1:{port}/", lambda p: heatmap_colours(p) >= 8, timeout=45,
                              requested=requested)
        (tmp_path / "served.png").write_bytes(png)
        assert heatmap_colours(png) >= 8, "the page never showed the viridis heatmap (see served.png)"
        assert any(u.startswith(f"ws://127.0.0.1:{port}/ws") for u in requested), requested
        elsewhere = [u for u in requested if not re.match(rf"(https?|wss?)://127\.0\.0\.1:{port}/|data:", u)]
        assert elsewhere == [], f"the page fetched from the network: {elsewhere}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert server.returncode is not None


# ---------------------------------------------------------------------------------- the drawing


@pytest.mark.parametrize("width", [30, 40, 80, 120])
def test_the_apps_fast_heatmap_lines_are_the_cli_table_exactly(width):
    """The app draws each heatmap page as lines of Text (fast to redraw); they must be exactly
    what attn matrix's rich Table prints, colours included."""
    import io

    from rich.console import Console

    from attncli.attention.masks import MaskSpec
    from attncli.attention.matrix import MatrixRequest, compute
    from attncli.views.render import matrix_renderables

    for req in (MatrixRequest(SENTENCE), MatrixRequest(" ".join(["the cat sat on the mat"] * 3), mask=MaskSpec(causal=True, pad_to=20)),
                MatrixRequest("a b c", variant="multihead"), MatrixRequest("internationalization is long", context="a b")):
        res = compute(req)
        for show in ("weights", "scores", "output"):
            drawn = []
            for lines in (False, True):
                console = Console(file=io.StringIO(), width=width, color_system="truecolor", force_terminal=True)
                for part in matrix_renderables(res, width, show, cursor=(1, 1), lines=lines):
                    console.print(part)
                drawn.append(console.file.getvalue())
            assert drawn[0] == drawn[1], (req, show)


# ---------------------------------------------------------------------------------- a real terminal

CRASH = ("import attncli.explore.app as a\n"
         "a.ExploreApp.action_causal = lambda self: 1 / 0\n")


@pytest.mark.parametrize("key,crash,code", [(b"q", False, 0), (b"\x03", False, 0), (b"c", True, 1)],
                         ids=["q", "ctrl-c", "a-bug"])
def test_the_terminal_is_restored_on_every_exit(key, crash, code):
    """attn explore in a pseudo-terminal: after q, Ctrl-C or a bug in a key's handler the app
    leaves the alternate screen, shows the cursor and turns the mouse off; a bug is one line."""
    pty = needed("pty")
    import select

    script = (CRASH if crash else "") + ("import sys\nfrom attncli.cli.main import main\n"
                                          "sys.argv = ['attn', 'explore', 'time flies like an arrow']\nmain()\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the app in a terminal 100 x 30
        os.environ.update(COLUMNS="100", LINES="30", PYTHONPATH=str(REPO))
        os.execv(sys.executable, [sys.executable, "-c", script])
    out, sent, deadline = b"", False, time.monotonic() + 45
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
        if not sent and b"0.251" in out:
            time.sleep(0.3)
            os.write(fd, key)
            sent = True
    if not sent:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert sent, "the app never drew the matrix"
    assert os.waitstatus_to_exitcode(status) == code
    tail = out[out.rindex(b"\x1b[?1049l"):]  # left the alternate screen ...
    assert b"\x1b[?25h" in tail and b"\x1b[?1000l" in tail  # ... showed the cursor, released the mouse
    text = out.decode("utf-8", "replace")
    assert "Traceback" not in text
    if crash:
        assert re.search(r"internal error: (\x1b\[0m)?ZeroDivisionError: division by zero", text) and "ATTN_DEBUG=1" in text


def test_the_cursor_stays_in_sight_on_a_short_terminal():
    text = " ".join(["the cat sat on the mat"] * 5)  # 30 tokens

    async def script(app, pilot):
        scroll = app.query_one("#matrix-scroll")
        await press(app, pilot, *["down"] * 29)
        assert app.state.cursor == (29, 0)
        y = app.query_one("#matrix").line_of("cell", (29, 0))
        assert y is not None and y >= scroll.size.height  # the row is below the first screenful ...
        assert scroll.scroll_y <= y < scroll.scroll_y + scroll.size.height  # ... and scrolled into view

    drive(script, ExploreState(text), size=(100, 30))


def test_the_docs_list_every_key():
    docs = (REPO / "docs" / "explore.md").read_text(encoding="utf-8")
    for key in KEYS:
        if key.shown and key.shown != "arrows":
            for part in key.shown.replace("Ctrl-C", "").replace("F1", "").split(" / "):
                if part.strip():
                    assert f"`{part.strip()}`" in docs, part


def test_serve_refuses_a_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["explore", "--serve", "--port", str(port)])
    assert result.exit_code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in " ".join(result.stderr.split())
