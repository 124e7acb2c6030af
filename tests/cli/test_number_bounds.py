"""The one rule for numbers (attncli/rules/limits.py): every integer option of every command, and every
environment variable attn reads as a number, refuses a value outside its range at any magnitude
with one line naming it (exit 2), before any work. The options are enumerated from the app itself,
so an option added later is checked without a line here."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import typer.main
from typer.testing import CliRunner

import attncli.cli.common as cli_common
from attncli.rules import limits
from attncli.cli.commands import COMMANDS
from attncli.cli.main import app

HOSTILE = (10**20, 2**63, "9" * 5000)  # past every C integer, and past Python's int() limit


def integer_options() -> list[tuple[tuple[str, ...], str, tuple[int, int]]]:
    """(command path, option, its range) for every integer option of ``attn`` and its commands."""
    root = typer.main.get_command(app)
    found = []

    def walk(command, path):
        for param in command.params:
            if param.param_type_name == "option" and type(param.type).__name__ in ("IntParamType", "IntRange"):
                found.append((path, max(param.opts, key=len), getattr(param.type, "attn_range", None)))
        ctx = typer.Context(command)
        for name in getattr(command, "list_commands", lambda ctx: [])(ctx):
            walk(command.get_command(ctx, name), (*path, name))

    walk(root, ())
    return found


OPTIONS = integer_options()


def test_every_command_was_walked_and_every_integer_option_has_a_range():
    commands = {path[0] for path, _, _ in OPTIONS if path}
    assert {"matrix", "train", "train-attention", "stats", "circuit", "qk"} <= commands <= set(COMMANDS)
    assert ((), "--threads", (1, limits.MAX_THREADS)) in OPTIONS
    assert len(OPTIONS) > 80
    unbounded = [(path, option) for path, option, bounds in OPTIONS if bounds is None]
    assert not unbounded


def run(path, option, value, env=None):
    """``attn PATH OPTION VALUE``; a root option (``attn --threads V matrix x``) in a process of its
    own, since the root's options are parsed before any command's error handling (cli/process.py)."""
    if not path:
        proc = subprocess.run([sys.executable, "-m", "attncli", option, str(value), "matrix", "x"],
                              capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
        return SimpleNamespace(exit_code=proc.returncode, stderr=proc.stderr, output=proc.stdout + proc.stderr)
    cli_common._consoles.clear()
    return CliRunner().invoke(app, [*path, option, str(value)], env=env)


def refused(result, name):
    assert result.exit_code == 2, (name, result.output)
    said = " ".join(result.stderr.split())
    assert said.startswith("error:") and name in said and "whole number from" in said, said
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert len(result.stderr) < 400  # five thousand digits are not echoed back


@pytest.mark.parametrize(("path", "option", "bounds"), OPTIONS, ids=[" ".join((*p, o)) for p, o, _ in OPTIONS])
def test_every_integer_option_refuses_a_number_past_its_range_at_every_magnitude(path, option, bounds):
    lo, hi = bounds
    assert -limits.MACHINE_INT <= lo <= hi <= 2**53
    for value in (*HOSTILE, hi + 1, lo - 1):
        refused(run(path, option, value), option)


def test_threads_past_the_c_int_never_reach_threadpoolctl():
    """Before the rule: `attn --threads 100000000000000000000 matrix ...` ended in threadpoolctl's
    OverflowError (an internal error); the same number is refused at the root now."""
    refused(run((), "--threads", 10**20), "--threads")
    refused(run((), "--threads", limits.MAX_THREADS + 1), "--threads")
    assert run((), "--threads", limits.MAX_THREADS).exit_code == 0


@pytest.mark.parametrize("name", limits.THREAD_VARIABLES)
@pytest.mark.parametrize("value", ["100000000000000000000", "9223372036854775808", "0", "-3", "1025", "abc", "4,2",
                                   "9" * 5000], ids=lambda v: v if len(v) < 30 else f"{len(v)} digits")
def test_every_thread_variable_refuses_a_value_outside_its_range(name, value):
    if name in limits.NESTED and value == "4,2":
        pytest.skip("OpenMP's nested list: taken (test_openmp_s_nested_list_gives_its_first_number)")
    cli_common._consoles.clear()
    result = CliRunner().invoke(app, ["matrix", "x"], env={name: value})
    refused(result, f"the environment variable {name}")


@pytest.mark.parametrize("value", ["4,0", "4,abc", "4,100000000000000000000", ",4", "4,"])
def test_openmp_s_nested_list_holds_each_number_to_the_range(value):
    cli_common._consoles.clear()
    refused(CliRunner().invoke(app, ["matrix", "x"], env={"OMP_NUM_THREADS": value}),
            "the environment variable OMP_NUM_THREADS")


def test_openmp_s_nested_list_gives_its_first_number(monkeypatch):
    """OMP_NUM_THREADS=4,2 is OpenMP's: 4 threads at the outer level, 2 in each nested region."""
    for other in limits.THREAD_VARIABLES:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")
    assert limits.environment_threads() == 4
    assert CliRunner().invoke(app, ["matrix", "x"], env={"OMP_NUM_THREADS": "3,1"}).exit_code == 0


