"""Hostile numbers: every numeric option has an upper bound, checked before any work (exit 2, no
traceback); a diverging attention training fails with exit 1 and leaves the stored model alone."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from attncli.tinylm import torch_model
from typer.testing import CliRunner

from _attention_fixtures import make_random_attention, tiny_brown, tiny_brown_model
from attncli.tinylm import heads, data as lm_data, train as train_attention, model as trained
from attncli.env import paths
from attncli.vectors import store, train
from attncli.cli.main import app
from attncli.errors import BadInput
from attncli.vectors.train import TrainParams
from attncli.tinylm.train_config import TrainConfig

runner = CliRunner()
HUGE = 99999999999999999999  # > 2^64: overflows every C integer
TEXT = "\n".join(["the king rules the kingdom with the queen", "a man and a woman walk to the city"] * 20)


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corp.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def refused(result, option: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:") and option in result.stderr, result.stderr
    assert "Traceback" not in result.output and "internal error" not in result.output


# --- attn train ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("window", HUGE, "--window must be at most 1,000"),
        ("window", 1001, "--window must be at most 1,000"),
        ("negative", HUGE, "--negative must be at most 1,000"),
        ("epochs", 10_001, "--epochs must be at most 10,000"),
        ("min_count", HUGE, "--min-count must be at most"),
        ("workers", HUGE, "--workers must be at most 1,024"),
        ("bucket", 1_000_000_000_000_000, "--bucket must be at most 100,000,000"),
        ("max_n", HUGE, "--max-n must be at most 100"),
        ("min_n", 101, "--min-n must be at most 100"),
        ("dim", HUGE, "--dim"),
        ("seed", HUGE, "--seed must be in [0, 2^32)"),
        ("sample", float("nan"), "--sample must be in [0, 1)"),
        ("sample", float("inf"), "--sample must be in [0, 1)"),
    ],
)
def test_train_params_upper_bounds(field, value, message):
    kw = {field: value}
    if field == "min_n":
        kw["max_n"] = 101
    with pytest.raises(BadInput) as info:
        TrainParams(**kw).validate()
    assert message in str(info.value) and str(value)[:8] in str(info.value)


def test_train_params_bounds_accept_the_limits():
    TrainParams(dim=300, window=1000, negative=1000, epochs=10_000, workers=1024, bucket=2_000_000,
                min_n=100, max_n=100, seed=2**32 - 1).validate()
    TrainParams(algorithm="word2vec", bucket=HUGE, max_n=HUGE).validate()  # fastText-only options are ignored


def test_train_ngram_table_size_is_bounded():
    with pytest.raises(BadInput) as info:
        TrainParams(bucket=100_000_000, dim=300).validate()
    assert "--bucket" in str(info.value) and "--dim" in str(info.value)


@pytest.mark.parametrize("option", ["--window", "--negative", "--epochs", "--workers"])
def test_train_huge_numbers_exit_2_instead_of_hanging(corpus_file, option, attn_home):
    """Before the bounds, training hung for ever (--window, --negative: gensim's worker thread died
    with OverflowError); a subprocess with a timeout, so a regression fails instead of hanging."""
    cmd = [sys.executable, "-m", "attncli", "train", "--corpus", str(corpus_file), "--epochs", "1",
           "--workers", "1", "--min-count", "1", option, str(HUGE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, ATTN_HOME=str(attn_home)))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error:") and option in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "option"), [
    (["--max-n", str(HUGE)], "--max-n"),
    (["--bucket", "1000000000000000"], "--bucket"),
    (["--min-n", str(HUGE), "--max-n", str(HUGE)], "--min-n"),
    (["--bucket", str(HUGE)], "--bucket"),
])
def test_train_cli_huge_numbers_exit_2(corpus_file, args, option):
    result = runner.invoke(app, ["train", "--corpus", str(corpus_file), "--min-count", "1", "--workers", "1",
                                 "--epochs", "1", *args])
    refused(result, option)
    assert not (paths.models_dir() / "corp-fasttext").exists()


def test_train_out_of_memory_is_a_runtime_failure(corpus_file, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(train, "build_model", no_memory)
    result = runner.invoke(app, ["train", "--corpus", str(corpus_file), "--min-count", "1", "--workers", "1",
                                 "--epochs", "1", "--dim", "8"])
    assert result.exit_code == 1 and "not enough memory" in result.stderr and "--dim" in result.stderr, result.output
    assert "internal error" not in result.output


# --- attn train-attention -----------------------------------------------------------------------

SMALL = ["--limit-sentences", "500", "--epochs", "1", "--vocab-size", "200", "--batch-tokens", "512"]


@pytest.fixture
def brown_tiny(monkeypatch):
    monkeypatch.setattr(lm_data, "brown_documents", tiny_brown)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("layers", HUGE, "--layers must be in [1, 64]"),
        ("layers", 65, "--layers must be in [1, 64]"),
        ("heads", 2048, "--heads must be in [1, 1,024]"),
        ("epochs", 10_001, "--epochs must be in [1, 10,000]"),
        ("vocab_size", HUGE, "--vocab-size must be in [2, 10,000,000]"),
        ("max_len", 99999999999999, "--max-len must be in [2, 4,096]"),
        ("batch_tokens", HUGE, "--batch-tokens must be in [16, 10,000,000]"),
        ("lr", float("inf"), "--lr must be a number in (0, 10]"),
        ("lr", 1e30, "--lr must be a number in (0, 10]"),
        ("lr", float("nan"), "--lr must be a number in (0, 10]"),
        ("max_minutes", float("inf"), "--max-minutes must be a number in (0, 10080]"),
        ("max_minutes", float("nan"), "--max-minutes must be a number in (0, 10080]"),
        ("max_minutes", 7 * 24 * 60 + 1, "--max-minutes must be a number in (0, 10080]"),
        ("dropout", float("nan"), "--dropout must be in [0, 1)"),
        ("heldout", float("nan"), "--heldout must be between 0 and 1"),
        ("seed", -1, "--seed must be in [0, 2^32)"),
        ("seed", HUGE, "--seed must be in [0, 2^32)"),
        ("threads", HUGE, "--threads must be in [1, 1,024]"),
        ("limit_sentences", 10**9 + 1, "--limit-sentences must be in [2, 1,000,000,000]"),
    ],
)
def test_train_config_upper_bounds(field, value, message):
    cfg = TrainConfig(**{field: value})
    with pytest.raises(BadInput) as info:
        cfg.check(16)
    assert message in str(info.value), str(info.value)


def test_train_config_limits_accepted():
    TrainConfig(layers=64, heads=16, epochs=10_000, max_len=4096, lr=10.0, max_minutes=7 * 24 * 60, seed=2**32 - 1,
                threads=1024, limit_sentences=10**9, vocab_size=10_000_000, batch_tokens=10_000_000).check(16)


def test_train_config_memory_guards():
    with pytest.raises(BadInput, match="--layers 64 at width 1000"):
        TrainConfig(layers=64).check_size(1000, 5002, 100)
    with pytest.raises(BadInput, match="--batch-tokens 10000000 is too large"):
        TrainConfig(batch_tokens=10_000_000).check_size(100, 5002, 100)
    TrainConfig().check_size(300, 5002, 180)  # the defaults at a wide width pass


@pytest.mark.parametrize(("args", "option"), [
    (["--max-len", "99999999999999"], "--max-len"),
    (["--lr", "inf"], "--lr"),
    (["--lr", "1e30"], "--lr"),
    (["--max-minutes", "inf"], "--max-minutes"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(HUGE)], "--seed"),
    (["--threads", str(HUGE)], "--threads"),
    (["--batch-tokens", "9000000"], "--batch-tokens"),
])
def test_train_attention_cli_bad_numbers_exit_2(brown_tiny, args, option):
    tiny_brown_model("tiny")
    result = runner.invoke(app, ["train-attention", "--model", "tiny", "--name", "x", *SMALL, *args])
    refused(result, option)
    assert not (paths.models_dir() / "x").exists()


def test_diverging_training_fails_and_keeps_the_previous_model(brown_tiny, monkeypatch):
    tiny_brown_model("tiny")
    assert runner.invoke(app, ["train-attention", "--model", "tiny", *SMALL]).exit_code == 0
    before_meta = store.read_meta(store.model_dir("tiny"))
    before = trained.load_trained("tiny").w
    real_build = torch_model.build_model

    def nan_model(*args, **kwargs):  # what a too-high learning rate does to the weights
        model = real_build(*args, **kwargs)
        model.head.bias.data.fill_(float("nan"))
        return model

    monkeypatch.setattr(train_attention, "build_model", nan_model)
    result = runner.invoke(app, ["train-attention", "--model", "tiny", *SMALL])
    assert result.exit_code == 1, result.output
    assert "diverged" in result.stderr and "lower --lr" in result.stderr and "internal error" not in result.output
    assert store.read_meta(store.model_dir("tiny")) == before_meta
    after = trained.load_trained("tiny").w
    assert all(np.array_equal(before[k], after[k]) for k in before)


# --- attn heads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "option"), [
    (["--window", str(HUGE)], "--window"),
    (["--window", "10001"], "--window"),
    (["--sentences", str(HUGE)], "--sentences"),
])
def test_heads_huge_numbers_exit_2(args, option):
    make_random_attention("rand", layers=1, heads=2)
    refused(runner.invoke(app, ["heads", "--model", "rand", *args]), option)


def test_score_heads_bounds_window():
    make_random_attention("rand", layers=1, heads=2)
    att = trained.load_trained("rand")
    with pytest.raises(BadInput, match="--window must be in"):
        heads.score_heads(att, att.heldout_sentences(), window=HUGE)
    assert heads.score_heads(att, att.heldout_sentences(), window=10_000)["window"] == 10_000
