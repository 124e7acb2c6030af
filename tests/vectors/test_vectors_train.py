"""The training core: option checks, per-epoch reports, storing, and failures that store nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from attncli.env import paths

from attncli.vectors import store, train
from attncli.vectors.corpus import Corpus, read_text_corpus
from attncli.errors import BadInput
from attncli.vectors.train import TrainParams, train_model
from attncli.vectors.model import load_vectors

TEXT = "\n".join(
    [
        "the king rules the kingdom with the queen",
        "the queen and the king live in the castle",
        "a man and a woman walk to the city",
        "the city has a market and a river",
        "money buys bread in the market",
        "the good man walked to the river",
    ]
    * 15
)


@pytest.fixture
def tiny(tmp_path) -> Corpus:
    path = tmp_path / "tiny.txt"
    path.write_text(TEXT, encoding="utf-8")
    return read_text_corpus(path)


def quick(**kw) -> TrainParams:
    base = dict(dim=8, epochs=3, min_count=1, window=3, workers=1, bucket=500, precision="float32")
    base.update(kw)
    return TrainParams(**base)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dim", 0, "--dim must be at least 1"),
        ("epochs", -1, "--epochs must be at least 1"),
        ("epochs", 0, "--epochs must be at least 1"),
        ("window", 0, "--window"),
        ("min_count", 0, "--min-count"),
        ("negative", 0, "--negative"),
        ("workers", 0, "--workers"),
        ("bucket", 0, "--bucket"),
        ("sample", -0.1, "--sample"),
        ("sample", 1.0, "--sample"),
        ("min_n", 7, "--min-n (7) must not exceed --max-n (6)"),
        ("algorithm", "glove", "unknown --algorithm 'glove'"),
        ("precision", "float64", "unknown --precision"),
        ("seed", -1, "--seed"),
    ],
)
def test_bad_params_name_the_option(field, value, message):
    params = TrainParams(**{field: value})
    with pytest.raises(BadInput) as info:
        params.validate()
    assert message in str(info.value)


def test_word2vec_ignores_fasttext_only_options():
    TrainParams(algorithm="word2vec", bucket=0, min_n=9, max_n=1).validate()


def test_gensim_kwargs_follow_the_algorithm():
    ft = TrainParams().gensim_kwargs()
    assert ft["bucket"] == TrainParams().bucket and "compute_loss" not in ft
    w2v = TrainParams(algorithm="word2vec").gensim_kwargs()
    assert "bucket" not in w2v and w2v["compute_loss"] is True
    assert w2v["sg"] == 1 and TrainParams(sg=False).gensim_kwargs()["sg"] == 0


def test_default_names(tiny):
    assert train.default_name(tiny, "fasttext") == "tiny-fasttext"
    assert train.default_name(Corpus([["a"]], source="brown"), "word2vec") == "brown-word2vec"
    assert train.default_name(Corpus([["a"]], source="/x/My notes (2).txt"), "fasttext") == "My-notes-2-fasttext"
    assert train.default_name(Corpus([["a"]], source="/x/.txt"), "fasttext") in {"corpus-fasttext", "txt-fasttext"}


def test_epoch_loss_is_the_difference_of_gensims_cumulative_loss():
    reports = []
    timer = train._epoch_callback(1000, 3, None, reports)
    cumulative = iter([10.0, 25.0, 33.0])
    model = SimpleNamespace(compute_loss=True, get_latest_training_loss=lambda: next(cumulative))
    for _ in range(3):
        timer.on_epoch_begin(model)
        timer.on_epoch_end(model)
    assert [r.loss for r in reports] == [10.0, 15.0, 8.0]
    assert [r.epoch for r in reports] == [1, 2, 3]
    assert all(r.words_per_s > 0 for r in reports)


@pytest.mark.parametrize("algorithm", ["word2vec", "fasttext"])
def test_train_stores_a_loadable_model_with_its_evaluation(tiny, algorithm):
    seen = []
    result = train_model(tiny, quick(algorithm=algorithm), name="t", progress=seen.append, probes=("king", "colour"))
    assert [r.epoch for r in seen] == [1, 2, 3] and seen == result.epochs
    if algorithm == "word2vec":
        assert all(r.loss is not None and r.loss > 0 for r in seen)
    else:
        assert all(r.loss is None for r in seen)
    vec = load_vectors("t")
    assert vec.has_subwords == (algorithm == "fasttext")
    assert set(vec.words) == {t for s in tiny.sentences for t in s}
    assert vec.meta["algorithm"] == algorithm and vec.meta["corpus"]["sha256"] == tiny.sha256
    assert vec.meta["params"]["epochs"] == 3
    ev = vec.meta["evaluation"]
    assert set(ev) == {"wordsim353", "simlex999", "analogies"}
    assert 0 <= ev["wordsim353"]["oov_ratio"] <= 1
    assert ev["wordsim353"]["oov_ratio"] > 0.9  # a 25-word vocabulary misses nearly every pair
    counts = np.load(paths.models_dir() / "t" / "counts.npy", allow_pickle=False)
    assert counts[vec.index["the"]] == sum(s.count("the") for s in tiny.sentences)
    # Probe words: "king" is known; "colour" only has a vector with subwords.
    assert "king" in result.neighbours and len(result.neighbours["king"]) == 5
    assert ("colour" in result.neighbours) == (algorithm == "fasttext")
    assert all(n != "king" for n, _ in result.neighbours["king"])
    json.dumps(result.summary(), allow_nan=False)


def test_float16_precision_halves_the_files(tiny):
    train_model(tiny, quick(precision="float32"), name="f32")
    train_model(tiny, quick(precision="float16"), name="f16")
    f32, f16 = load_vectors("f32"), load_vectors("f16")
    assert f16.vectors.dtype == np.float16 and f16.ngrams.dtype == np.float16
    assert f16.ngrams.nbytes * 2 == f32.ngrams.nbytes


def test_min_count_leaving_no_vocabulary_stores_nothing(tiny):
    train_model(tiny, quick(), name="keep")
    before = np.array(load_vectors("keep").vectors)
    with pytest.raises(BadInput) as info:
        train_model(tiny, quick(min_count=10_000), name="keep")
    assert "--min-count 10000 leaves no vocabulary" in str(info.value) and "'the'" in str(info.value)
    assert np.array_equal(np.asarray(load_vectors("keep").vectors), before)


def test_interrupted_training_leaves_the_earlier_model(tiny):
    train_model(tiny, quick(algorithm="word2vec"), name="keep")
    before = load_vectors("keep")
    before_vectors = np.array(before.vectors)

    def interrupt(report):
        if report.epoch == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_model(tiny, quick(algorithm="fasttext", epochs=5), name="keep", progress=interrupt)
    after = load_vectors("keep")
    assert not after.has_subwords and np.array_equal(np.asarray(after.vectors), before_vectors)
    assert after.meta["created"] == before.meta["created"]


def test_builtin_name_is_refused(tiny):
    with pytest.raises(BadInput, match="built-in"):
        train_model(tiny, quick(), name=store.BUILTIN)


# -- evaluation: our batched analogy test against gensim's evaluate_word_analogies ------------


@pytest.fixture(scope="module")
def default_vectors():
    assert (store.builtin_dir() / "meta.json").is_file(), "data/default is not shipped"
    return load_vectors(store.BUILTIN)


def test_batched_analogies_equal_gensims_question_by_question(default_vectors, tmp_path):
    from gensim.test.utils import datapath

    from attncli.vectors import evaluate

    # Every 25th question of each section (gensim needs ~3 ms a question), a malformed line too.
    lines, kept = [], 0
    with open(datapath(evaluate.ANALOGIES), encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if line.startswith(": "):
                lines.append(line)
            elif i % 25 == 0:
                lines.append(line)
                kept += 1
    lines.insert(1, "only three words\n")
    path = tmp_path / "q.txt"
    path.write_text("".join(lines), encoding="utf-8")

    words, vectors = default_vectors.words, default_vectors.vectors
    ours = evaluate.analogies(words, vectors, str(path), batch=100)
    kv = evaluate.keyed_vectors(words, vectors)
    accuracy, sections = kv.evaluate_word_analogies(str(path))
    total = sections[-1]
    assert ours["questions"] == kept
    assert ours["answered"] == len(total["correct"]) + len(total["incorrect"]) > 50
    answered = [q for q in evaluate.read_analogies(str(path)) if all(w.lower() in default_vectors for w in q)]
    ours_correct = {q for q, ok in zip(answered, ours["correct"]) if ok}
    assert ours_correct == set(total["correct"])
    assert ours["accuracy"] == pytest.approx(accuracy)


def test_pair_oov_ratio_matches_gensim(default_vectors):
    from gensim.test.utils import datapath

    from attncli.vectors import evaluate

    kv = evaluate.keyed_vectors(default_vectors.words[:3000], default_vectors.vectors[:3000])
    for filename in evaluate.BENCHMARKS.values():
        _, _, oov_percent = kv.evaluate_word_pairs(datapath(filename))
        assert evaluate._pair_oov_ratio(kv, datapath(filename)) == pytest.approx(oov_percent / 100, abs=1e-4)  # fixed: _pair_oov_ratio rounds to 4 decimals (at most 5e-5 off)
