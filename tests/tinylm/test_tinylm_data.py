"""The LM's data (attncli/tinylm/data.py): the split by whole documents, the output vocabulary, Brown's
documents and held-out text (a stub corpus), and the n-gram baselines against their formulas
written out with dictionaries."""

from __future__ import annotations
from types import ModuleType, SimpleNamespace
import sys

import numpy as np
import pytest

from attncli.errors import BadInput
from attncli.tinylm import data as lm_data


# -- tinylm/data.py: the split, the output vocabulary, Brown -------------------------------------------


def _docs(sizes: list[int], length: int = 3) -> list[tuple[str, list[list[str]]]]:
    """Document i holds sizes[i] sentences of ``length`` words, each word naming its document."""
    return [(f"d{i}", [[f"d{i}s{j}w{k}" for k in range(length)] for j in range(n)]) for i, n in enumerate(sizes)]


def _doc_of(sentence: list[str]) -> str:
    return sentence[0].split("s")[0]


@pytest.mark.parametrize("fraction, n_docs, held", [
    (0.3, 10, 3),  # round(0.3 * 10)
    (0.1, 10, 1),
    (0.04, 10, 1),  # round(0.4) = 0: at least one document is held out
    (0.9, 2, 1),  # round(1.8) = 2: at least one document is left to train on
    (0.5, 2, 1),
])
def test_the_split_is_by_whole_documents_in_the_asked_fraction(fraction, n_docs, held):
    docs = _docs(list(range(1, n_docs + 1)))
    split = lm_data.split_documents(docs, heldout_fraction=fraction, seed=3, max_len=2)
    assert (split.heldout_docs, split.train_docs) == (held, n_docs - held)
    held_ids = {_doc_of(s) for s in split.heldout}
    train_ids = {_doc_of(s) for s in split.train}
    assert len(held_ids) == held and len(train_ids) == n_docs - held and not held_ids & train_ids
    by_id = dict(docs)
    assert len(split.heldout) == sum(len(by_id[d]) for d in held_ids)  # whole documents
    assert len(split.train) == sum(len(by_id[d]) for d in train_ids)
    assert all(len(s) == 2 for s in split.train + split.heldout)  # cut to max_len


@pytest.mark.parametrize("limit, kept", [(5, 3), (6, 3), (7, 4), (3, 2), (None, 6)])
def test_the_split_keeps_whole_documents_until_the_sentence_limit(limit, kept):
    """Documents of 2 sentences are taken until the sentences taken reach the limit: 5 or 6
    sentences take 3 documents (6 sentences)."""
    split = lm_data.split_documents(_docs([2] * 6), heldout_fraction=0.5, seed=0, max_len=10, limit_sentences=limit)
    assert split.train_docs + split.heldout_docs == kept
    assert len(split.train) + len(split.heldout) == 2 * kept


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1])
def test_a_heldout_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(BadInput) as caught:
        lm_data.split_documents(_docs([2, 2, 2]), heldout_fraction=fraction, seed=0, max_len=10)
    assert str(caught.value) == f"--heldout must be between 0 and 1 (got {fraction})"


def test_one_document_cannot_be_split():
    with pytest.raises(BadInput) as caught:
        lm_data.split_documents(_docs([5]), heldout_fraction=0.5, seed=0, max_len=10)
    assert str(caught.value) == "need at least two documents to make a training and a held-out split"
    with pytest.raises(BadInput):  # a limit the first document meets leaves one document
        lm_data.split_documents(_docs([5, 5]), heldout_fraction=0.5, seed=0, max_len=10, limit_sentences=2)


def test_the_output_vocabulary_is_the_most_frequent_words_ties_alphabetical():
    sentences = [["b", "a", "c", "c"], ["d", "b", "a", "c"], ["e", "d"]]  # c 3; a, b, d 2; e 1
    assert lm_data.OutputVocab.from_sentences(sentences, 3).words == ["c", "a", "b", lm_data.UNK, lm_data.EOS]
    assert lm_data.OutputVocab.from_sentences(sentences, 1).words == ["c", lm_data.UNK, lm_data.EOS]


def test_an_output_vocabulary_maps_words_to_ids_and_others_to_unk():
    vocab = lm_data.OutputVocab(["a", "b", lm_data.UNK, lm_data.EOS])
    assert vocab.ids(["b", "zzz", "a"]).tolist() == [1, 2, 0]
    assert vocab.targets(["a", "b", "zzz"]).tolist() == [1, 2, 3]  # w_1, w_2, then </s>


def test_no_sentences_make_no_pairs():
    vocab = lm_data.OutputVocab(["a", lm_data.UNK, lm_data.EOS])
    for part in lm_data.pairs([], vocab):
        assert part.shape == (0,) and part.dtype == np.int64  # ids: usable as indices
    assert lm_data.pairs([["a", "zzz"]], vocab)[0].dtype == np.int64


# -- tinylm/data.py: the n-gram baselines against the formulas written out with dictionaries -------------


def _kneser_ney_by_hand(train: list[tuple[int, int]], test: list[tuple[int, int]], V: int) -> tuple[float, float]:
    """Interpolated Kneser-Ney as tinylm/data.py's docstring states it (Chen & Goodman 1998), pair by pair."""
    import math
    from collections import Counter

    c = Counter(train)  # (context, word) -> count
    n1 = sum(1 for n in c.values() if n == 1)
    n2 = sum(1 for n in c.values() if n == 2)
    D = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.75
    ctx_total = Counter(ctx for ctx, _ in train)
    ctx_types = Counter(ctx for ctx, _ in c)
    cont = Counter(w for _, w in c)
    logs = []
    for ctx, w in test:
        p_cont = (cont[w] + 1) / (len(c) + V)
        if ctx_total[ctx]:
            p = max(c[(ctx, w)] - D, 0) / ctx_total[ctx] + D * ctx_types[ctx] / ctx_total[ctx] * p_cont
        else:
            p = p_cont
        logs.append(math.log(p))
    return math.exp(-sum(logs) / len(logs)), D


