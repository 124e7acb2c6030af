"""The command group loads a command's module only when that command runs (attncli/cli/commands.py).

``attn lookup`` imports cli/lookup.py and not cli/matrix.py, cli/stats.py...; ``attn --help`` and
completing a command's name import no command module at all, yet show each command's own help,
word for word, as they did when main.py imported every module.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
import typer.main

from attncli.cli.commands import COMMANDS, prose
from attncli.cli.main import app

COMMAND_MODULES = sorted({listed.module for listed in COMMANDS.values()})

_PROBE = """
import atexit, json, sys
def _report():
    sys.stderr.write("\\nMODULES=" + json.dumps(sorted(sys.modules)) + "\\n")
atexit.register(_report)
argv, preload = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["attn"] + argv
import importlib
for name in preload:
    importlib.import_module(name)
from attncli.cli.main import main
main()
"""


def run_attn(argv: list[str], preload: list[str] = (), env: dict[str, str] | None = None) -> tuple[set[str], str]:
    """(every module one fresh ``attn ARGV`` process imported, its stdout); ``preload``: modules
    imported before the command line runs."""
    child_env = dict(os.environ, COLUMNS="80", TERMINAL_WIDTH="80", **(env or {}))
    child_env.pop("FORCE_COLOR", None)
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(list(preload))],
                          capture_output=True, text=True, timeout=120, env=child_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stderr.rsplit("MODULES=", 1)[1].splitlines()[0]
    return set(json.loads(line)), proc.stdout


@pytest.mark.parametrize("argv,own", [
    (["lookup", "colour", "--json"], "attncli.cli.lookup"),
    (["matrix", "time flies like an arrow", "--causal", "--json"], "attncli.cli.matrix"),
    (["variants", "--json"], "attncli.cli.matrix"),
    (["models", "--json"], "attncli.cli.vectors"),
])
def test_a_command_imports_its_own_module_and_no_other_command_s(argv, own):
    modules, out = run_attn(argv)
    assert out.strip()
    loaded = sorted(m for m in COMMAND_MODULES if m in modules)
    assert own in loaded
    # matrix's module imports the modules its --transformer path runs (cli/transformer.py), which
    # are no command's own module; no other command's module may come along
    assert loaded == [own], loaded


def test_the_help_lists_every_command_without_importing_one():
    modules, lazy = run_attn(["--help"])
    assert [m for m in COMMAND_MODULES if m in modules] == []
    for name in COMMANDS:
        assert f" {name} " in lazy, name


def test_the_help_is_the_same_as_with_every_command_module_imported():
    """The table's rows are the commands' own help: the lazy listing and the listing of the real
    commands (every module imported first) are the same text."""
    _, lazy = run_attn(["--help"])
    modules, eager = run_attn(["--help"], preload=COMMAND_MODULES)
    assert set(COMMAND_MODULES) <= modules
    assert lazy == eager


def test_each_row_is_the_first_paragraph_of_its_command_s_help():
    root = typer.main.get_command(app)
    for name, listed in COMMANDS.items():
        command = root.get_command(None, name)
        assert command is not None, name
        assert prose(command.help).split("\n\n")[0] == listed.help, name


def test_every_registered_command_has_a_row():
    """A command registered on ``app`` without a row in cli/commands.py could not be run."""
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    registered = {info.name or typer.main.get_command_name(info.callback.__name__) for info in app.registered_commands}
    registered |= {info.name for info in app.registered_groups}
    assert registered == set(COMMANDS)


def test_completing_a_command_name_imports_no_command_module():
    env = {"_ATTN_COMPLETE": "complete_bash", "COMP_WORDS": "attn ma", "COMP_CWORD": "1"}
    modules, out = run_attn([], env=env)
    assert out.split() == ["matrix"]
    assert [m for m in COMMAND_MODULES if m in modules] == []


def test_completing_a_command_s_option_loads_that_command():
    env = {"_ATTN_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "attn matrix --var"}
    modules, out = run_attn([], env=env)
    assert "--variant" in out
    assert [m for m in COMMAND_MODULES if m in modules] == ["attncli.cli.matrix"]


def test_an_unknown_command_is_still_bad_usage():
    proc = subprocess.run([sys.executable, "-m", "attncli", "matrx"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 2
    assert "No such command 'matrx'" in proc.stderr


@pytest.mark.parametrize("typo, meant", [("lokup", "lookup"), ("matrx", "matrix"), ("explor", "explore")])
def test_a_mistyped_command_gets_a_suggestion_without_importing_the_commands(typo, meant):
    """Typer suggests among the commands already built, which the lazy group has none of."""
    proc = subprocess.run([sys.executable, "-m", "attncli", typo], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="200"))
    assert proc.returncode == 2
    assert f"No such command '{typo}'. Did you mean '{meant}'" in proc.stderr
    far = subprocess.run([sys.executable, "-m", "attncli", "zzzzz"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, COLUMNS="200"))
    assert far.returncode == 2 and "Did you mean" not in far.stderr


def test_the_help_lists_the_main_job_first():
    """lookup (the main job) and matrix lead; the word vectors and the small LM come last."""
    _, out = run_attn(["--help"])
    rows = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and line.split()[1] in COMMANDS]
    assert rows[:2] == ["lookup", "matrix"]
    assert rows.index("lookup") < rows.index("train") and rows.index("explore") < rows.index("train-attention")


@pytest.mark.parametrize("argv", [["matrix", "--help"], ["stats", "--help"], ["stats", "merge", "--help"]])
def test_a_command_s_help_is_the_same_loaded_lazily_or_not(argv):
    """A command built when it is first asked for gets the same help (docstring lines unwrapped)
    as one built with the group."""
    _, lazy = run_attn(argv)
    _, eager = run_attn(argv, preload=COMMAND_MODULES)
    assert lazy == eager
