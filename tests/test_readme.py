"""The README's console examples are real: each `$ command` in a ```console block is run from the
repository root (80 columns, no colour, an empty ATTN_HOME) and must print what the README shows.
Numbers are compared to within 2e-3 (the last printed digit may differ across CPUs' BLAS kernels);
everything else must match exactly, apart from trailing spaces."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def console_examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$ ` line of the README's console blocks."""
    examples, block, in_console = [], None, False
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_console = line.strip() == "```console"
            block = None
            continue
        if not in_console:
            continue
        if line.startswith("$ "):
            block = (line[2:], [])
            examples.append(block)
        elif block is not None:
            block[1].append(line.rstrip())
    return examples


EXAMPLES = console_examples()


def _same(expected: str, actual: str) -> bool:
    if NUMBER.sub("#", expected) != NUMBER.sub("#", actual):
        return False
    return all(abs(float(a) - float(b)) <= 2e-3 for a, b in zip(NUMBER.findall(expected), NUMBER.findall(actual)))


def test_the_readme_has_console_examples():
    commands = [c for c, _ in EXAMPLES]
    assert any(c.startswith("attn lookup colour") for c in commands)
    assert any(c.startswith("attn matrix") for c in commands)
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("command,expected", EXAMPLES, ids=[c[:60] for c, _ in EXAMPLES])
def test_readme_example(command, expected, tmp_path):
    if "jq" in command and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, COLUMNS="80", NO_COLOR="1", ATTN_HOME=str(tmp_path / "home"),
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ATTN_MODEL", None)
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    actual = [line.rstrip() for line in proc.stdout.splitlines()]
    while actual and not actual[-1]:
        actual.pop()
    assert len(actual) == len(expected), "\n".join(actual)
    for want, got in zip(expected, actual):
        assert _same(want, got), f"README: {want!r}\nactual: {got!r}"
