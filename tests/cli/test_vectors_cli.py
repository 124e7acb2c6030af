"""``attn train / models / eval / similar`` through the CLI runner, with ATTN_HOME in a temp dir."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.env import paths
from attncli.cli.main import app
from attncli.vectors.model import load_vectors

runner = CliRunner()
QUICK = ["--max-sentences", "400", "--epochs", "2", "--dim", "16", "--min-count", "2", "--workers", "1"]
EVAL_KEYS = {"wordsim353", "simlex999", "analogies"}


@pytest.fixture(scope="session")
def brown_cache(tmp_path_factory):
    """The tokenized-Brown cache file, built once per session (reading Brown takes ~4 s)."""

    from conftest import _nltk_data, skip_without_brown  # a session fixture runs before conftest's per-test NLTK_DATA

    from attncli.vectors import corpus

    if _nltk_data():
        os.environ.setdefault("NLTK_DATA", _nltk_data())
    skip_without_brown()
    home = tmp_path_factory.mktemp("brown-cache-home")
    old = os.environ.get("ATTN_HOME")
    os.environ["ATTN_HOME"] = str(home)
    try:
        corpus.load_brown(None)
        return corpus._cache_path(None)
    finally:
        if old is None:
            del os.environ["ATTN_HOME"]
        else:
            os.environ["ATTN_HOME"] = old


@pytest.fixture
def brown(brown_cache):
    """This test's ATTN_HOME starts with the Brown cache in place, as after a first training."""
    import shutil

    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    shutil.copy(brown_cache, paths.cache_dir() / brown_cache.name)


def invoke(args, input=None):
    return runner.invoke(app, args, input=input)


def train_json(args):
    result = invoke(["train", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result


@pytest.fixture
def tiny_file(tmp_path):
    path = tmp_path / "notes.txt"
    lines = ["the cat sat on the mat", "the dog sat on the log", "a cat chased a dog", "the king and the queen"]
    path.write_text("\n".join(lines * 10) + "\n", encoding="utf-8")
    return path


def test_train_on_a_few_hundred_brown_sentences(brown):
    summary, result = train_json([*QUICK, "--name", "quick"])
    assert summary["model"] == "quick" and summary["algorithm"] == "fasttext" and summary["dim"] == 16
    assert summary["corpus"]["source"] == "brown" and summary["corpus"]["sentences"] == 400
    assert len(summary["epochs"]) == 2 and all(e["words_per_s"] > 0 for e in summary["epochs"])
    assert set(summary["evaluation"]) == EVAL_KEYS
    assert summary["vocab_size"] == len(load_vectors("quick"))
    assert "colour" in summary["neighbours"]  # fastText: a vector from n-grams
    # Progress and notes on stderr, clean JSON on stdout.
    assert "Training fasttext" in result.stderr and "epoch" in result.stderr

    listed = json.loads(invoke(["models", "--json"]).stdout)
    row = next(r for r in listed if r["name"] == "quick")
    assert row["builtin"] is False and row["vocab_size"] == summary["vocab_size"]
    assert row["evaluation"] == summary["evaluation"] and row["subwords"] is True
    assert row["corpus"].startswith("brown")

    ev = invoke(["eval", "--model", "quick", "--json"])
    assert ev.exit_code == 0, ev.stderr
    figures = json.loads(ev.stdout)
    assert set(figures) == {"model"} | EVAL_KEYS and figures["model"] == "quick"
    assert set(figures["wordsim353"]) == {"spearman", "pearson", "oov_ratio"}
    assert set(figures["analogies"]) == {"accuracy", "oov_ratio"}
    assert {k: figures[k] for k in EVAL_KEYS} == summary["evaluation"]  # same stored vectors

    table = invoke(["models"])
    assert table.exit_code == 0 and "quick" in table.stdout


def test_default_name_and_human_summary(brown):
    result = invoke(["train", *QUICK, "--categories", "news,humor", "--algorithm", "word2vec"])
    assert result.exit_code == 0, result.stderr
    assert "brown-word2vec" in result.stdout and "WordSim-353" in result.stdout
    assert "loss" in result.stderr  # word2vec: the epoch's loss in the progress bar
    vec = load_vectors("brown-word2vec")
    assert vec.meta["corpus"]["categories"] == ["humor", "news"]


def test_train_on_a_text_file(tiny_file):
    summary, _ = train_json(["--corpus", str(tiny_file), "--min-count", "1", "--epochs", "2", "--dim", "8", "--workers", "1"])
    assert summary["model"] == "notes-fasttext"
    assert summary["vocab_size"] == 12  # the cat sat on mat dog log a chased king and queen
    assert summary["corpus"]["source"] == str(tiny_file) and summary["corpus"]["sentences"] == 40
    sim = invoke(["similar", "cat", "dog", "-k", "3", "--model", "notes-fasttext", "--json"])
    assert sim.exit_code == 0, sim.stderr
    records = [json.loads(line) for line in sim.stdout.splitlines()]
    assert [r["query"] for r in records] == ["cat", "dog"]
    assert all(len(r["neighbours"]) == 3 for r in records)
    assert all(n["word"] != r["query"] for r in records for n in r["neighbours"])


def test_similar_agrees_with_a_brute_force_cosine(tiny_file):
    train_json(["--corpus", str(tiny_file), "--min-count", "1", "--epochs", "2", "--dim", "8", "--workers", "1", "--name", "t"])
    vec = load_vectors("t")
    m = np.asarray(vec.vectors, dtype=np.float64)  # (V, d)
    q = m[vec.index["cat"]]  # (d,)
    cos = m @ q / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))  # (V,)
    order = [vec.words[i] for i in np.argsort(-cos) if vec.words[i] != "cat"][:4]
    out = json.loads(invoke(["similar", "cat", "-k", "4", "--model", "t", "--json"]).stdout)
    assert [n["word"] for n in out["neighbours"]] == order
    np.testing.assert_allclose([n["similarity"] for n in out["neighbours"]], sorted(cos[[vec.index[w] for w in order]], reverse=True), atol=1e-4)  # fixed: the JSON rounds similarities to 4 decimals (cli/vectors.py)


