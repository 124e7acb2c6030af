"""Progress on stderr for work over a second (loading a pretrained model, the forward passes of
``attn heads --transformer``, the preparation of ``attn train-attention``): shown without --json,
not under --json (stderr stays empty, stdout strict JSON), shown under --json when stderr is a
terminal."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attncli.cli.main import app

SENTENCES = "the cat sat on the mat\na quick brown fox jumps over the lazy dog\nfruit flies like a banana\n"


def run(*args, terminal: bool = False):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    env = {"COLUMNS": "80", "NO_COLOR": "1", "TTY_COMPATIBLE": "1" if terminal else "0"}
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture(autouse=True)
def no_delay(monkeypatch):
    """Progress is said once the work has taken a second; the tiny models load in less, so here
    at once (a test of the delay itself sets it back)."""
    import attncli.cli.progress

    monkeypatch.setattr(attncli.cli.progress, "DELAY", 0.0)


@pytest.fixture
def sentences(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text(SENTENCES, encoding="utf-8")
    return path


def test_heads_transformer_shows_the_load_and_a_bar_over_the_sentences(tiny_bert_dir, sentences):
    result = run("heads", "--transformer", str(tiny_bert_dir), "--file", str(sentences))
    assert result.exit_code == 0, result.stderr
    assert " ".join(result.stderr.split()).startswith(f"loading {tiny_bert_dir} ")
    lines = result.stderr.splitlines()
    assert any(line.startswith("sentences 3/3") for line in lines), result.stderr
    assert lines.index(next(x for x in lines if x.startswith("scoring the 8 heads"))) < \
        lines.index(next(x for x in lines if x.startswith("sentences 3/3")))


def test_heads_transformer_json_has_no_progress(tiny_bert_dir, sentences):
    result = run("heads", "--transformer", str(tiny_bert_dir), "--file", str(sentences), "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["sentences"] == 3


def test_json_on_a_terminal_still_shows_progress(tiny_bert_dir, sentences):
    result = run("heads", "--transformer", str(tiny_bert_dir), "--file", str(sentences), "--json", terminal=True)
    assert result.exit_code == 0, result.stderr
    assert f"loading {tiny_bert_dir}" in result.stderr and "sentences" in result.stderr
    assert json.loads(result.stdout)["sentences"] == 3


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_matrix_transformer_says_it_loads(tiny_bert_dir, backend):
    result = run("matrix", "time flies", "--transformer", str(tiny_bert_dir), "--backend", backend)
    assert result.exit_code == 0, result.stderr
    assert " ".join(result.stderr.split()).startswith(f"loading {tiny_bert_dir}, --backend {backend}")
    quiet = run("matrix", "time flies", "--transformer", str(tiny_bert_dir), "--backend", backend, "--json")
    assert quiet.exit_code == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["backend"] == backend


def test_train_attention_says_what_it_prepares_before_the_bar(monkeypatch):
    """The message comes before the model or the corpus is read (the model is unknown here, so the
    command stops after it, exit 2; the test waits for the message as slow work would); under
    --json it is left out."""
    import attncli.cli.lm

    real_train = attncli.cli.lm.train

    def slow_train(*args, **kwargs):
        import time

        time.sleep(0.3)  # the preparation, long enough for the message (the delay is 0 here)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(attncli.cli.lm, "train", slow_train)  # the name the command calls
    result = run("train-attention", "--model", "nosuch", "--name", "x")
    assert result.exit_code == 2
    assert result.stderr.startswith("preparing: reading the model and Brown")
    quiet = run("train-attention", "--model", "nosuch", "--name", "x", "--json")
    assert quiet.exit_code == 2 and quiet.stderr.startswith("error:")


def test_a_quick_refusal_has_no_progress_before_it(monkeypatch, tiny_bert_dir):
    """A run refused before the delay is over shows the error alone (the first line on stderr)."""
    import attncli.cli.progress

    monkeypatch.setattr(attncli.cli.progress, "DELAY", 30.0)  # far more than the load takes, however busy
    result = run("matrix", "time flies", "--transformer", str(tiny_bert_dir), "--layer", "99")
    assert result.exit_code == 2 and result.stderr.startswith("error: --layer 99 is out of range"), result.stderr


@pytest.mark.slow
def test_heads_transformer_says_it_reads_brown(tiny_bert_dir):
    """Without --file the sentences come from Brown, seconds of reading (the whole corpus: slow)
    are said before the bar."""
    from conftest import skip_without_brown

    skip_without_brown()
    result = run("heads", "--transformer", str(tiny_bert_dir), "--sentences", "2")
    assert result.exit_code == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stderr.splitlines()]
    reading = lines.index("reading the held-out Brown sentences")
    assert reading < next(n for n, line in enumerate(lines) if line.startswith("sentences 2/2"))
