"""One line for the environment, nothing left behind (issue 15, classes 6 and 7).

Disk full, a store that cannot be written, a full or closed stdout (--help and --version too),
out of memory, too many open files, an ASCII-only locale, COLUMNS=0, Ctrl-C during start-up,
SIGTERM and SIGHUP (delivered on cue at a named stage, attncli/io/faultpoints.py): one line on stderr and the right exit code, never "internal error" or a
traceback. Real signals and real streams in child processes; the rarer failures (ENOSPC while
saving, EMFILE, MemoryError) injected in-process where the kernel cannot be made to fail on cue.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _attention_fixtures import make_random_attention
from _lookup_fixtures import save_plain
from _pause import paused
from _special_files import machine_device
from attncli.env import paths
from attncli.cli.main import app
from attncli.vectors import corpus, safeio, store

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
ATTN = [sys.executable, "-m", "attncli"]


def env(**extra) -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("FORCE_COLOR", None)
    e.update(extra)
    return e


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "internal error" not in stderr and "this is a bug" not in stderr.lower(), stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def tiny_corpus(tmp_path) -> Path:
    path = tmp_path / "tiny.txt"
    path.write_text("the cat sat on the mat\nthe dog sat on the log\na cat and a dog\n" * 20, encoding="utf-8")
    return path


# -- 6. the environment -------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["lookup", "colour"], ["lookup", "colour", "--json"],
                                  ["matrix", "time flies", "--json"]])
def test_a_full_stdout_is_one_line_and_exit_1(argv):
    with open(machine_device("/dev/full"), "wb") as full:
        proc = subprocess.run(ATTN + argv, stdout=full, stderr=subprocess.PIPE, text=True, env=env(), timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "no space left" in one_line(proc.stderr)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["lookup", "colour"]])
def test_a_closed_stdout_is_one_line_and_exit_1(argv):
    proc = subprocess.run(ATTN + argv, stdout=None, stderr=subprocess.PIPE, text=True, env=env(), timeout=120,
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 1, proc.stderr
    assert "standard output is closed" in one_line(proc.stderr)


def test_an_ascii_only_locale_shows_views_and_keeps_json_exact(tmp_path):
    d = tmp_path / "d.json"
    d.write_text(json.dumps({"café": "crème brûlée ☕", "speed": "fast"}), encoding="utf-8")
    ascii_env = env(PYTHONIOENCODING="ascii")
    view = subprocess.run(ATTN + ["lookup", "café", "--dict", str(d)], capture_output=True, env=ascii_env, timeout=120)
    assert view.returncode == 0, view.stderr
    assert view.stdout.isascii() and b"Traceback" not in view.stderr
    out = subprocess.run(ATTN + ["lookup", "café", "--dict", str(d), "--json"], capture_output=True, env=ascii_env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["best"]["value"] == "crème brûlée ☕"
    m = subprocess.run(ATTN + ["matrix", "café crème", "--json"], capture_output=True, env=ascii_env, timeout=120)
    assert m.returncode == 0, m.stderr
    assert json.loads(m.stdout)["tokens"] == ["café", "crème"]


@pytest.mark.parametrize("columns", ["0", "-5", "abc"])
def test_a_nonsense_terminal_width_is_ignored(columns):
    proc = subprocess.run(ATTN + ["lookup", "colour"], capture_output=True, text=True, env=env(COLUMNS=columns), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "answer: black" in proc.stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_start_up_is_one_line(tmp_path, signum):
    """Delivered on cue: the child is paused at start-up (attncli/io/faultpoints.py), signals
    installed, the CLI not yet imported, when the signal arrives."""
    with paused(ATTN + ["lookup", "colour"], tmp_path / "home", "start-up") as proc:
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert out == ""
    assert one_line(err) == ("interrupted" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}")


def test_disk_full_while_saving_is_one_line_and_leaves_nothing(monkeypatch, tiny_corpus):
    save_plain("keep")

    def full(path, array):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store, "write_npy", full)
    result = runner.invoke(app, ["train", "--corpus", str(tiny_corpus), "--name", "keep", "--min-count", "1",
                                 "--epochs", "1", "--dim", "8", "--workers", "1"])
    assert result.exit_code == 1, result.output
    assert "no space left" in result.stderr and "internal error" not in result.stderr
    versions = paths.models_dir() / ".versions"
    assert [p.name for p in versions.iterdir()] == [os.readlink(paths.models_dir() / "keep").split("/")[-1]]


def test_a_store_that_cannot_be_written_fails_before_training(tmp_path, monkeypatch, tiny_corpus):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("ATTN_HOME", str(blocker / "home"))
    result = runner.invoke(app, ["train", "--corpus", str(tiny_corpus), "--name", "x", "--min-count", "1", "--epochs", "1"])
    assert result.exit_code == 1, result.output
    assert "cannot create the model store" in result.stderr
    assert "Training" not in result.stderr  # refused before the training started


def test_too_many_open_files_is_not_damage(monkeypatch):
    save_plain("m")
    real_open = os.open

    def emfile(path, *args, **kw):
        if str(path).endswith(".npy"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kw)

    monkeypatch.setattr(safeio.os, "open", emfile)
    result = runner.invoke(app, ["similar", "speed", "--model", "m"])
    assert result.exit_code == 1, result.output
    assert "too many open files" in result.stderr and "damaged" not in result.stderr


def test_out_of_memory_is_one_line(monkeypatch):
    from attncli.lookup import dictionary

    def oom(*args, **kw):
        raise MemoryError()

    monkeypatch.setattr(dictionary, "lookup", oom)
    result = runner.invoke(app, ["lookup", "colour"])
    assert result.exit_code == 1, result.output
    assert "out of memory" in result.stderr and "internal error" not in result.stderr


# -- 7. signals clean up like Ctrl-C; nothing lost silently ---------------------------------------


@pytest.mark.slow  # six training runs, each stopped by a signal
@pytest.mark.parametrize("stage", ["version-written", "link-made"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_a_trained_model_is_written_cleans_up_like_ctrl_c(tmp_path, tiny_corpus, signum, stage):
    """Delivered on cue: the child is paused while it writes the model it trained (its files
    written, or the link to it made but not yet swapped in) when the signal arrives; the child is
    killed if it outlives the test."""
    home = tmp_path / "home"
    argv = ATTN + ["train", "--corpus", str(tiny_corpus), "--name", "m", "--min-count", "1", "--epochs", "1",
                   "--dim", "8", "--workers", "1"]
    keep = subprocess.run(argv, capture_output=True, text=True, env=env(ATTN_HOME=str(home)), timeout=300)
    assert keep.returncode == 0, keep.stderr
    before = os.readlink(home / "models" / "m")
    with paused(argv + ["--force"], home, stage) as proc:
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == ("interrupted" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}"), err
    models = home / "models"
    assert sorted(p.name for p in (models / ".versions").iterdir()) == [before.split("/")[-1]]  # no partial, no new version
    assert os.readlink(models / "m") == before
    assert [p.name for p in models.iterdir() if p.name != ".versions"] == ["m"]  # no temporary link left


def test_similar_with_empty_stdin_is_bad_input():
    for text in ("", "\n  \n"):
        result = runner.invoke(app, ["similar", "-"], input=text)
        assert result.exit_code == 2, result.output
        assert "no word" in result.stderr


def test_a_corpus_line_longer_than_gensims_limit_is_split_with_a_warning(tmp_path, capsys):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(f"w{i % 97}" for i in range(25_000)) + "\nshort line here\n", encoding="utf-8")
    text = corpus.read_text_corpus(path)
    assert [len(s) for s in text.sentences] == [10_000, 10_000, 5_000, 3]
    assert sum(len(s) for s in text.sentences) == 25_003  # nothing dropped
    assert "split" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["similar", "!" * 1_000_000], ["lookup", "?" * 1_000_000],
                                  ["lookup", "colour", "--model", "x" * 100_000], ["matrix", "." * 1_000_000]])
def test_messages_quote_a_short_prefix_of_a_huge_input(argv):
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output[:300]
    assert len(result.stderr) < 1_000, len(result.stderr)


def test_an_invalid_attn_model_says_it_came_from_attn_model(monkeypatch):
    for value in ("bad name!", "nosuchmodel"):
        monkeypatch.setenv("ATTN_MODEL", value)
        for argv in (["lookup", "colour"], ["similar", "car"], ["matrix", "a b"]):
            result = runner.invoke(app, argv)
            assert result.exit_code == 2, result.output
            assert "ATTN_MODEL" in result.stderr


def test_install_completion_for_an_unknown_shell_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(["sh", "-c", " ".join(f"'{a}'" for a in ATTN) + " --install-completion"],
                          capture_output=True, text=True, env=env(HOME=str(home), SHELL="/bin/sh"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not supported" in one_line(proc.stderr) and proc.stdout == ""
    assert list(home.iterdir()) == []  # nothing installed


def test_retraining_a_model_with_trained_attention_needs_force(tiny_corpus):
    make_random_attention("rand", layers=1, heads=2)
    before = os.readlink(paths.models_dir() / "rand")
    argv = ["train", "--corpus", str(tiny_corpus), "--name", "rand", "--min-count", "1", "--epochs", "1",
            "--dim", "8", "--workers", "1"]
    refused = runner.invoke(app, argv)
    assert refused.exit_code == 2, refused.output
    assert "--force" in refused.stderr and "attention" in refused.stderr
    assert os.readlink(paths.models_dir() / "rand") == before
    forced = runner.invoke(app, [*argv, "--force"])
    assert forced.exit_code == 0, forced.output
    assert "discarded" in forced.stderr
    assert not (paths.models_dir() / "rand" / "attention").exists()
