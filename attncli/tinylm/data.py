"""Language-model data for trained attention: Brown split, output vocabulary, n-gram baselines.

NumPy only (nltk is imported inside the one function that reads Brown when ``attncli.vectors.corpus``
is not available). Shapes: N target tokens, V output vocabulary size.

The task is next-word prediction inside a sentence: for a sentence w_0 .. w_{n-1} (cut to
``max_len`` tokens) the inputs are w_0 .. w_{n-1} and the targets w_1 .. w_{n-1}, </s>. The
first word of a sentence is never a target (no model sees a beginning-of-sentence token), so
every model (transformer, unigram, bigram) is scored on exactly the same targets.

The output vocabulary is the ``vocab_size`` most frequent training words plus ``<unk>`` (every
other word) and ``</s>``: a full 40k-word softmax is too slow to train on a 2-core CPU. The
inputs are not restricted: each input token keeps its own word vector.

Held-out split: by document (Brown's 500 files), seeded, so no held-out sentence shares a
document with a training sentence.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.vectors.corpus import download_brown
from attncli.vectors.tokenize import normalize_sentence

UNK = "<unk>"
EOS = "</s>"


@dataclass
class Split:
    train: list[list[str]]  # sentences (already tokenized, cut to max_len)
    heldout: list[list[str]]
    train_docs: int
    heldout_docs: int


def brown_missing() -> RuntimeFailure:
    return RuntimeFailure("the Brown corpus is not installed: run python -m nltk.downloader brown "
                          "(or set NLTK_DATA to a directory that holds it)")


def _brown():
    """nltk's Brown reader; where the corpus is missing, fetched with nltk's downloader first, as
    ``attn train`` does (offline, a RuntimeFailure that names both ways out)."""
    from nltk.corpus import brown

    try:
        brown.fileids()  # forces nltk's lookup
        return brown
    except LookupError:
        return download_brown()


def brown_documents() -> list[tuple[str, list[list[str]]]]:
    """Brown as (fileid, tokenized sentences), in the shared tokenization; empty sentences dropped.

    Read through nltk here (about 2 s) rather than ``attncli.vectors.corpus``'s cache, because the split
    is by document and that cache keeps sentences only.
    """
    try:
        brown = _brown()
        out = []
        for fileid in brown.fileids():
            sents = [normalize_sentence(list(s)) for s in brown.sents(fileid)]
            out.append((fileid, [s for s in sents if s]))
        return out
    except LookupError:
        raise brown_missing() from None


def split_documents(
    docs: list[tuple[str, list[list[str]]]],
    *,
    heldout_fraction: float,
    seed: int,
    max_len: int,
    limit_sentences: int | None = None,
) -> Split:
    """Shuffle documents with ``seed``; keep whole documents until ``limit_sentences``; split by document."""
    if not 0 < heldout_fraction < 1:
        raise BadInput(f"--heldout must be between 0 and 1 (got {heldout_fraction})")
    order = np.random.default_rng(seed).permutation(len(docs))
    chosen = []
    total = 0
    for i in order:
        if limit_sentences is not None and total >= limit_sentences:
            break
        chosen.append(docs[i])
        total += len(docs[i][1])
    if len(chosen) < 2:
        raise BadInput("need at least two documents to make a training and a held-out split")
    n_held = min(len(chosen) - 1, max(1, round(heldout_fraction * len(chosen))))
    held, train = chosen[:n_held], chosen[n_held:]

    def sentences(part):
        return [s[:max_len] for _, sents in part for s in sents if s]

    return Split(sentences(train), sentences(held), len(train), len(held))


class OutputVocab:
    """The words the model predicts: the most frequent training words, then <unk> and </s>."""

    def __init__(self, words: list[str]):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.unk = self.index[UNK]
        self.eos = self.index[EOS]

    @classmethod
    def from_sentences(cls, sentences: list[list[str]], size: int) -> "OutputVocab":
        counts = Counter(w for s in sentences for w in s)
        top = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
        return cls(top + [UNK, EOS])

    def __len__(self) -> int:
        return len(self.words)

    def ids(self, words: list[str]) -> np.ndarray:
        return np.array([self.index.get(w, self.unk) for w in words], dtype=np.int64)

    def targets(self, sentence: list[str]) -> np.ndarray:
        """(n,) ids of w_1 .. w_{n-1}, </s>."""
        return np.append(self.ids(sentence[1:]), self.eos)


def pairs(sentences: list[list[str]], vocab: OutputVocab) -> tuple[np.ndarray, np.ndarray]:
    """(N,), (N,): previous word's output id (the bigram context) and target id, for every target."""
    ctx = [vocab.ids(s) for s in sentences]
    tgt = [vocab.targets(s) for s in sentences]
    if not ctx:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(ctx), np.concatenate(tgt)


