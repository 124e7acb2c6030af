"""attn as a process in pipes and terminals: quiet on a closed pipe, no escape codes where they
do not belong, NO_COLOR honoured, a narrow terminal still readable, progress only on a terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ATTN = [sys.executable, "-m", "attncli"]
SENTENCE = "time flies like an arrow"
COLOR_SGR = re.compile(r"\x1b\[[0-9;]*(?:3[0-9]|4[0-9]|9[0-7]|10[0-7])[0-9;]*m")


def run(argv, env_extra=None, **kw):
    env = dict(os.environ)
    env.pop("FORCE_COLOR", None)
    env.pop("NO_COLOR", None)
    env.update(env_extra or {})
    return subprocess.run(ATTN + argv, capture_output=True, env=env, timeout=120, **kw)


def test_closed_pipe_ends_quietly():
    # attn writes a long JSON document into a pipe whose reader stops after 10 bytes.
    text = " ".join(["time flies like an arrow"] * 40)
    proc = subprocess.Popen(ATTN + ["matrix", text, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.read(10)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert first.startswith(b"{")
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err and err.strip() == b""


import pytest


@pytest.mark.parametrize("argv", [["--help"], ["scale"], ["matrix", SENTENCE, "--causal"], ["lookup", "colour"]])
def test_closed_pipe_after_a_rich_view_exits_0(argv):
    """rich's own broken-pipe handler exits 1; attn treats a reader that went away as success."""
    proc = subprocess.Popen(ATTN + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, COLUMNS="80"))
    proc.stdout.close()  # the reader is gone before attn writes anything: its first write fails
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err


def test_a_real_exit_1_is_kept_when_stdout_is_devnull(tmp_path):
    """The broken-pipe rule must not turn a runtime failure into success."""
    home = tmp_path / "home"
    bad = home / "models" / "broken"
    bad.mkdir(parents=True)
    (bad / "meta.json").write_text("{ not json", encoding="utf-8")
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.run(ATTN + ["lookup", "colour", "--model", "broken"], stdout=devnull, stderr=subprocess.PIPE,
                              env=dict(os.environ, ATTN_HOME=str(home)), timeout=120)
    assert proc.returncode == 1, proc.stderr


def test_piped_output_has_no_escape_sequences():
    for argv in (["matrix", SENTENCE, "--causal"], ["lookup", "colour"], ["demo"], ["variants"]):
        result = run(argv)
        assert result.returncode == 0, result.stderr
        assert b"\x1b[" not in result.stdout, argv


def test_no_color_is_honoured_on_a_forced_terminal():
    colored = run(["matrix", SENTENCE, "--causal"], {"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert COLOR_SGR.search(colored.stdout.decode()), "FORCE_COLOR should give a coloured heatmap"
    plain = run(["matrix", SENTENCE, "--causal"], {"FORCE_COLOR": "1", "NO_COLOR": "1", "TERM": "xterm-256color"})
    assert plain.returncode == 0
    assert not COLOR_SGR.search(plain.stdout.decode())


def test_narrow_terminal_stays_readable():
    result = run(["matrix", SENTENCE, "--causal"], {"COLUMNS": "40"})
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert all(len(line) <= 40 for line in out.splitlines()), out
    assert re.search(r"\d\.\d", out), "cells must still show their numbers"


def test_progress_goes_nowhere_when_stderr_is_not_a_terminal(tmp_path):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 50, encoding="utf-8")
    env = {"ATTN_HOME": str(tmp_path / "home")}
    result = run(["train", "--corpus", str(corpus), "--dim", "8", "--epochs", "2", "--min-count", "1", "--name", "tiny", "--json"], env)
    assert result.returncode == 0, result.stderr
    assert b"\x1b[" not in result.stderr and b"\r" not in result.stderr
    assert b"\x1b[" not in result.stdout


def test_models_table_keeps_whole_dates_at_80_columns(tmp_path):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 50, encoding="utf-8")
    env = {"ATTN_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
    trained = run(["train", "--corpus", str(corpus), "--dim", "8", "--epochs", "1", "--min-count", "1",
                   "--name", "a-rather-long-model-name-for-the-table", "--json"], env)
    assert trained.returncode == 0, trained.stderr
    table = run(["models"], env).stdout.decode()
    assert all(len(line) <= 80 for line in table.splitlines()), table
    assert len(re.findall(r"\b20\d\d-\d\d-\d\d\b", table)) == 2, table  # both rows' dates, uncut
