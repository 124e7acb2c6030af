"""The documentation's examples are real: each `$ command` in a ```console block, or in a ```text
block that starts with one, in README.md and in docs/*.md is run and must print what is shown (80
columns unless a `<!-- test: COLUMNS=N -->` line precedes the block, no colour, an empty
ATTN_HOME). Numbers are compared to within 2e-3 (the last printed digit may differ across CPUs'
BLAS kernels); everything else must match exactly, apart from trailing spaces.

A command that names all-MiniLM-L6-v2 runs in a folder holding the model (from its pip package,
extracted under that name, as the docs say) and a link to the repository's data/; one that names
tiny-t5 runs in a folder holding a tiny random T5 of that name (tests/_seq2seq_fixtures.py: there
is no encoder-decoder in the test environment); every other command runs from the repository root."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
COLUMNS_MARK = re.compile(r"<!-- test: COLUMNS=(\d+) -->")
MINILM = "all-MiniLM-L6-v2"
TINY_T5 = "tiny-t5"
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass
class Example:
    source: str
    command: str
    columns: int
    expected: list[str] = field(default_factory=list)

    @property
    def needs_minilm(self) -> bool:
        return MINILM in self.command

    @property
    def needs_t5(self) -> bool:
        return TINY_T5 in self.command


def _complete(command: str) -> bool:
    """True when a shell command needs no further line (no trailing backslash, quotes closed)."""
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def examples_in(path: Path) -> list[Example]:
    """Every `$ ` command of `path`'s console blocks and of its text blocks that open with one."""
    examples: list[Example] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    columns, i = 80, 0
    while i < len(lines):
        line = lines[i]
        mark = COLUMNS_MARK.fullmatch(line.strip())
        if mark:
            columns = int(mark.group(1))
        if not line.startswith("```"):
            i += 1
            continue
        label = line.strip()[3:]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        body = lines[i + 1:end]
        first = next((b for b in body if b.strip()), "")
        if label == "console" or (label == "text" and first.startswith("$ attn")):
            current, j = None, 0
            while j < len(body):
                if body[j].startswith("$ "):
                    command = body[j][2:]
                    while not _complete(command) and j + 1 < len(body):
                        j += 1
                        command += "\n" + body[j]
                    current = Example(f"{path.name}:{i + 2 + j}", command, columns)
                    examples.append(current)
                elif current is not None:
                    current.expected.append(body[j].rstrip())
                j += 1
            for example in examples:
                while example.expected and not example.expected[-1]:
                    example.expected.pop()
        columns, i = 80, end + 1
    return examples


EXAMPLES = [example for path in DOCUMENTS for example in examples_in(path)]


def _same(expected: str, actual: str) -> bool:
    if NUMBER.sub("#", expected) != NUMBER.sub("#", actual):
        return False
    return all(abs(float(a) - float(b)) <= 2e-3 for a, b in zip(NUMBER.findall(expected), NUMBER.findall(actual)))


def test_the_documents_have_console_examples():
    commands = [e.command for e in EXAMPLES]
    sources = {e.source.split(":")[0] for e in EXAMPLES}
    assert any(c.startswith("attn lookup colour") for c in commands)
    assert any(c.startswith("attn matrix") for c in commands)
    assert any(e.needs_minilm for e in EXAMPLES)
    assert {"README.md", "lookup.md", "transformers.md"} <= sources
    assert len(EXAMPLES) >= 10


def test_the_collector_joins_continued_commands_and_reads_the_width():
    """A command continued by a backslash or an open quote is one command; the width mark counts
    for the next block only."""
    text = ("<!-- test: COLUMNS=100 -->\n```text\n$ attn a \\\n    b\nout 1\n\n$ attn c 'x\n  y'\nout 2\n```\n"
            "```console\n$ attn d\nout 3\n```\n```text\nattn e\n```\n")
    path = REPO / "tests" / "__collector_probe__.md"
    try:
        path.write_text(text, encoding="utf-8")
        found = examples_in(path)
    finally:
        path.unlink()
    assert [(e.command, e.columns, e.expected) for e in found] == [
        ("attn a \\\n    b", 100, ["out 1"]), ("attn c 'x\n  y'", 100, ["out 2"]), ("attn d", 80, ["out 3"])]


@pytest.fixture(scope="module")
def minilm_folder(minilm_dir) -> Path:
    """The folder holding all-MiniLM-L6-v2 under its own name, with data/ linked beside it."""
    assert minilm_dir.name == MINILM
    data = minilm_dir.parent / "data"
    if not data.exists():
        data.symlink_to(REPO / "data", target_is_directory=True)
    return minilm_dir.parent


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory) -> Path:
    """A folder holding a tiny random T5 (docs/transformers.md's encoder-decoder examples) as tiny-t5."""
    from conftest import needed

    needed("transformers")
    from _seq2seq_fixtures import build_t5

    folder = tmp_path_factory.mktemp("t5-docs")
    build_t5(folder / TINY_T5)
    return folder


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.source} {e.command[:50]}" for e in EXAMPLES])
def test_documented_example(example, tmp_path, request):
    if "jq" in example.command and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    cwd = (request.getfixturevalue("minilm_folder") if example.needs_minilm
           else request.getfixturevalue("t5_folder") if example.needs_t5 else REPO)
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, COLUMNS=str(example.columns), NO_COLOR="1", ATTN_HOME=str(tmp_path / "home"),
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ATTN_MODEL", None)
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", example.command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    actual = [line.rstrip() for line in proc.stdout.splitlines()]
    while actual and not actual[-1]:
        actual.pop()
    assert len(actual) == len(example.expected), "\n".join(actual)
    for want, got in zip(example.expected, actual):
        assert _same(want, got), f"{example.source}: {want!r}\nactual: {got!r}"
