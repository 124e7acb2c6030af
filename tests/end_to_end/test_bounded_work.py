"""Bounded work for every input (issue 15, class 5): each hostile size either finishes in work
proportional to its size or is refused up front with exit 2 naming the limit.

No wall-clock assertion here (issue 24): the work is counted. ``python_lines`` counts the Python
lines attn executes (a deterministic count, whatever the machine's load), and a size 4x larger
must cost at most ~4x as many (a quadratic loop costs 16x); the normalisation is checked to see
no run of more than 30 combining marks (what makes it linear); additive attention at a refused
size must never be computed. A numpy-internal quadratic path (the old key indexing compared each
position with every one before it) would take minutes at these sizes: each test carries a
``timeout`` marker (pytest-timeout) so it fails instead of hanging. The timings themselves are in
bench/bench_bounded_work.py. Streams like /dev/zero run in a child process under a 1 GiB
address-space limit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _special_files import machine_device
from attncli.cli.main import app
from attncli.lookup.dictionary import MAX_DEPTH
from attncli.io.textio import MAX_INPUT_BYTES
from attncli.vectors.tokenize import tokenize

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
MEMORY = 1 << 30


def attn_bounded(*argv: str, stdin=None, timeout: float = 60) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "attncli", *argv], capture_output=True, text=True, stdin=stdin,
                          timeout=timeout, preexec_fn=limit, env=env)


def python_lines(fn, *args, **kw):
    """(fn's result, the number of Python lines executed in attncli's own modules): a count of
    work that does not depend on the machine's speed or load."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def enter(frame, event, arg):
        return local if f"{os.sep}attncli{os.sep}" in frame.f_code.co_filename else None

    sys.settrace(enter)
    try:
        return fn(*args, **kw), count
    finally:
        sys.settrace(None)


def assert_linear(small: int, large: int, factor: int = 4) -> None:
    """``large`` (the work at ``factor`` times the size) within 1.25 x factor of ``small``."""
    assert large <= 1.25 * factor * small, f"{factor}x the input cost {large / small:.1f}x the work"


@pytest.mark.timeout(120)
def test_long_runs_of_combining_marks_normalise_in_linear_time(monkeypatch):
    import unicodedata

    from attncli.vectors.tokenize import MAX_MARK_RUN

    longest_run = []
    real_normalize = unicodedata.normalize

    def spy(form, text):  # canonical reordering is quadratic in a run of reorderable marks: runs must be cut
        run = longest = 0
        for ch in text:
            run = run + 1 if unicodedata.combining(ch) else 0
            longest = max(longest, run)
        longest_run.append(longest)
        assert longest <= MAX_MARK_RUN, f"a run of {longest} combining marks reached NFC"  # before the slow call
        return real_normalize(form, text)

    monkeypatch.setattr(unicodedata, "normalize", spy)
    text = "a" + "\u0301\u0327" * 200_000 + " b"  # 400,000 marks on one letter
    tokens = tokenize(text)
    assert longest_run and max(longest_run) <= MAX_MARK_RUN  # no longer run reaches NFC
    assert tokens[-1] == "b" and len(tokens) == 2
    assert tokenize("nai\u0308ve café") == ["naïve", "café"]  # ordinary text: as before


@pytest.mark.timeout(120)
def test_a_key_of_very_many_words_is_linear(tmp_path):
    lines = []
    for n in (32_500, 130_000):  # 97,500 and 390,000 words in one key
        words = " ".join(["colour", "speedy", "zzqx"] * n)
        path = tmp_path / f"d{n}.json"
        path.write_text(json.dumps({words: "long", "speed": "fast", "colour": "red"}), encoding="utf-8")
        result, count = python_lines(runner.invoke, app, ["lookup", "velocity", "--dict", str(path), "--json"])
        assert result.exit_code == 0, result.output
        assert {e["key"] for e in json.loads(result.stdout)["entries"]} == {words, "speed", "colour"}
        lines.append(count)
    assert_linear(*lines)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_query_of_very_many_words_and_one_enormous_token(tmp_path):
    lines = []
    for n in (25_000, 100_000):
        query = " ".join(["colour", "speed", "zzqx"] * n)
        result, count = python_lines(runner.invoke, app, ["lookup", query, "--explain"])
        assert result.exit_code == 0, result.output
        assert len(result.stdout) < 20_000  # the explanation lists the first tokens, not 300,000
        lines.append(count)
    assert_linear(*lines)
    lines = []
    for n in (500_000, 2_000_000):
        result, count = python_lines(runner.invoke, app, ["lookup", "q" * n])
        assert result.exit_code in (0, 2) and "Traceback" not in result.output
        lines.append(count)
    assert_linear(*lines)
    assert len(result.stderr) < 2_000  # the message quotes a short prefix


