"""Hostile damage to stored models, attention configs and the corpus cache: a clear message, never a crash.

The contract: a model directory that is corrupt or truncated is a ``store.CorruptModel`` (exit 1)
whose message names the model, says it is damaged and to retrain it; never "internal error:"
or a traceback. ``attn models`` lists a damaged model as damaged and the others as usual.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from _attention_fixtures import make_random_attention
from _lookup_fixtures import WORDS, save_fasttext_like, save_plain
from attncli.vectors import corpus, store
from attncli.env import paths
from attncli.tinylm import checkpoint, model as trained
from attncli.cli.main import app
from attncli.errors import BadInput, RuntimeFailure
from attncli.vectors.tokenize import TOKENIZER_VERSION
from attncli.vectors.model import all_finite, load_vectors

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


def assert_damaged(result, model: str = "tiny") -> None:
    assert result.exit_code == 1, result.output
    err = flat(result.stderr)
    assert err.startswith("error: ") and "damaged" in err and "retrain" in err and f"'{model}'" in err
    assert "internal error" not in result.stderr and "Traceback" not in result.output


def model_path(name: str = "tiny"):
    return (paths.models_dir() / name).resolve()


# -- 1. damaged arrays -------------------------------------------------------------------------


def _vectors_empty(d):
    (d / "vectors.npy").write_bytes(b"")


def _ngrams_empty(d):
    (d / "ngrams.npy").write_bytes(b"")


def _vectors_header_garbled(d):
    data = (d / "vectors.npy").read_bytes()
    (d / "vectors.npy").write_bytes(data.replace(b"'descr': '", b"'descr': (", 1))


def _vectors_string_dtype(d):
    np.save(d / "vectors.npy", np.full(np.load(d / "vectors.npy").shape, "ab"))


def _vectors_int_dtype(d):
    np.save(d / "vectors.npy", np.ones(np.load(d / "vectors.npy").shape, dtype=np.int64))


def _vectors_nan(d):
    a = np.load(d / "vectors.npy")
    a[3, 2] = np.nan
    np.save(d / "vectors.npy", a)


def _vectors_inf(d):
    a = np.load(d / "vectors.npy")
    a[-1, -1] = -np.inf
    np.save(d / "vectors.npy", a)


def _ngrams_nan(d):
    a = np.load(d / "ngrams.npy")
    a[7, 0] = np.nan
    np.save(d / "ngrams.npy", a)


def _vectors_npz(d):
    with open(d / "vectors.npy", "wb") as fh:
        np.savez(fh, a=np.zeros(3))


ARRAY_DAMAGES = [_vectors_empty, _ngrams_empty, _vectors_header_garbled, _vectors_string_dtype, _vectors_int_dtype,
                 _vectors_nan, _vectors_inf, _ngrams_nan, _vectors_npz]
COMMANDS = [
    ["similar", "speed"], ["similar", "speed", "--json"], ["lookup", "colour", "--json"],
    ["matrix", "the top speed", "--json"], ["matrix", "the top speed"], ["eval"],
]


@pytest.mark.parametrize("damage", ARRAY_DAMAGES, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_damaged_arrays_are_a_clear_error(damage, command):
    save_fasttext_like("tiny")
    damage(model_path())
    result = run(*command, "--model", "tiny")
    assert_damaged(result)
    assert result.stdout == ""


@pytest.mark.parametrize("damage", ARRAY_DAMAGES, ids=lambda f: f.__name__[1:])
def test_damaged_arrays_raise_corrupt_model(damage):
    save_fasttext_like("tiny")
    damage(model_path())
    with pytest.raises(store.CorruptModel, match="damaged"):
        load_vectors("tiny")


def test_finite_check_exact_and_memory_mapped():
    a = np.zeros((50, 3), dtype=np.float16)
    assert all_finite(a) and all_finite(np.full((4, 4), -65504, dtype=np.float16))
    for dtype in ("<f2", ">f2", "<f4", ">f4"):
        for bad in (np.nan, np.inf, -np.inf):
            b = np.zeros((50, 3), dtype=dtype)
            b[49, 2] = bad
            assert not all_finite(b) and not all_finite(b, chunk=7)
    save_fasttext_like("tiny")
    vec = load_vectors("tiny")
    assert isinstance(vec.vectors, np.memmap) and isinstance(vec.ngrams, np.memmap)  # still not read whole


# -- 2. wrong-typed meta.json fields -----------------------------------------------------------


BAD_META = [
    {"subword": "yes"},
    {"subword": {"bucket": 5}},
    {"subword": {"min_n": 6, "max_n": 3, "bucket": 2000}},
    {"subword": {"min_n": 3, "max_n": 6, "bucket": "2000"}},
    {"format_version": "x"},
    {"format_version": True},
    {"dim": "16"},
    {"dim": 0},
    {"vocab_size": -1},
    {"vocab_size": 21.0},
    {"dtype": 16},
]


@pytest.mark.parametrize("change", BAD_META, ids=json.dumps)
def test_wrong_typed_meta_fields_are_damage(change):
    save_fasttext_like("tiny")
    meta_file = model_path() / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    meta_file.write_text(json.dumps(dict(meta, **change)), encoding="utf-8")
    with pytest.raises(store.CorruptModel, match="meta.json"):
        load_vectors("tiny")
    for command in (["similar", "speed"], ["lookup", "colour"]):
        assert_damaged(run(*command, "--model", "tiny"))


def test_newer_format_version_still_asks_for_an_upgrade():
    save_fasttext_like("tiny")
    meta_file = model_path() / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    newer = dict(meta, format_version=store.FORMAT_VERSION + 1, subword=["a", "new", "layout"])
    meta_file.write_text(json.dumps(newer), encoding="utf-8")
    with pytest.raises(RuntimeFailure, match="newer attn"):
        load_vectors("tiny")


# -- 3. attn models with one model's meta.json damaged -----------------------------------------


BAD_LISTING = [
    {"format_version": "x"},
    {"vocab_size": "970"},
    {"evaluation": "oops"},
    {"evaluation": {"wordsim353": {"spearman": "high"}}},
    {"created": 5},
    {"attention": "x"},
    {"attention": {"layers": 2}},
    {"corpus": {"source": 5}, "corpus_label": None},
    {"subword": "yes"},
]


@pytest.mark.parametrize("change", BAD_LISTING, ids=json.dumps)
def test_models_lists_a_model_with_a_bad_field_as_damaged(change):
    save_fasttext_like("tiny")
    save_plain("plain")
    meta_file = model_path() / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    meta_file.write_text(json.dumps(dict(meta, **change)), encoding="utf-8")
    result = run("models", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["tiny"]["error"] and "damaged" in rows["tiny"]["error"] and "retrain" in rows["tiny"]["error"]
    assert rows["plain"]["error"] is None and rows["plain"]["vocab_size"] == len(WORDS)
    table = run("models")
    assert table.exit_code == 0, table.output
    assert "damaged" in table.stdout and "plain" in table.stdout and "internal error" not in table.stderr


def test_models_with_nan_in_the_attention_summary_keeps_json_valid():
    save_fasttext_like("tiny")
    meta_file = model_path() / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    summary = {"layers": 2, "heads": 4, "perplexity": 1.5, "bigram_perplexity": 2.0, "unigram_perplexity": 3.0}
    meta_file.write_text(json.dumps(dict(meta, attention=dict(summary, steps=float("nan")))), encoding="utf-8")
    result = run("models", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert "NaN" in rows["tiny"]["error"]
    meta_file.write_text(json.dumps(dict(meta, attention=summary)), encoding="utf-8")
    rows = {r["name"]: r for r in json.loads(run("models", "--json").stdout)}
    assert rows["tiny"]["error"] is None and rows["tiny"]["attention"] == summary


# -- 4. trained attention config.json ----------------------------------------------------------


BAD_CONFIG = [
    {"heads": 0},
    {"heads": 3},
    {"layer_norm_eps": "x"},
    {"layer_norm_eps": -1},
    {"layer_norm_eps": None},
    {"format_version": "x"},
    {"layers": 0},
    {"d_ff": 2.5},
    {"d_model": "16"},
    {"positions": "rotary"},  # the pass adds sinusoidal positions only: a model saying otherwise is not one attn made
    {"positions": 5},
]


@pytest.mark.parametrize("change", BAD_CONFIG, ids=json.dumps)
def test_bad_attention_config_is_damage(change):
    make_random_attention("rand", layers=1, heads=2)
    config_file = store.model_dir("rand").resolve() / checkpoint.SUBDIR / checkpoint.CONFIG
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config_file.write_text(json.dumps(dict(config, **change)), encoding="utf-8")
    with pytest.raises(store.CorruptModel, match="config.json"):
        trained.load_trained("rand")
    for command in (["heads", "--model", "rand"], ["matrix", "the cat sat", "--proj", "trained", "--model", "rand", "--json"]):
        assert_damaged(run(*command), model="rand")


def test_attention_wider_than_the_vectors_is_damage():
    make_random_attention("rand", layers=1, heads=2)  # d = 16
    d = model_path("rand")
    words = (d / "vocab.txt").read_text(encoding="utf-8").split()
    meta = store.read_meta(d)
    np.save(d / "vectors.npy", np.ones((len(words), 8), dtype=np.float32))
    (d / "meta.json").write_text(json.dumps(dict(meta, dim=8)), encoding="utf-8")
    with pytest.raises(store.CorruptModel, match="damaged"):  # the vectors are read with the attention
        trained.load_trained("rand").vectors


# -- 5. the tokenized-corpus cache ---------------------------------------------------------------


@pytest.fixture
def brown():
    from conftest import skip_without_brown

    skip_without_brown()


@pytest.mark.usefixtures("brown")
@pytest.mark.parametrize("damage", ["empty_line", "double_space", "leading_space", "tab", "cr", "just_newline"])
def test_a_cache_not_as_written_is_ignored_and_rebuilt(damage):
    cache = paths.cache_dir() / f"brown-humor-tok{TOKENIZER_VERSION}.txt"
    good = corpus.load_corpus(categories=["humor"])  # writes the cache
    original = cache.read_text(encoding="utf-8")
    lines = original.split("\n")
    if damage == "empty_line":
        text = "\n".join(lines[:5] + [""] + lines[5:])
    elif damage == "double_space":
        text = original.replace(" ", "  ", 1)
    elif damage == "leading_space":
        text = " " + original
    elif damage == "tab":
        text = original.replace(" ", "\t", 1)
    elif damage == "cr":
        text = original.replace("\n", "\r\n", 1)
    else:
        text = "\n"
    cache.write_bytes(text.encode("utf-8"))
    again = corpus.load_corpus(categories=["humor"])
    assert again.sentences == good.sentences and again.sha256 == good.sha256
    assert all(t and not any(c.isspace() for c in t) for s in again.sentences for t in s)
    assert cache.read_text(encoding="utf-8") == original  # rewritten


@pytest.mark.usefixtures("brown")
def test_training_on_a_damaged_cache_succeeds():
    cache = paths.cache_dir() / f"brown-humor-tok{TOKENIZER_VERSION}.txt"
    corpus.load_corpus(categories=["humor"])
    cache.write_text("\n" + cache.read_text(encoding="utf-8").replace(" ", "  ", 3), encoding="utf-8")
    result = run("train", "--categories", "humor", "--max-sentences", "300", "--epochs", "1", "--workers", "1",
                 "--min-count", "1", "--dim", "8", "--name", "h", "--json")
    assert result.exit_code == 0, result.output
    assert "" not in load_vectors("h").words


# -- 6. model names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nl\n", "a\n", "ok\r", "x y", "\nx", ""])
def test_names_with_line_breaks_are_refused(name):
    with pytest.raises(BadInput, match="invalid model name"):
        store.check_name(name)


def test_train_refuses_a_name_ending_in_a_newline(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20, encoding="utf-8")
    result = run("train", "--corpus", str(text), "--min-count", "1", "--epochs", "1", "--dim", "8", "--workers", "1",
                 "--name", "nl\n")
    assert result.exit_code == 2, result.output
    assert "invalid model name" in result.stderr
    assert store.user_model_names() == []
