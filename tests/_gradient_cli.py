"""What the command-line tests of attn attribute and attn circuit share (tests/cli/test_attribute_cli.py,
test_circuit_cli.py): the clean and corrupted texts (14 tokens each on the tiny GPT-2, the same
length as the two commands need) and ``run``. Their files skip themselves without torch and
transformers (``conftest.needed``) before importing it."""

from __future__ import annotations

from typer.testing import CliRunner

from attncli.cli.main import app

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog sat on the mat and the cat"

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    """``attn ARGS...``: its exit code and its output (stdout and stderr together)."""
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output
