"""--help and error messages at 80 columns, as a newcomer's terminal shows them: no option name cut
("--allow-missing-weigh…"), help text that wraps to the terminal instead of keeping a docstring's
line breaks (ragged lines), and a command to paste ("pip install -e '.[pretrained]'") never
broken across two lines."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import typer.main

from attncli.cli import common as cli_app
from attncli.cli.commands import COMMANDS as LISTED
from attncli.cli.main import app
from attncli.hf.formats.source import install_pretrained, install_transformers

COMMANDS = list(LISTED)  # every command, by the name the lazy group lists (and loads) it under
# a group's commands by their full words (attn stats run, attn stats merge)
SUBCOMMANDS = [f"{name} {sub}" for name in COMMANDS
               for sub in getattr(typer.main.get_command(app).get_command(None, name), "commands", {})]


def help_text(*argv: str, columns: int = 80) -> str:
    result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": None})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_is_checked():
    assert {"matrix", "explore", "lookup", "lens", "compare", "generate", "train-attention"} <= set(COMMANDS)


@pytest.mark.parametrize("command", ["", *COMMANDS, *SUBCOMMANDS])
def test_help_at_80_columns_cuts_nothing(command):
    text = help_text(*command.split())
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
    click_command = typer.main.get_command(app)
    for word in command.split():
        click_command = click_command.get_command(None, word)
    for param in click_command.params:
        for name in param.opts:
            if name.startswith("--"):
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (command, name)


@pytest.mark.parametrize("command", [*COMMANDS, *SUBCOMMANDS])
def test_help_text_wraps_to_the_terminal_not_at_the_docstrings_breaks(command):
    """Every line of the description but a paragraph's last is filled: the next word did not fit
    (a docstring's own line break left 'encoding scaled to' alone on a line)."""
    text = help_text(*command.split())
    description = text.split("╭")[0].splitlines()[3:]  # after the usage line
    lines = [line.strip() for line in description]
    for line, following in zip(lines, lines[1:]):
        if line and following:  # inside a paragraph
            assert len(line) + 1 + len(following.split()[0]) > 78, (command, line, following)


@pytest.mark.parametrize("columns", [40, 50, 60, 70, 80, 100, 120])
@pytest.mark.parametrize("command", [install_pretrained(), install_transformers()])
def test_an_error_never_breaks_a_command_to_paste(monkeypatch, capsys, columns, command):
    monkeypatch.setenv("COLUMNS", str(columns))
    cli_app._consoles.clear()
    message = f"model 'x/y' runs through transformers, which is not installed: {command}"
    cli_app.print_error(f"[bold red]error:[/] {cli_app.escape(message)}")
    err = capsys.readouterr().err
    assert "".join(err.split()) == "".join(f"error: {message}".split())  # nothing lost, nothing added
    for pasteable in re.findall(r"pip install [^()]*?(?=\s*\(|\)|$)", command):
        if len(pasteable) <= columns:
            assert any(pasteable in line for line in err.splitlines()), (columns, pasteable, err)


@pytest.mark.parametrize("command,required", [(["attribute"], True), (["circuit"], True), (["qk"], True),
                                              (["stats", "run"], True), (["matrix"], False), (["ablate"], False),
                                              (["lens"], False)])
def test_transformer_is_marked_required_where_a_run_needs_it(command, required, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    cli_app._consoles.clear()
    from typer.testing import CliRunner

    from attncli.cli.main import app

    out = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"}).stdout
    block = next(line for line in out.splitlines() if re.match(r"│ (\*  )?--transformer ", line))
    rest = out.split(block, 1)[1].split("│ --", 1)[0]  # the option's own lines, up to the next option
    marked = block.startswith("│ *") or "[required]" in rest
    assert marked == required, (command, block, rest)
    if required:  # only the help: the run without it keeps the command's own message (exit 2)
        r = CliRunner().invoke(app, [*command, "a b", "a c"][:len(command) + (1 if command[-1] in ("qk", "run") else 2)])
        assert r.exit_code == 2 and "--transformer" in r.stderr and "Missing option" not in r.output