def test_very_long_values_are_cut_in_the_table_and_whole_in_json(tmp_path):
    long = "v" * 100_000
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"colour": long, "speed": "fast", "w" * 50_000: 1}), encoding="utf-8")
    result = runner.invoke(app, ["lookup", "colour", "--dict", str(path), "--explain"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout) < 20_000
    assert "100,000 characters" in result.stdout
    doc = json.loads(runner.invoke(app, ["lookup", "colour", "--dict", str(path), "--json"]).stdout)
    assert doc["best"]["value"] == long


@pytest.mark.parametrize("argv, stdin", [
    (["matrix", "--file", "/dev/zero"], None),
    (["matrix", "-"], "/dev/zero"),
    (["lookup", "colour", "--dict", "/dev/zero"], None),
    (["lookup", "colour", "--dict", "-"], "/dev/zero"),
    (["lookup", "--queries", "/dev/zero"], None),
    (["similar", "-"], "/dev/zero"),
    (["train", "--corpus", "/dev/zero", "--name", "z"], None),
    (["heads", "--file", "/dev/zero"], None),
])
def test_endless_inputs_are_refused_with_bounded_memory(argv, stdin):
    machine_device("/dev/zero")
    if stdin is not None:
        with open(stdin, "rb") as fh:
            proc = attn_bounded(*argv, stdin=fh)
    else:
        proc = attn_bounded(*argv)
    assert proc.returncode == 2, proc.stderr
    err = " ".join(proc.stderr.split())
    assert err.startswith("error: ") and "Traceback" not in proc.stderr, err
    if argv[0] != "heads":  # heads needs a trained model first
        assert "MiB" in err or "binary" in err, err


def test_a_huge_regular_file_is_refused_naming_the_limit(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b'{"colour": "' + b"x" * 1024 + b'"')
        fh.truncate(MAX_INPUT_BYTES + 4096)  # sparse: no disk needed
    proc = attn_bounded("lookup", "colour", "--dict", str(big))
    assert proc.returncode == 2, proc.stderr
    assert f"{MAX_INPUT_BYTES // 2**20} MiB" in proc.stderr


def test_deep_nesting_is_refused_up_front_and_shallower_nesting_works(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"colour": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + ', "speed": 1}', encoding="utf-8")
    for extra in ([], ["--json"], ["--explain"]):
        result = runner.invoke(app, ["lookup", "colour", "--dict", str(deep), *extra])
        assert result.exit_code == 2, result.output
        assert f"{MAX_DEPTH} levels" in result.stderr
    ok = tmp_path / "ok.json"
    ok.write_text('{"colour": ' + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + ', "speed": 1}', encoding="utf-8")
    for extra in ([], ["--json"], ["--explain"]):
        result = runner.invoke(app, ["lookup", "colour", "--dict", str(ok), *extra])
        assert result.exit_code == 0, result.output


def test_additive_attention_at_a_large_size_is_refused_up_front(monkeypatch):
    from attncli.attention import matrix

    def never(*args, **kw):
        raise AssertionError("the refused size was computed")

    monkeypatch.setattr(matrix, "attend", never)  # refused up front: not one tanh term computed
    text = " ".join(["time flies like an arrow"] * 200)  # 1,000 tokens
    result = runner.invoke(app, ["matrix", text, "--variant", "additive", "--proj", "random", "--d-k", "4096", "--json"])
    assert result.exit_code == 2, result.output
    assert "tanh terms" in result.stderr and "at most" in result.stderr
