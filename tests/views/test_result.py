"""Every result speaks one protocol (attncli/views/result.py): what ``--json`` prints is its
document(); its _repr_svg_ parses as XML and its _repr_html_ as HTML, both holding the view; export
writes each format; and its command_line(), run back through the CLI (or a POSIX shell), gives the
same JSON document again."""

from __future__ import annotations

import doctest
import html.parser
import importlib
import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

import attncli.cli.common as cli_app
from attncli.cli.commands import COMMANDS
from attncli.cli.main import app
from attncli.views import result as result_mod
from attncli.views.export import NOT_MARKUP

runner = CliRunner()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Tags(html.parser.HTMLParser):
    """An HTML page read as a browser's parser reads it: its tags and its text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def parsed_html(text: str) -> _Tags:
    page = _Tags()
    page.feed(text)
    page.close()
    return page


def captured_run(monkeypatch, argv: list[str], stdin: str | None = None):
    """(the JSON ``attn ARGV --json`` prints, the result object the command handed to
    attncli.cli.output.show)."""
    from attncli.cli import output

    seen = []
    original = output.show

    def spy(result, **kwargs):
        seen.append(result)
        return original(result, **kwargs)

    for listed in COMMANDS.values():  # every command's module, loaded before the group would load it
        importlib.import_module(listed.module)
    for name, module in list(sys.modules.items()):
        if name.startswith("attncli.cli"):
            for attr, value in list(vars(module).items()):  # under any name (cli/matrix.py's show_result)
                if value is original:
                    monkeypatch.setattr(module, attr, spy)
    cli_app._consoles.clear()
    run = runner.invoke(app, [*argv, "--json"], input=stdin)
    assert run.exit_code == 0, run.stderr
    assert len(seen) == 1
    return json.loads(run.stdout), seen[0]


def json_of_line(line: str) -> dict:
    """Run a command line a result gave back through the CLI, with --json (before a ``--``)."""
    words = shlex.split(line)
    assert words[0] == "attn"
    words = words[1:]
    at = words.index("--") if "--" in words else len(words)
    cli_app._consoles.clear()
    run = runner.invoke(app, words[:at] + ["--json"] + words[at:])
    assert run.exit_code == 0, (line, run.stderr)
    return json.loads(run.stdout)


def check_protocol(doc: dict, view, tmp_path, expect: str) -> None:
    """The protocol's promises for one result: document, inline SVG and HTML, exports."""
    assert json.loads(view.json_text()) == doc
    assert json.loads(json.dumps(view.document())) == doc
    svg = view._repr_svg_()
    assert not NOT_MARKUP.search(svg)
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    drawn = "".join(root.itertext()).replace("\xa0", " ")
    assert expect in drawn
    assert shlex.split(view.command_line())[0] in ("attn", "printf")
    page = parsed_html(view._repr_html_())
    assert "pre" in page.tags or "code" in page.tags
    assert expect in "".join(page.text).replace("\xa0", " ")
    files = {fmt: tmp_path / f"view.{fmt}" for fmt in result_mod.FORMATS}
    view.export_all(files)
    assert ET.parse(files["svg"]).getroot().tag.endswith("svg")
    assert expect in files["html"].read_text(encoding="utf-8")
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(files["json"].read_text(encoding="utf-8")) == doc
    view.export("svg", tmp_path / "one.svg", width=60)
    assert ET.parse(tmp_path / "one.svg").getroot().tag.endswith("svg")


WORD_VECTOR_CASES = {
    "matrix": (["matrix", "time 'flies' like $HOME; an arrow", "--variant", "multihead", "--causal", "--explain", "2", "1",
                "--rows", "0:3", "--show", "scores"], "flies"),
    "matrix-cross": (["matrix", "time flies", "--context", "an arrow \"like\" it", "--pad-to", "6", "--positions", "none",
                      "--proj", "random", "--d-k", "8", "--seed", "3"], "arrow"),
    "lookup": (["lookup", "colour", "--temperature", "0.25", "--top-k", "2", "--ngram-weight", "0.1"], "black"),
    "lookup-explain": (["lookup", "color", "--no-exact", "--explain", "--rows", "2"], "How the answer was found"),
    "compare": (["compare", "time flies like an arrow", "--variant-b", "dot", "--causal-b"], "delta"),
}


@pytest.mark.parametrize("case", sorted(WORD_VECTOR_CASES))
def test_word_vector_results_speak_the_protocol_and_their_command_line_runs_back(case, monkeypatch, tmp_path):
    argv, expect = WORD_VECTOR_CASES[case]
    doc, view = captured_run(monkeypatch, argv)
    check_protocol(doc, view, tmp_path, expect)
    line = view.command_line()
    assert line == view.command_line()  # stable
    assert json_of_line(line) == doc


def test_a_lookup_in_a_dictionary_file_names_it(tmp_path, monkeypatch):
    d = tmp_path / "it's a dict.json"
    d.write_text(json.dumps({"color": "red", "size": 3}), encoding="utf-8")
    doc, view = captured_run(monkeypatch, ["lookup", "colour", "--dict", str(d)])
    assert shlex.split(view.command_line())[3:5] == ["--dict", str(d)]
    assert json_of_line(view.command_line()) == doc
    doc, view = captured_run(monkeypatch, ["lookup", "colour", "--dict", "-"], stdin=d.read_text())
    assert view.command_line().startswith("printf ")


