"""The model store: round trips, gensim-identical unknown-word vectors, damage, interrupted writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.env import paths

from attncli.vectors import store
from attncli.cli.main import app
from attncli.errors import BadInput, UnknownWord
from attncli.vectors.model import load_vectors
from _tolerance import f32_close
from test_imports import ngram_mean

runner = CliRunner()

SENTENCES = [
    "the colourful cat sat on the mat".split(),
    "the dog sat on the log".split(),
    "a cat and a dog are friends".split(),
    "colours of the rainbow are red orange yellow green blue".split(),
    "the café serves coffee and naïve tea".split(),
] * 20
UNSEEN = ["colour", "zzyzx", "cafés", "naïveté", "日本", "dogs"]


@pytest.fixture(scope="module")
def ft_model():
    from gensim.models import FastText

    return FastText(SENTENCES, vector_size=12, window=3, min_count=1, epochs=3, bucket=997, min_n=2, max_n=5, workers=1, seed=3)


@pytest.fixture(scope="module")
def w2v_model():
    from gensim.models import Word2Vec

    return Word2Vec(SENTENCES, vector_size=12, window=3, min_count=1, epochs=3, workers=1, seed=3)


def save_ft(name, model, dtype="float32"):
    wv = model.wv
    return store.save_vectors(
        name, list(wv.index_to_key), wv.vectors, ngrams=wv.vectors_ngrams,
        subword={"min_n": wv.min_n, "max_n": wv.max_n, "bucket": wv.bucket},
        counts=[wv.get_vecattr(w, "count") for w in wv.index_to_key],
        meta={"algorithm": "fasttext"}, dtype=dtype,
    )


def save_w2v(name, model):
    wv = model.wv
    return store.save_vectors(name, list(wv.index_to_key), wv.vectors, meta={"algorithm": "word2vec"})


def test_round_trip_identical_vectors(ft_model):
    save_ft("ft", ft_model)
    vec = load_vectors("ft")
    wv = ft_model.wv
    assert vec.words == list(wv.index_to_key)
    assert vec.has_subwords and vec.subword == {"min_n": 2, "max_n": 5, "bucket": 997}
    assert np.array_equal(np.asarray(vec.vectors), wv.vectors)
    assert np.array_equal(np.asarray(vec.ngrams), wv.vectors_ngrams)
    for w in wv.index_to_key:
        assert np.array_equal(vec.vector(w), wv[w])
    counts = np.load(paths.models_dir() / "ft" / "counts.npy", allow_pickle=False)
    assert counts.tolist() == [wv.get_vecattr(w, "count") for w in wv.index_to_key]
    assert isinstance(vec.vectors, np.memmap)  # memory-mapped, not read whole


@pytest.mark.parametrize("word", UNSEEN)
def test_unknown_word_vectors_equal_gensims(ft_model, word):
    save_ft("ft", ft_model)
    vec = load_vectors("ft")
    assert word not in vec
    assert vec.can_embed(word)
    f32_close(vec.vector(word), ft_model.wv[word], **ngram_mean(ft_model.wv, word))  # float32 means of the n-gram rows


def test_float16_round_trip_is_the_float16_cast(ft_model):
    save_ft("ft16", ft_model, dtype="float16")
    vec = load_vectors("ft16")
    assert vec.vectors.dtype == np.float16 and vec.ngrams.dtype == np.float16
    assert np.array_equal(np.asarray(vec.vectors), ft_model.wv.vectors.astype(np.float16))
    # An unknown word: the float32 mean of its float16 n-gram rows (float16 keeps ~3 digits of gensim's)
    from gensim.models.fasttext import ft_ngram_hashes

    wv = ft_model.wv
    rows = wv.vectors_ngrams[ft_ngram_hashes("colour", wv.min_n, wv.max_n, wv.bucket)].astype(np.float16)  # (n-grams, d)
    f32_close(vec.vector("colour"), rows.astype(np.float64).mean(axis=0), **ngram_mean(wv, "colour"))
    half = float(np.finfo(np.float16).eps) / 2  # float16's relative rounding: each row within it of gensim's
    np.testing.assert_allclose(vec.vector("colour"), wv["colour"], rtol=0, atol=half * float(np.abs(rows).max()))


def test_word2vec_round_trip_and_unknown_word(w2v_model):
    save_w2v("w2v", w2v_model)
    vec = load_vectors("w2v")
    assert not vec.has_subwords
    assert np.array_equal(np.asarray(vec.vectors), w2v_model.wv.vectors)
    with pytest.raises(UnknownWord) as info:
        vec.vector("colour")
    assert "'colour'" in str(info.value) and "--algorithm fasttext" in str(info.value)
    result = runner.invoke(app, ["similar", "colour", "--model", "w2v"])
    assert result.exit_code == 2
    assert "unknown word 'colour'" in result.stderr and "Traceback" not in result.stderr


def test_builtin_name_is_reserved(w2v_model):
    with pytest.raises(BadInput, match="built-in"):
        save_w2v("default", w2v_model)


# -- damaged models: exit 1 with a message, never a traceback ----------------------------------


def _damage_truncate(d):
    data = (d / "vectors.npy").read_bytes()
    (d / "vectors.npy").write_bytes(data[: len(data) // 2])


def _damage_meta_garbage(d):
    (d / "meta.json").write_text("{not json", encoding="utf-8")


def _damage_meta_missing(d):
    (d / "meta.json").unlink()


def _damage_vocab_short(d):
    words = (d / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (d / "vocab.txt").write_text("\n".join(words[:-3]) + "\n", encoding="utf-8")


def _damage_ngrams_missing(d):
    (d / "ngrams.npy").unlink()


def _damage_pickle(d):
    np.save(d / "vectors.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)


DAMAGES = [_damage_truncate, _damage_meta_garbage, _damage_meta_missing, _damage_vocab_short, _damage_ngrams_missing, _damage_pickle]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__[8:])
@pytest.mark.parametrize("command", [["similar", "cat"], ["eval"]])
def test_damaged_model_is_a_clear_error(ft_model, damage, command):
    save_ft("ft", ft_model)
    damage((paths.models_dir() / "ft").resolve())
    result = runner.invoke(app, [*command, "--model", "ft"])
    assert result.exit_code == 1, result.output
    flat = result.stderr.replace("\n", "")  # rich wraps long lines, even inside a path
    assert result.stderr.startswith("error: ") and "models/ft" in flat
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.stdout == ""


def test_models_lists_a_damaged_model_without_failing(ft_model, w2v_model):
    save_ft("ft", ft_model)
    save_w2v("w2v", w2v_model)
    _damage_meta_garbage((paths.models_dir() / "ft").resolve())
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["ft"]["error"] and "meta.json" in rows["ft"]["error"]
    assert rows["w2v"]["error"] is None and rows["w2v"]["vocab_size"] == len(w2v_model.wv)


def test_unknown_model_is_bad_input(ft_model):
    save_ft("ft", ft_model)
    for command in (["similar", "cat"], ["eval"]):
        result = runner.invoke(app, [*command, "--model", "nope"])
        assert result.exit_code == 2
        assert "unknown model 'nope'" in result.stderr and "ft" in result.stderr


# -- interrupted writes leave the old model ---------------------------------------------------


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_interrupted_write_leaves_the_old_model(ft_model, w2v_model, exc):
    save_ft("m", ft_model)
    before = np.array(load_vectors("m").vectors)
    with pytest.raises(type(exc)):
        with store.writing_model("m") as tmp:
            (tmp / "vocab.txt").write_text("x\n", encoding="utf-8")
            store.write_npy(tmp / "vectors.npy", np.zeros((1, 3), dtype=np.float32))
            raise exc
    after = load_vectors("m")
    assert np.array_equal(np.asarray(after.vectors), before) and after.has_subwords
    versions = paths.models_dir() / ".versions"
    assert not [p for p in versions.iterdir() if p.name.endswith(".partial")]
    assert len(list(versions.iterdir())) == 1


def test_replacing_a_model_removes_the_old_version(ft_model, w2v_model):
    save_ft("m", ft_model)
    save_w2v("m", w2v_model)
    vec = load_vectors("m")
    assert not vec.has_subwords and len(vec) == len(w2v_model.wv)
    assert len(list((paths.models_dir() / ".versions").iterdir())) == 1