def test_similar_reads_stdin_and_reports_unknown_words(tiny_file):
    train_json(["--corpus", str(tiny_file), "--min-count", "1", "--epochs", "1", "--dim", "8", "--workers", "1",
                "--algorithm", "word2vec", "--name", "w"])
    result = invoke(["similar", "-", "--model", "w", "--json", "-k", "2"], input="cat\n\nxyzzy\nqueen\n")
    assert result.exit_code == 2
    assert [json.loads(line)["query"] for line in result.stdout.splitlines()] == ["cat", "queen"]
    assert "unknown word 'xyzzy'" in result.stderr and "--algorithm fasttext" in result.stderr
    human = invoke(["similar", "cat", "--model", "w", "-k", "2"])
    assert human.exit_code == 0 and human.stdout.startswith("cat")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--dim", "0"], 2, "--dim must be at least 1"),
        (["--epochs", "-3"], 2, "--epochs must be at least 1"),
        (["--algorithm", "glove"], 2, "unknown --algorithm"),
        (["--categories", "news,poetry"], 2, "unknown Brown category 'poetry'"),
        (["--categories", ","], 2, "--categories is empty"),
        (["--min-count", "100000"], 2, "leaves no vocabulary"),
        (["--corpus", "/nonexistent/file.txt"], 2, "does not exist"),
        (["--name", "default"], 2, "built-in"),
        (["--name", "../evil"], 2, "invalid model name"),
        (["--max-sentences", "0"], 2, "--max-sentences"),
    ],
)
def test_bad_training_input_keeps_earlier_models(brown, tiny_file, args, code, message):
    train_json(["--corpus", str(tiny_file), "--min-count", "1", "--epochs", "1", "--dim", "8", "--workers", "1", "--name", "keep"])
    before = np.array(load_vectors("keep").vectors)
    result = invoke(["train", *QUICK[:2], *args, "--name", "keep"] if "--name" not in args else ["train", *QUICK[:2], *args])
    assert result.exit_code == code, result.output
    assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert np.array_equal(np.asarray(load_vectors("keep").vectors), before)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "is empty"), (b"\x00\x01\x02", "binary"), (b"ok\n\xff\xfe bad\n", "not UTF-8 text (byte 0xff at byte offset 3)")],
)
def test_bad_corpus_files_exit_2(tmp_path, content, message):
    path = tmp_path / "c.txt"
    path.write_bytes(content)
    result = invoke(["train", "--corpus", str(path)])
    assert result.exit_code == 2 and message in " ".join(result.stderr.split()) and result.stdout == ""
    assert not paths.models_dir().exists() or not [p for p in paths.models_dir().iterdir() if not p.name.startswith(".")]


def test_similar_and_eval_option_errors(tiny_file):
    train_json(["--corpus", str(tiny_file), "--min-count", "1", "--epochs", "1", "--dim", "8", "--workers", "1", "--name", "t"])
    assert invoke(["similar", "cat", "-k", "0", "--model", "t"]).exit_code == 2
    nothing = invoke(["similar", "--model", "t", "--", "--"])  # "--" has no letter or digit
    assert nothing.exit_code == 2 and "no word in it" in nothing.stderr


def test_shipped_default_model_clears_the_floors():
    """The built-in model, as `attn eval` measures it: the issue's floors, no margin."""
    from attncli.vectors import store

    assert (store.builtin_dir() / "meta.json").is_file(), "data/default is not shipped"
    result = invoke(["eval", "--json"])
    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["model"] == "default"
    assert figures["wordsim353"]["spearman"] >= 0.42
    assert figures["simlex999"]["spearman"] >= 0.14
    assert figures == {"model": "default", **load_vectors("default").meta["evaluation"]}
    size = sum(p.stat().st_size for p in store.builtin_dir().iterdir())
    assert size <= 15 * 1024 * 1024


@pytest.mark.slow
def test_full_brown_defaults_clear_the_floors(brown):
    """`attn train` with the defaults on all of Brown, then a vector for the unseen 'colour'.

    With 2 worker threads gensim is not repeatable: across rebuilds WordSim-353 moved by up to
    0.05 (docs/default-model.md), so a retrained model is held to the floors minus that noise;
    the shipped model meets them exactly (test above).
    """
    summary, _ = train_json([])
    assert summary["model"] == "brown-fasttext"
    assert summary["corpus"]["sentences"] == 57_159
    # the tokenizer still gives Brown the token stream the built-in model was trained on
    assert summary["corpus"]["sha256"] == load_vectors("default").meta["corpus"]["sha256"]
    assert summary["evaluation"]["wordsim353"]["spearman"] >= 0.42 - 0.05
    assert summary["evaluation"]["simlex999"]["spearman"] >= 0.14 - 0.02
    assert "colour" in summary["neighbours"]
    vec = load_vectors("brown-fasttext")
    assert vec.can_embed("colour") and "colour" not in vec
