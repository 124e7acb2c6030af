"""``attn import``: each format, written by the tests (gensim writes word2vec text/binary and the
fastText .bin; GloVe by hand), read back equal to gensim's own loaders, and every kind of bad
input refused with a one-line message, exit 2, and no model written."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.env import paths
from attncli.cli.main import app
from attncli.vectors import imports, word2vec_format
from attncli.vectors.model import load_vectors
from _tolerance import f32_close

runner = CliRunner()
WORDS = ["the", "colour", "color", "café", "naïve", "speed", "velocity", "price", "cost", "brand",
         "maker", "wealth", "money", "über", "日本", "x"]
DIM = 6


def run(*args):
    return runner.invoke(app, ["import", *map(str, args)])


def vectors_fixture() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((len(WORDS), DIM)).astype(np.float32)  # (V, d)


def ngram_mean(wv, word: str) -> dict:
    """f32_close's size for an unknown word's vector, a float32 mean of its n-grams' rows (ours and
    gensim's sum them in their own order): the row count and the rows' largest magnitude."""
    from gensim.models.fasttext import ft_ngram_hashes

    rows = wv.vectors_ngrams[ft_ngram_hashes(word, wv.min_n, wv.max_n, wv.bucket)]  # (n-grams, d)
    return dict(length=max(1, len(rows)), scale=float(np.abs(rows).max(initial=0.0)))


def keyed():
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=DIM)
    kv.add_vectors(WORDS, vectors_fixture())
    return kv


@pytest.fixture
def w2v_text(tmp_path):
    path = tmp_path / "vectors.txt"
    keyed().save_word2vec_format(str(path), binary=False)
    return path


@pytest.fixture
def w2v_bin(tmp_path):
    path = tmp_path / "vectors.bin"
    keyed().save_word2vec_format(str(path), binary=True)
    return path


def write_glove(path, words=WORDS, vectors=None):
    vectors = vectors_fixture() if vectors is None else vectors
    with open(path, "w", encoding="utf-8") as fh:
        for w, v in zip(words, vectors):
            fh.write(w + " " + " ".join(repr(float(x)) for x in v) + "\n")
    return path


@pytest.fixture
def glove(tmp_path):
    return write_glove(tmp_path / "glove.6d.txt")


@pytest.fixture(scope="module")
def fasttext_bin(tmp_path_factory):
    """A tiny fastText model trained by gensim and saved in Facebook's .bin format."""
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [["the", "colour", "of", "the", "car", "is", "black"], ["the", "speed", "of", "the", "car"],
                 ["a", "café", "sells", "coffee", "and", "cake"], ["the", "price", "of", "the", "coffee"]] * 20
    model = FastText(vector_size=8, window=3, min_count=1, epochs=3, min_n=3, max_n=5, bucket=500, seed=1, workers=1)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=len(sentences), epochs=3)
    path = tmp_path_factory.mktemp("ft") / "model.bin"
    save_facebook_model(model, str(path))
    return path


def no_model_written(name="v"):
    models = paths.models_dir()
    assert not (models / name).exists()
    versions = models / ".versions"
    assert not versions.exists() or not [p for p in versions.iterdir() if p.name.startswith(name + "-")]


# ---------------------------------------------------------------- each format, equal to gensim


