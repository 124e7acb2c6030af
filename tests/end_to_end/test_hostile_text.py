"""Text that is not valid Unicode, from every way in: stdin, arguments, JSON escapes, and numbers
JSON can write but a float cannot hold. Each is refused with exit 2 before anything is printed,
so no output (and no --json document) ever carries invalid text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ATTN = [sys.executable, "-m", "attncli"]


def run(argv, stdin=b"", **kw):
    return subprocess.run(ATTN + argv, input=stdin, capture_output=True, timeout=120, **kw)


@pytest.mark.parametrize("argv,stdin", [
    (["lookup", "--queries", "-", "--json"], b"colour\n\xffbad\n"),
    (["lookup", "colour", "--dict", "-", "--json"], b'{"col\xffour": "x"}'),
    (["matrix", "-", "--json"], b"time flies \xff"),
])
def test_invalid_utf8_on_stdin_is_refused(argv, stdin):
    result = run(argv, stdin)
    assert result.returncode == 2, result.stderr
    assert b"not UTF-8" in result.stderr and result.stdout == b""


@pytest.mark.parametrize("argv", [["similar", b"king\xff", "--json"], ["lookup", b"col\xffour", "--json"],
                                  ["matrix", b"time \xffflies", "--json"]])
def test_invalid_utf8_in_an_argument_is_refused(argv):
    result = run([os.fsdecode(a) if isinstance(a, bytes) else a for a in argv])
    assert result.returncode == 2, result.stderr
    assert b"not valid Unicode" in result.stderr and result.stdout == b""


@pytest.mark.parametrize("document", ['{"colour\\ud800": "x"}', '{"colour": ["ok", {"deep": "\\udfff"}]}'])
def test_lone_surrogate_escapes_in_a_dictionary_are_refused(document):
    result = run(["lookup", "colour", "--dict", "-", "--json"], document.encode())
    assert result.returncode == 2, result.stderr
    assert b"lone surrogate" in result.stderr and result.stdout == b""


def test_a_number_beyond_float_range_is_refused():
    result = run(["lookup", "speed", "--dict", "-", "--json"], b'{"speed": 1e400, "price": 3}')
    assert result.returncode == 2, result.stderr
    assert b"too large for a float" in result.stderr and result.stdout == b""
    fine = run(["lookup", "speed", "--dict", "-", "--json"], b'{"speed": 1e300, "price": 3}')
    assert fine.returncode == 0 and json.loads(fine.stdout)["best"]["value"] == 1e300


@pytest.mark.parametrize("argv", [["matrix", "-"], ["lookup", "--queries", "-"], ["lookup", "colour", "--dict", "-"]])
def test_closed_stdin_is_bad_input(argv):
    result = subprocess.run(ATTN + argv, capture_output=True, timeout=120,
                            preexec_fn=lambda: os.close(0))
    assert result.returncode == 2, result.stderr
    assert b"closed" in result.stderr and b"Traceback" not in result.stderr


def test_similar_reads_stdin_strictly():
    result = run(["similar", "-", "-k", "2", "--json"], b"king\nqu\xffeen\n")
    assert result.returncode == 2 and b"line 2 of stdin is not UTF-8" in result.stderr
    assert [json.loads(line)["query"] for line in result.stdout.decode().splitlines()] == ["king"]  # streamed before line 2


@pytest.mark.parametrize("name", ["nl\n", "default", "../x"])
def test_train_checks_the_name_before_reading_any_corpus(name, tmp_path):
    result = run(["train", "--name", name, "--corpus", str(tmp_path / "missing.txt")],
                 env=dict(os.environ, ATTN_HOME=str(tmp_path / "home")))
    assert result.returncode == 2 and b"does not exist" not in result.stderr, result.stderr
    assert b"name" in result.stderr
