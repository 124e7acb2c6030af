"""Intrinsic evaluation of word vectors on the benchmarks gensim ships.

- WordSim-353 (Finkelstein et al. 2002) and SimLex-999 (Hill et al. 2015): Spearman and Pearson
  correlation between the cosine similarity of each word pair and the human rating
  (``KeyedVectors.evaluate_word_pairs``).
- The analogy questions of Mikolov et al. 2013 ("Efficient Estimation of Word Representations
  in Vector Space"), ``questions-words.txt``: accuracy of 3CosAdd, the answer to "a is to b as
  c is to ?" being the word d (not a, b or c) whose cosine with unit(b^ - a^ + c^) is highest
  (x^ = x / |x|). This is exactly ``KeyedVectors.evaluate_word_analogies`` (case-insensitive,
  whole vocabulary), computed in batches with one matrix product instead of one
  ``most_similar`` call per question: gensim takes about 20 s on the default model, this well
  under 1 s, which keeps ``attn train``'s wrapper cost small. tests/vectors/test_vectors_train.py checks it
  against gensim question by question.

Only the stored vocabulary is used (a plain ``KeyedVectors``, no subword vectors), so a pair or
question with a word outside it is skipped; ``oov_ratio`` is the fraction (0..1, not a percentage)
of pairs or questions skipped that way. A correlation over no pairs is ``null``.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from attncli.vectors.model import load_vectors

BENCHMARKS = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}
ANALOGIES = "questions-words.txt"


def _finite(x: float) -> float | None:
    x = float(x)
    return round(x, 4) if math.isfinite(x) else None


def keyed_vectors(words: list[str], vectors):
    """A gensim ``KeyedVectors`` holding exactly these rows (as float32)."""
    import numpy as np
    from gensim.models import KeyedVectors

    vectors = np.asarray(vectors, dtype=np.float32)  # (V, d)
    kv = KeyedVectors(vector_size=vectors.shape[1])
    kv.add_vectors(list(words), vectors)
    return kv


def evaluate_kv(kv) -> dict[str, Any]:
    """The three benchmarks on a gensim ``KeyedVectors``; keys as in ``attn eval --json``."""
    import warnings

    from gensim.test.utils import datapath

    logging.getLogger("gensim").setLevel(logging.ERROR)
    out: dict[str, Any] = {}
    for key, filename in BENCHMARKS.items():
        try:
            with warnings.catch_warnings():  # scipy warns about constant input on tiny vocabularies
                warnings.simplefilter("ignore")
                pearson, spearman, oov_percent = kv.evaluate_word_pairs(datapath(filename))
        except ValueError:  # fewer than 2 pairs in the vocabulary: no correlation at all
            out[key] = {"spearman": None, "pearson": None, "oov_ratio": _pair_oov_ratio(kv, datapath(filename))}
            continue
        out[key] = {
            "spearman": _finite(spearman[0]),
            "pearson": _finite(pearson[0]),
            "oov_ratio": round(float(oov_percent) / 100.0, 4),
        }
    result = analogies(kv.index_to_key, kv.vectors, datapath(ANALOGIES))
    out["analogies"] = {
        "accuracy": round(result["accuracy"], 4) if result["answered"] else None,
        "oov_ratio": round(result["oov_ratio"], 4) if result["questions"] else None,
    }
    return out


def read_analogies(path: str) -> list[tuple[str, str, str, str]]:
    """The questions (upper-cased, as gensim compares them), skipping section and malformed lines."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(": "):
                continue
            words = line.split()
            if len(words) == 4:
                out.append(tuple(w.upper() for w in words))
    return out


def analogies(words: list[str], vectors, path: str, *, batch: int = 512) -> dict[str, Any]:
    """3CosAdd accuracy over the questions whose four words are all in ``words``.

    Returns ``questions``, ``answered``, ``accuracy``, ``oov_ratio`` and ``correct`` (one bool per
    answered question, in file order). A case-insensitive vocabulary lookup, as in gensim: when
    two words differ only in case the more frequent (earlier) one stands for both.
    """
    import numpy as np

    vectors = np.asarray(vectors, dtype=np.float32)  # (V, d)
    index: dict[str, int] = {}
    for i in range(len(words) - 1, -1, -1):
        index[words[i].upper()] = i
    questions = read_analogies(path)
    rows = [tuple(index[w] for w in q) for q in questions if all(w in index for w in q)]
    norms = np.linalg.norm(vectors, axis=1)  # (V,)
    unit = vectors / norms[:, None]  # (V, d)
    correct: list[bool] = []
    for start in range(0, len(rows), batch):
        ids = np.array(rows[start : start + batch])  # (n, 4): a, b, c, expected
        n = len(ids)
        query = (unit[ids[:, 1]] + unit[ids[:, 2]] - unit[ids[:, 0]]) / 3.0  # (n, d)
        query /= np.sqrt(np.sum(query * query, axis=1, keepdims=True))  # (n, d) unit rows
        sims = (vectors @ query.T) / norms[:, None]  # (V, d) @ (d, n) -> (V, n) cosines
        cols = np.arange(n)
        for k in range(3):
            sims[ids[:, k], cols] = -np.inf  # the question's own words are never the answer
        predicted = np.argmax(sims, axis=0)  # (n,)
        correct.extend((predicted == ids[:, 3]).tolist())
    answered = len(correct)
    return {
        "questions": len(questions),
        "answered": answered,
        "accuracy": sum(correct) / answered if answered else 0.0,
        "oov_ratio": 1.0 - answered / len(questions) if questions else 0.0,
        "correct": correct,
    }


def _pair_oov_ratio(kv, path: str) -> float:
    """The share of pairs with a word outside the vocabulary, parsed as evaluate_word_pairs does."""
    vocab = {w.upper() for w in kv.index_to_key}
    pairs = oov = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            try:
                a, b, _ = fields[0], fields[1], float(fields[2])
            except (IndexError, ValueError):
                continue
            pairs += 1
            oov += a.upper() not in vocab or b.upper() not in vocab
    return round(oov / pairs, 4) if pairs else 1.0


def evaluate_arrays(words: list[str], vectors) -> dict[str, Any]:
    """Evaluate vocabulary rows (V, d) as stored (float16 rows are widened to float32)."""
    return evaluate_kv(keyed_vectors(words, vectors))


def evaluate_model(name: str | None = None) -> dict[str, Any]:
    """``attn eval``: the stored model ``name`` (None: the default model)."""
    vec = load_vectors(name)
    return {"model": vec.name, **evaluate_arrays(vec.words, vec.vectors)}