@pytest.mark.parametrize("name", limits.THREAD_VARIABLES)
def test_a_thread_variable_in_range_or_empty_is_taken(name, monkeypatch):
    for other in limits.THREAD_VARIABLES:
        monkeypatch.delenv(other, raising=False)
    assert CliRunner().invoke(app, ["matrix", "x"], env={name: ""}).exit_code == 0
    monkeypatch.setenv(name, " 3 ")
    assert limits.environment_threads() == 3
    monkeypatch.setenv(name, str(limits.MAX_THREADS))
    assert limits.environment_threads() == limits.MAX_THREADS


def test_the_rule_reads_no_more_digits_than_the_range_holds():
    """A five-thousand-digit text is refused by its length: int() (which raises ValueError past 4,300
    digits) is never asked to read it."""
    with pytest.raises(limits.BadInput, match="a number of 5000 digits"):
        limits.whole_number("--x", "9" * 5000, 1, 10)
    assert limits.whole_number("--x", " +7 ", 1, 10) == 7 and limits.whole_number("--x", 10, 1, 10) == 10
    for bad in ("1.5", "1e3", "0x10", "", True, 2.0):
        with pytest.raises(limits.BadInput):
            limits.whole_number("--x", bad, 1, 10)


@pytest.mark.parametrize("args", [["matrix", "the cat", "--threads", "3"], ["matrix", "--threads=3", "the cat"],
                                  ["stats", "no-such-corpus.txt", "--threads", "3"], ["--threads", "3", "matrix", "x"]])
def test_the_root_s_threads_is_taken_after_the_command_too(args, monkeypatch):
    from attncli.env import runtime

    monkeypatch.setattr(runtime, "threads", None)
    cli_common._consoles.clear()
    result = CliRunner().invoke(app, args)
    assert runtime.threads == 3 and "No such option" not in result.output, result.output
    assert result.exit_code == (2 if args[0] == "stats" else 0), result.output  # stats: its own refusal, later


def test_a_command_s_own_threads_stays_its_own(monkeypatch):
    """attn train-attention has --threads of its own (torch's threads): not moved to the root."""
    from attncli.env import runtime

    monkeypatch.setattr(runtime, "threads", None)
    cli_common._consoles.clear()
    result = CliRunner().invoke(app, ["train-attention", "--threads", "0"])
    assert result.exit_code == 2 and runtime.threads is None
    assert "--threads must be a whole number from 1 to 1,024, not 0" in " ".join(result.stderr.split())
    result = CliRunner().invoke(app, ["matrix", "--", "--threads"])  # after --, it is the text
    assert result.exit_code == 0 and runtime.threads is None and "threads" in result.stdout