def _arrays(pairs):
    return (np.array([c for c, _ in pairs], dtype=np.int64), np.array([w for _, w in pairs], dtype=np.int64))


@pytest.mark.parametrize("train", [
    [(1, 2)] * 3 + [(1, 3)] * 2 + [(2, 3), (3, 1), (3, 1)],  # counts 3, 2, 1, 2: n1 = 1, n2 = 2
    [(1, 2)] * 3 + [(2, 4)],  # n1 = 1, n2 = 0: D = 1
    [(1, 2)] * 3 + [(2, 3)] * 4,  # no pair seen once or twice: D falls back to 0.75
])
def test_the_bigram_baseline_is_interpolated_kneser_ney(train):
    V = 6  # word 5 and context 5 never occur in training
    test = [(1, 2), (1, 3), (1, 0), (0, 0), (2, 3), (5, 5), (3, 1), (4, 2), (2, 4)]  # below, between and above the seen pairs
    ppl, D = lm_data.kneser_ney_bigram_perplexity(_arrays(train), _arrays(test), V)
    ref_ppl, ref_D = _kneser_ney_by_hand(train, test, V)
    assert D == pytest.approx(ref_D, abs=1e-15)
    assert ppl == pytest.approx(ref_ppl, rel=1e-12)


def test_with_no_training_pair_every_word_has_probability_1_over_V():
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    ppl, D = lm_data.kneser_ney_bigram_perplexity(empty, _arrays([(0, 1), (2, 3)]), 5)
    assert ppl == pytest.approx(5.0, rel=1e-12) and D == 0.75


def test_the_unigram_baseline_is_add_one():
    import math

    train, test, V = np.array([0, 0, 0, 2]), np.array([0, 2, 4]), 5  # word 4 never seen: P = 1 / (4 + 5)
    by_hand = math.exp(-(math.log(4 / 9) + math.log(2 / 9) + math.log(1 / 9)) / 3)
    assert lm_data.unigram_perplexity(train, test, V) == pytest.approx(by_hand, rel=1e-12)


def test_the_baselines_score_each_target_after_the_word_before_it():
    """Targets w_1 .. w_{n-1}, </s>; the bigram context of each target is the word before it."""
    import math

    split = lm_data.Split(train=[["a", "b", "a"], ["b", "a"]], heldout=[["a", "c"]], train_docs=1, heldout_docs=1)
    vocab = lm_data.OutputVocab(["a", "b", lm_data.UNK, lm_data.EOS])  # ids 0, 1, 2, 3
    got = lm_data.baselines(split, vocab)
    train_pairs = [(0, 1), (1, 0), (0, 3), (1, 0), (0, 3)]  # (context, target)
    test_pairs = [(0, 2), (2, 3)]  # "c" is <unk>
    ppl, D = _kneser_ney_by_hand(train_pairs, test_pairs, 4)
    assert got["bigram_perplexity"] == pytest.approx(ppl, rel=1e-12) and got["bigram_discount"] == pytest.approx(D)
    counts = {0: 2, 1: 1, 2: 0, 3: 2}  # targets a a b </s> </s>
    unigram = math.exp(-(math.log((counts[2] + 1) / 9) + math.log((counts[3] + 1) / 9)) / 2)
    assert got["unigram_perplexity"] == pytest.approx(unigram, rel=1e-12)
    assert lm_data.perplexity(2.0, 1) == pytest.approx(math.e**2) and lm_data.perplexity(3.0, 0) == pytest.approx(math.e**3)


class StubBrown:
    """nltk's Brown reader over 20 one-sentence documents."""

    def __init__(self):
        self.docs = {f"c{i:02d}": [[f"w{i}", ",", "``", "hi", "''", "."]] for i in range(20)}

    def fileids(self):
        return list(self.docs)

    def sents(self, fileid):
        return self.docs[fileid]


def test_brown_texts_are_the_held_out_documents_of_the_training_split(monkeypatch):
    import nltk.corpus

    stub = StubBrown()
    monkeypatch.setattr(nltk.corpus, "brown", stub)
    split = lm_data.split_documents(list(stub.docs.items()), heldout_fraction=0.1, seed=0, max_len=80)
    assert split.heldout_docs == 2  # 10% of 20 documents
    texts = lm_data.brown_texts(100)
    assert texts == [f'{s[0]}, "hi".' for s in split.heldout]  # Treebank-detokenized, `` '' as "
    assert len(texts) == 2 and lm_data.brown_texts(1) == texts[:1]
    assert len(lm_data.brown_texts(100, heldout_fraction=0.25)) == 5


def test_brown_documents_are_every_file_in_order_with_empty_sentences_dropped(monkeypatch):
    """A fake nltk Brown of two files: every file kept in order, as (fileid, sentences), tokens
    normalized (lower case), a sentence left empty by normalization dropped."""
    files = {"ca01": [["The", "Cat", "sat"], [], ["A", "dog"]], "cb02": [["Old", "man"]]}
    fake_brown = SimpleNamespace(fileids=lambda: list(files), sents=lambda fileid: files[fileid])
    corpus = ModuleType("nltk.corpus")
    corpus.brown = fake_brown
    monkeypatch.setitem(sys.modules, "nltk.corpus", corpus)
    assert lm_data.brown_documents() == [
        ("ca01", [["the", "cat", "sat"], ["a", "dog"]]),
        ("cb02", [["old", "man"]]),
    ]