def test_word2vec_text_equals_gensims_loader(w2v_text):
    from gensim.models import KeyedVectors

    result = run(w2v_text, "--name", "v", "--format", "word2vec", "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["vocab_size"] == len(WORDS) and summary["dim"] == DIM and summary["subword"] is None
    v = load_vectors("v")
    kv = KeyedVectors.load_word2vec_format(str(w2v_text), binary=False)
    assert v.words == list(kv.index_to_key) == WORDS
    np.testing.assert_array_equal(np.asarray(v.vectors), kv.vectors)
    assert v.meta["algorithm"] == "word2vec" and v.meta["corpus"]["format"] == "word2vec"


def test_word2vec_binary_equals_gensims_loader(w2v_bin):
    from gensim.models import KeyedVectors

    result = run(w2v_bin, "--name", "v", "--format", "word2vec-binary")
    assert result.exit_code == 0, result.stderr
    assert "16 words x 6 dims" in result.stdout
    v = load_vectors("v")
    kv = KeyedVectors.load_word2vec_format(str(w2v_bin), binary=True)
    assert v.words == list(kv.index_to_key)
    np.testing.assert_array_equal(np.asarray(v.vectors), kv.vectors)


def test_glove_equals_gensims_loader_without_header(glove):
    from gensim.models import KeyedVectors

    result = run(glove, "--name", "v", "--format", "glove")
    assert result.exit_code == 0, result.stderr
    v = load_vectors("v")
    kv = KeyedVectors.load_word2vec_format(str(glove), binary=False, no_header=True)
    assert v.words == list(kv.index_to_key) == WORDS
    np.testing.assert_array_equal(np.asarray(v.vectors), kv.vectors)
    assert v.meta["algorithm"] == "glove"


def test_small_chunks_read_the_same(glove, w2v_bin, monkeypatch):
    """Chunk boundaries fall inside lines, words and vectors: the same result."""
    whole_t = imports.import_file(glove, "glove")
    whole_b = imports.import_file(w2v_bin, "word2vec-binary")
    monkeypatch.setattr(word2vec_format, "CHUNK", 7)
    for path, fmt, whole in ((glove, "glove", whole_t), (w2v_bin, "word2vec-binary", whole_b)):
        seen = []
        part = imports.import_file(path, fmt, progress=lambda done, total: seen.append((done, total)))
        assert part.words == whole.words
        np.testing.assert_array_equal(part.vectors, whole.vectors)
        assert len(seen) > 5 and seen[-1][0] == seen[-1][1] == path.stat().st_size


def test_limit_keeps_the_first_words(w2v_text, w2v_bin, glove):
    for path, fmt in ((w2v_text, "word2vec"), (w2v_bin, "word2vec-binary"), (glove, "glove")):
        result = run(path, "--name", "v", "--format", fmt, "--limit", 5, "--json")
        assert result.exit_code == 0, result.stderr
        v = load_vectors("v")
        assert v.words == WORDS[:5]
        np.testing.assert_array_equal(np.asarray(v.vectors), vectors_fixture()[:5])


def test_float16_precision(glove):
    assert run(glove, "--name", "v", "--format", "glove", "--precision", "float16").exit_code == 0
    v = load_vectors("v")
    assert v.vectors.dtype == np.float16
    np.testing.assert_array_equal(v.vectors, vectors_fixture().astype(np.float16))  # the exact float32 text, rounded once


def test_fasttext_bin_keeps_subwords_for_unknown_words(fasttext_bin):
    from gensim.models.fasttext import load_facebook_vectors

    result = run(fasttext_bin, "--name", "ft", "--format", "fasttext-bin", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["subword"] == {"min_n": 3, "max_n": 5, "bucket": 500}
    v = load_vectors("ft")
    wv = load_facebook_vectors(str(fasttext_bin))
    assert v.words == list(wv.index_to_key)
    np.testing.assert_array_equal(np.asarray(v.vectors), wv.vectors)  # gensim's own vectors, stored as they are
    assert v.meta["algorithm"] == "fasttext"
    for unseen in ("colours", "caféteria", "speedy"):
        assert unseen not in v
        f32_close(v.vector(unseen), wv[unseen], **ngram_mean(wv, unseen), what=unseen)
    # every command takes the imported model, unknown words included
    lookup = runner.invoke(app, ["lookup", "colours", "--model", "ft", "--json", "--dict", "-"],
                           input='{"colour": 1, "speed": 2, "price": 3}')
    assert lookup.exit_code == 0, lookup.stderr
    assert json.loads(lookup.stdout)["model"] == "ft"
    similar = runner.invoke(app, ["similar", "colours", "--model", "ft", "--json"])
    assert similar.exit_code == 0, similar.stderr
    models = runner.invoke(app, ["models", "--json"])
    row = next(r for r in json.loads(models.stdout) if r["name"] == "ft")
    assert row["algorithm"] == "fasttext" and row["subwords"] is True and row["error"] is None


def test_imported_model_in_matrix_and_eval(glove):
    assert run(glove, "--name", "v", "--format", "glove").exit_code == 0
    matrix = runner.invoke(app, ["matrix", "the colour money", "--model", "v", "--json"])
    assert matrix.exit_code == 0, matrix.stderr
    ev = runner.invoke(app, ["eval", "--model", "v", "--json"])
    assert ev.exit_code == 0, ev.stderr
    assert json.loads(ev.stdout)["model"] == "v"


def test_a_failed_import_leaves_the_old_model(glove, tmp_path):
    assert run(glove, "--name", "v", "--format", "glove").exit_code == 0
    before = np.array(load_vectors("v").vectors)
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2 3 4 5 6\nb 1 2\n", encoding="utf-8")
    result = run(bad, "--name", "v", "--format", "glove")
    assert result.exit_code == 2
    np.testing.assert_array_equal(np.asarray(load_vectors("v").vectors), before)
    assert not [p for p in (paths.models_dir() / ".versions").iterdir() if p.name.endswith(".partial")]


# ---------------------------------------------------------------- bad input


def _bytes_bad_inputs(tmp_path, w2v_text, w2v_bin, glove, fasttext_bin):
    """(file, --format, a phrase the message must hold) for each kind of bad input."""
    text = w2v_text.read_bytes()
    binary = w2v_bin.read_bytes()
    cases = []

    def file(name, data):
        path = tmp_path / name
        path.write_bytes(data)
        return path

    lines = text.split(b"\n")
    cases.append((glove, "word2vec", "no word2vec header"))
    cases.append((w2v_text, "glove", "use --format word2vec"))
    cases.append((w2v_text, "word2vec-binary", "is text, not binary"))
    cases.append((w2v_bin, "word2vec", "binary data"))
    cases.append((w2v_bin, "glove", "binary data"))
    cases.append((glove, "fasttext-bin", "not a fastText .bin model: it is text"))
    cases.append((w2v_bin, "fasttext-bin", "not a fastText .bin model"))
    cases.append((fasttext_bin, "word2vec", "use --format fasttext-bin"))
    cases.append((file("trunc.bin", binary[: len(binary) - 10]), "word2vec-binary", "truncated"))
    cases.append((file("trunc2.bin", binary[:60]), "word2vec-binary", "truncated"))
    cases.append((file("ft-trunc.bin", fasttext_bin.read_bytes()[:-100]), "fasttext-bin", "truncated"))
    cases.append((file("ft-trunc2.bin", fasttext_bin.read_bytes()[:200]), "fasttext-bin", "truncated"))
    cases.append((file("mixed.txt", b"a 1 2 3\nb 4 5 6\nc 7 8\n"), "glove", "line 3: 2 numbers"))
    cases.append((file("mixed2.txt", b"3 3\na 1 2 3\nb 4 5 6 7\nc 7 8 9\n"), "word2vec", "line 3: 4 numbers"))
    cases.append((file("latin1.txt", "a 1 2\ncaf\xe9 3 4\n".encode("latin-1")), "glove", "not UTF-8"))
    latin_bin = binary.replace("café".encode("utf-8"), "caf\xe9".encode("latin-1") + b"?")
    cases.append((file("latin1.bin", latin_bin.replace(b"caf\xe9?", b"caf\xe9\xff")), "word2vec-binary", "not UTF-8"))
    cases.append((file("more.txt", b"5 " + lines[0].split(b" ")[1] + b"\n" + b"\n".join(lines[1:])), "word2vec", "announces 5 words but the file holds 16"))
    cases.append((file("fewer.txt", b"20 " + lines[0].split(b" ")[1] + b"\n" + b"\n".join(lines[1:])), "word2vec", "announces 20 words but the file ends after 16"))
    header, _, body = binary.partition(b"\n")
    cases.append((file("more.bin", b"15 6\n" + body), "word2vec-binary", "goes on after the 15 vectors"))
    cases.append((file("fewer.bin", b"17 6\n" + body), "word2vec-binary", "truncated"))
    cases.append((file("dup.txt", b"a 1 2\nb 3 4\na 5 6\n"), "glove", "'a' occurs twice (line 1 and line 3)"))
    cases.append((file("dup.bin", b"2 1\na " + np.float32(1).tobytes() + b"\na " + np.float32(2).tobytes()), "word2vec-binary", "occurs twice"))
    cases.append((file("nan.txt", b"a 1 2\nb nan 4\n"), "glove", "line 2: a value is NaN"))
    cases.append((file("cr.txt", b"a 1 2\nb\rc 3 4\n"), "glove", "holds a line break"))
    cases.append((file("cr.bin", b"1 1\na\rb " + np.float32(1).tobytes()), "word2vec-binary", "holds a line break"))
    cases.append((file("word.txt", b"a 1 2\nb 3 abc\n"), "glove", "line 2: 'abc' is not a number"))
    cases.append((file("empty.txt", b""), "glove", "is empty"))
    cases.append((file("blank.txt", b"\n\n"), "glove", "holds no vectors"))
    cases.append((file("vectors.model", pickle.dumps({"not": "run"})), "word2vec-binary", "is a Python pickle"))
    cases.append((file("vectors.bin.pkl", b"whatever"), "word2vec-binary", "pickle"))
    cases.append((file("pickle.bin", pickle.dumps([1, 2, 3], protocol=4)), "word2vec-binary", "attn never loads pickles"))
    import gzip

    cases.append((file("glove.txt.gz", gzip.compress(glove.read_bytes())), "glove", "decompress it first"))
    cases.append((file("zero.txt", b"0 5\n"), "word2vec", "nothing to import"))
    cases.append((file("huge.txt", b"3 100000\n"), "word2vec", "100000 dimensions"))
    cases.append((tmp_path / "missing.txt", "glove", "does not exist"))
    cases.append((tmp_path, "glove", "is a directory"))
    return cases


def test_bad_inputs_are_one_line_exit_2_and_write_nothing(tmp_path, w2v_text, w2v_bin, glove, fasttext_bin):
    failures = []
    for path, fmt, phrase in _bytes_bad_inputs(tmp_path, w2v_text, w2v_bin, glove, fasttext_bin):
        result = run(path, "--name", "v", "--format", fmt)
        message = " ".join(result.stderr.split())
        if result.exit_code != 2 or phrase not in message or "Traceback" in result.output or "internal error" in message:
            failures.append((path.name, fmt, result.exit_code, message[:300]))
        if (paths.models_dir() / "v").exists():
            failures.append((path.name, fmt, "a model was written"))
            runner.invoke(app, ["models"])
            import shutil

            shutil.rmtree(paths.models_dir())
    assert not failures, failures


def test_gensim_model_file_is_refused_unread(tmp_path, monkeypatch):
    """A real gensim .model (a pickle): refused before anything unpickles it."""
    model = keyed()
    path = tmp_path / "mine.model"
    model.save(str(path))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    result = run(path, "--name", "v", "--format", "word2vec-binary")
    assert result.exit_code == 2 and "pickle" in result.stderr
    renamed = tmp_path / "mine.bin"
    path.rename(renamed)
    result = run(renamed, "--name", "v", "--format", "word2vec-binary")
    assert result.exit_code == 2 and "pickle" in result.stderr
    no_model_written()


@pytest.mark.parametrize("args, phrase", [
    (["--format", "csv"], "unknown --format 'csv'"),
    (["--format", "glove", "--limit", "0"], "--limit must be at least 1"),
    (["--format", "glove", "--precision", "float64"], "unknown --precision"),
    (["--format", "glove", "--name", "default"], "built-in model's name"),
    (["--format", "glove", "--name", "bad/name"], "invalid model name"),
])
def test_bad_options(glove, args, phrase):
    argv = [glove, *args] + ([] if "--name" in args else ["--name", "v"])
    result = run(*argv)
    assert result.exit_code == 2 and phrase in " ".join(result.stderr.split())


@pytest.mark.parametrize("file", ["lee_fasttext.bin", "lee_fasttext_new.bin", "non_ascii_fasttext.bin"])
def test_gensims_own_fasttext_files_old_and_new_format(file):
    """gensim's test data: fastText files written by Facebook's tool, before (no magic number) and
    after version 11 of its format, one with non-ASCII words."""
    from gensim.models.fasttext import load_facebook_vectors
    from gensim.test.utils import datapath

    result = run(datapath(file), "--name", "ft", "--format", "fasttext-bin")
    assert result.exit_code == 0, result.stderr
    v = load_vectors("ft")
    wv = load_facebook_vectors(datapath(file))
    assert v.words == list(wv.index_to_key)
    np.testing.assert_array_equal(np.asarray(v.vectors), wv.vectors)  # gensim's own vectors, stored as they are
    for unseen in ("colourful", "ünseenwörd"):
        f32_close(v.vector(unseen), wv[unseen], **ngram_mean(wv, unseen), what=unseen)
