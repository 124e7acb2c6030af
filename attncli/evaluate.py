"""Intrinsic evaluation of word vectors on the benchmarks gensim ships.

- WordSim-353 (Finkelstein et al. 2002) and SimLex-999 (Hill et al. 2015): Spearman and Pearson
  correlation between the cosine similarity of each word pair and the human rating
  (``KeyedVectors.evaluate_word_pairs``).
- The analogy questions of Mikolov et al. 2013 ("Efficient Estimation of Word Representations
  in Vector Space"), ``questions-words.txt``: accuracy of 3CosAdd, b - a + c
  (``KeyedVectors.evaluate_word_analogies``).

Only the stored vocabulary is used (a plain ``KeyedVectors``, no subword vectors), so a pair or
question with a word outside it is skipped; ``oov_ratio`` is the fraction (0..1, not a percentage)
of pairs or questions skipped that way. A correlation over no pairs is ``null``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

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
    path = datapath(ANALOGIES)
    accuracy, sections = kv.evaluate_word_analogies(path)
    with open(path, encoding="utf-8") as fh:
        questions = sum(1 for line in fh if line.strip() and not line.startswith(":"))
    total = sections[-1]
    answered = len(total["correct"]) + len(total["incorrect"])
    out["analogies"] = {
        "accuracy": round(float(accuracy), 4) if answered else None,
        "oov_ratio": round(1.0 - answered / questions, 4) if questions else None,
    }
    return out


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
    from attncli.vectors import load_vectors

    vec = load_vectors(name)
    return {"model": vec.name, **evaluate_arrays(vec.words, vec.vectors)}
