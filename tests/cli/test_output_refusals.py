"""attncli.cli.output.show, the one door every command prints through: --json with an export into
stdout is refused there before anything is written, whichever command forgot to check it first."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from attncli.cli.output import JSON_SHARES_STDOUT, refuse_json_into_stdout, show
from attncli.errors import BadInput
from attncli.views.result import DocumentView


@pytest.mark.parametrize("fmt", ["svg", "html", "png"])
def test_json_and_an_export_into_stdout_are_refused_before_anything_is_written(capfd, fmt):
    written = []
    view = DocumentView({"a": 1})
    view.write_json = written.append  # what show would write first
    exports = SimpleNamespace(**{**dict.fromkeys(("svg", "html", "png", "width")), fmt: f"/proc/{os.getpid()}/fd/1"})
    with pytest.raises(BadInput, match="^" + JSON_SHARES_STDOUT.replace("(", r"\(").replace(")", r"\)") + "$"):
        show(view, json_out=True, exports=exports)
    assert written == [] and capfd.readouterr().out == ""


def test_json_with_an_export_into_a_file_or_an_export_alone_pass(tmp_path):
    refuse_json_into_stdout(SimpleNamespace(svg=tmp_path / "a.svg", html=None, png=None), True)
    refuse_json_into_stdout(SimpleNamespace(svg="/dev/stdout", html=None, png=None), False)
    refuse_json_into_stdout(None, True)


def _path_options() -> list[tuple[str, str]]:
    """(command, option) for every option of every attn command whose value is a path."""
    import typer.main

    from attncli.cli.main import app

    group = typer.main.get_command(app)
    ctx = group.make_context("attn", ["lookup", "x"], resilient_parsing=True)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        subcommands = getattr(command, "commands", None)  # a group (attn stats): its commands' options
        for words, cmd in ([(f"{name} {sub}", c) for sub, c in subcommands.items()] if subcommands
                           else [(name, command)]):
            for p in cmd.params:
                if p.param_type_name == "option" and getattr(p.type, "name", "") == "path":
                    found.append((words, p.opts[0]))
    return found


PATH_OPTIONS = _path_options()


def test_the_path_options_are_found():
    assert {("attribute", "--pairs"), ("attribute", "--out"), ("matrix", "--svg"), ("circuit", "--pairs"),
            ("stats run", "--out"), ("stats merge", "--svg")} \
        <= set(PATH_OPTIONS), PATH_OPTIONS


@pytest.mark.parametrize("command, option", PATH_OPTIONS)
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(command, option, form):
    """Path('') is '.': --out '' once wrote shards into the current folder, --pairs '' was named '.'."""
    from typer.testing import CliRunner

    from attncli.cli.main import app

    args = [*command.split(), option, ""] if form == "separate" else [*command.split(), f"{option}="]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and f"{option} is empty: give a path" in result.output, (args, result.output)