def unigram_perplexity(train_targets: np.ndarray, test_targets: np.ndarray, V: int) -> float:
    """Add-one (Laplace) unigram: P(w) = (c(w) + 1) / (N + V)."""
    counts = np.bincount(train_targets, minlength=V).astype(np.float64)  # (V,)
    p = (counts + 1) / (counts.sum() + V)  # (V,)
    return float(np.exp(-np.log(p[test_targets]).mean()))


def kneser_ney_bigram_perplexity(
    train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], V: int
) -> tuple[float, float]:
    """Interpolated Kneser-Ney bigram (Kneser & Ney 1995; Chen & Goodman 1998), one discount.

    P(w | c) = max(c(c,w) - D, 0) / c(c)  +  D * N1+(c, .) / c(c) * P_cont(w)
    P_cont(w) = (N1+(., w) + 1) / (N1+(., .) + V)     (add-one so no word has probability 0)
    D = n1 / (n1 + 2 n2), n_k the number of bigram types seen exactly k times.
    A context never seen in training falls back to P_cont. Returns (perplexity, D).
    """
    c_tr, w_tr = train
    keys, pair_counts = np.unique(c_tr * V + w_tr, return_counts=True)  # (P,), (P,)
    n1 = int((pair_counts == 1).sum())
    n2 = int((pair_counts == 2).sum())
    D = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.75
    ctx_total = np.bincount(c_tr, minlength=V).astype(np.float64)  # (V,) c(c)
    ctx_types = np.bincount(keys // V, minlength=V).astype(np.float64)  # (V,) N1+(c, .)
    cont = np.bincount(keys % V, minlength=V).astype(np.float64)  # (V,) N1+(., w)
    p_cont = (cont + 1) / (len(keys) + V)  # (V,)

    c_te, w_te = test
    q = c_te * V + w_te
    pos = np.clip(np.searchsorted(keys, q), 0, max(len(keys) - 1, 0))
    if len(keys):
        c_cw = np.where(keys[pos] == q, pair_counts[pos], 0).astype(np.float64)  # (N,)
    else:  # no training pair at all (pair_counts[pos] would index an empty array)
        c_cw = np.zeros(len(q))
    total = ctx_total[c_te]  # (N,)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(
            total > 0,
            np.maximum(c_cw - D, 0) / total + D * ctx_types[c_te] / total * p_cont[w_te],
            p_cont[w_te],
        )
    return float(np.exp(-np.log(p).mean())), float(D)


def baselines(split: Split, vocab: OutputVocab) -> dict[str, float]:
    train = pairs(split.train, vocab)
    test = pairs(split.heldout, vocab)
    V = len(vocab)
    bigram, D = kneser_ney_bigram_perplexity(train, test, V)
    return {
        "unigram_perplexity": unigram_perplexity(train[1], test[1], V),
        "bigram_perplexity": bigram,
        "bigram_discount": D,
    }


def perplexity(total_nll: float, n_targets: int) -> float:
    return math.exp(total_nll / max(n_targets, 1))


def brown_texts(limit: int, *, heldout_fraction: float = 0.1, seed: int = 0) -> list[str]:
    """Up to ``limit`` sentences of Brown's held-out documents as plain text, punctuation kept:
    the documents :func:`split_documents` holds out with these defaults (those of ``attn
    train-attention``), in the same order, so a pretrained model is scored on text attn's own LM
    never trained on. Brown's tokens are joined back with nltk's Treebank detokenizer."""
    try:
        from nltk.tokenize.treebank import TreebankWordDetokenizer

        brown = _brown()
        fileids = brown.fileids()
        order = np.random.default_rng(seed).permutation(len(fileids))
        n_held = min(len(fileids) - 1, max(1, round(heldout_fraction * len(fileids))))
        detok = TreebankWordDetokenizer()
        out: list[str] = []
        for i in order[:n_held]:
            for sent in brown.sents(fileids[i]):
                if len(out) >= limit:
                    return out
                text = detok.detokenize(list(sent)).replace("``", '"').replace("''", '"')
                if text.strip():
                    out.append(text)
        return out
    except LookupError:
        raise brown_missing() from None