def _shell(line: str) -> dict:
    """``line`` run by a POSIX shell, ``attn`` being this interpreter's attncli (from this tree),
    with --json after the command's name."""
    env = {**os.environ, "PYTHONPATH": REPO, "COLUMNS": "80"}
    script = f'attn() {{ c=$1; shift; "{sys.executable}" -m attncli "$c" --json "$@"; }}\n{line}'
    run = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_results_made_in_python_give_a_command_line_a_shell_runs_to_the_same_document():
    from attncli.attention import MaskSpec, MatrixRequest, compute
    from attncli.lookup import lookup
    from attncli.vectors import load_vectors
    from attncli.views.lookup_view import LookupView
    from attncli.views.matrix_result import MatrixView

    car = {"brand": "Porche", "model": "Taycan", "color": "it's $black; `x`"}
    view = LookupView(lookup("colour", car, load_vectors(), temperature=0.5), dictionary=car)
    assert view.command_line().startswith("printf ")
    assert _shell(view.command_line()) == json.loads(view.json_text())
    view = MatrixView(compute(MatrixRequest("-time flies like an arrow", mask=MaskSpec(window=1), variant="local")))
    assert " -- " in view.command_line()
    assert _shell(view.command_line()) == json.loads(view.json_text())


def test_the_views_doctests_run():
    from attncli.views import lookup_view, matrix_result, notebook

    for module in (result_mod, matrix_result, lookup_view, notebook):
        found = doctest.testmod(module)
        assert found.attempted > 0 and found.failed == 0, module.__name__


def test_a_drawing_shows_the_command_line_under_it_and_a_cli_export_does_not(tmp_path):
    from attncli.attention import MatrixRequest, compute
    from attncli.views.matrix_result import MatrixView

    view = MatrixView(compute(MatrixRequest("time\u202e\x1b[31m flies", model=None)), show="output")
    svg_text = "".join(ET.fromstring(view.svg()).itertext()).replace("\xa0", " ")
    assert "attn matrix" in svg_text and "--show output" in svg_text
    assert "\x1b" not in view.svg() and "\u202e" not in view.svg() and "\u202e" not in view.html()
    bare = "".join(ET.fromstring(view.svg(command=False)).itertext()).replace("\xa0", " ")
    assert "attn matrix" not in bare.replace("attn matrix:", "")
    run = runner.invoke(app, ["matrix", "time flies", "--svg", str(tmp_path / "m.svg")])
    assert run.exit_code == 0, run.stderr
    exported = "".join(ET.parse(tmp_path / "m.svg").getroot().itertext()).replace("\xa0", " ")
    assert "time" in exported and "attn matrix 'time flies'" not in exported


def test_an_unknown_export_format_is_bad_input(tmp_path):
    from attncli.attention import MatrixRequest, compute
    from attncli.errors import BadInput
    from attncli.views.matrix_result import MatrixView

    with pytest.raises(BadInput):
        MatrixView(compute(MatrixRequest("time flies"))).export("pdf", tmp_path / "x.pdf")
    assert not (tmp_path / "x.pdf").exists()


# ---- results of attn's own LM and of pretrained models ------------------------------------------


def test_heads_and_lens_of_the_built_in_lm_speak_the_protocol(monkeypatch, tmp_path):
    doc, view = captured_run(monkeypatch, ["heads", "--sentences", "3", "--window", "2"])
    check_protocol(doc, view, tmp_path, "learned heads")
    assert json_of_line(view.command_line()) == doc
    assert view.notes(200) and any("sentences" in n for n in view.notes(None))
    cli_app._consoles.clear()
    shown = runner.invoke(app, ["heads", "--sentences", "3", "--window", "2"])  # the terminal: notes on stderr
    assert "learned heads" in shown.stdout and "3 sentences" not in shown.stdout
    assert "3 sentences" in " ".join(shown.stderr.split())
    doc, view = captured_run(monkeypatch, ["lens", "the old man", "--top-k", "2"])
    check_protocol(doc, view, tmp_path, "logit lens")
    assert json_of_line(view.command_line()) == doc


@pytest.fixture(scope="module")
def gpt2_texts(tmp_path_factory):
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    path.write_text("the cat sat on the mat\nthe dog ran to the park and back\na b c a b c\n", encoding="utf-8")
    return path


CAUSAL_CASES = {
    "ablate": (["ablate", "the cat sat on the mat and the", "--target-id", "5"], "ablate"),
    "patch": (["patch", "the dog sat on the dog", "the dog on sat the dog", "--target-id", "5", "--contrast-id", "7",
               "--site", "attn"], "patch attn"),
    "dla": (["dla", "the cat sat on the mat", "--target-id", "5"], "direct contribution"),
}


@pytest.mark.parametrize("case", sorted(CAUSAL_CASES))
def test_causal_results_speak_the_protocol(case, tiny_gpt2_dir, monkeypatch, tmp_path):
    argv, expect = CAUSAL_CASES[case]
    doc, view = captured_run(monkeypatch, [*argv, "--transformer", str(tiny_gpt2_dir)])
    check_protocol(doc, view, tmp_path, expect)
    assert json_of_line(view.command_line()) == doc


def test_pretrained_heads_and_stats_speak_the_protocol(tiny_gpt2_dir, gpt2_texts, monkeypatch, tmp_path):
    doc, view = captured_run(monkeypatch, ["heads", "--transformer", str(tiny_gpt2_dir), "--file", str(gpt2_texts)])
    check_protocol(doc, view, tmp_path, "heads of")
    assert json_of_line(view.command_line()) == doc
    doc, view = captured_run(monkeypatch, ["stats", str(gpt2_texts), "--transformer", str(tiny_gpt2_dir),
                                           "--precision", "float64", "--probe-every", "1"])
    check_protocol(doc, view, tmp_path, "sink")
    assert view.notes() and "texts" in view.notes()[0]
    again = json_of_line(view.command_line())
    assert again["stats"] == doc["stats"] and again["texts"] == doc["texts"]
