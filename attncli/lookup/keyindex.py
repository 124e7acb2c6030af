"""The keys of one dictionary, embedded once for one model, scored against any query.

Shapes: N keys, G distinct tokens in the keys, d vector dimension, H n-gram hashes of all tokens.

    c(text)      = mean_t (u_t - mu),  u_t = v_t / |v_t|,  mu = mean unit vector of the vocabulary
    cosine_i     = cos(c(query), c(key_i))
    ngram_i      = 2 * min(o_i, |G(q)|) / (|G(q)| + |G(k_i)|)
    similarity_i = (1 - lambda) * cosine_i + lambda * ngram_i

``G(text)`` is the list of character 3- to 6-grams of ``<token>`` for each token of the text
(fastText's n-grams, duplicates kept), ``o_i`` the number of key i's n-grams that also occur in
the query: a Dice coefficient of the two n-gram lists. Centring on ``mu`` removes the direction
that every word vector shares (Mu & Viswanath 2018, "All-but-the-Top"): in the default model two
random vocabulary words have a cosine of 0.22 on average (|mu| = 0.46), after centring 0.00, so
a similarity near 0 means "unrelated". docs/lookup.md has the measurements behind both choices.

The key side is vectorised: each distinct token is embedded once (vocabulary rows by one fancy
index, unknown words by ``ngrams.subword_vectors``), keys of the same number of tokens are summed
together, column by column, and the n-gram overlaps of a query are counted over integer arrays.
"""

from __future__ import annotations

import math
import re

import numpy as np

from attncli.errors import BadInput, UnknownWord
from attncli.io.textio import clip
from attncli.lookup.params import NGRAM_MAX, NGRAM_MIN, NGRAM_WEIGHT
from attncli.vectors.ngrams import NgramHashes, ngram_hashes, subword_vectors
from attncli.vectors.tokenize import tokenize
from attncli.vectors.model import Vectors, unit_rows


# A key made of lower-case ASCII words and digits separated by single spaces tokenizes to
# key.split(" "): the same tokens as tokenize() (tests check it), at a fraction of the cost.
_SIMPLE_KEY = re.compile(r"[a-z0-9]+(?: [a-z0-9]+)*")


def key_tokens(key: str) -> list[str]:
    if _SIMPLE_KEY.fullmatch(key):
        return key.split(" ")
    return tokenize(key)


def embed_tokens(v: Vectors, tokens: list[str], grams: NgramHashes | None = None, *,
                 missing: list[int] | None = None) -> np.ndarray:
    """(G, d) float32: each token's stored row, else its fastText subword vector.

    The same numbers as ``Vectors.vector`` (tests check it), computed for all unknown tokens at
    once. ``grams``: the tokens' n-gram hashes when already computed (used when they cover the
    model's n-gram lengths). UnknownWord if a token has no vector (no subwords in the model, or
    no n-gram of the model's lengths) -- unless ``missing`` is a list: then such a token gets a
    zero row and its index is appended to ``missing``.
    """
    out = np.empty((len(tokens), v.dim), dtype=np.float32)
    rows = np.fromiter((v.index.get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))
    known = rows >= 0
    if known.any():
        out[known] = v.vectors[rows[known]]  # (g, d)
    unknown = np.flatnonzero(~known)
    if len(unknown):
        if not v.has_subwords:
            if missing is None:
                raise UnknownWord(tokens[unknown[0]], v.name, has_subwords=False)
            out[unknown] = 0.0
            missing += unknown.tolist()
            return v.checked(out, "vectors.npy")
        sub = v.subword
        if grams is not None and grams.min_n <= sub["min_n"] and sub["max_n"] <= grams.max_n:
            hashed = grams.only(sub["min_n"], sub["max_n"])
            if len(unknown) < len(tokens):
                hashed = hashed.select(unknown)
        else:
            hashed = ngram_hashes([tokens[t] for t in unknown], sub["min_n"], sub["max_n"])
        empty = np.flatnonzero(hashed.counts == 0)
        if len(empty):
            if missing is None:
                raise UnknownWord(tokens[unknown[empty[0]]], v.name, has_subwords=True)
            out[unknown[empty]] = 0.0
            missing += unknown[empty].tolist()
            nonempty = np.flatnonzero(hashed.counts > 0)
            unknown, hashed = unknown[nonempty], hashed.select(nonempty)
        if len(unknown):
            table = v.ngrams if len(unknown) < 2000 else np.asarray(v.ngrams, dtype=np.float32)
            out[unknown] = subword_vectors(table, hashed, sub["bucket"])
    return v.checked(out, "vectors.npy or ngrams.npy")  # a NaN row of a table too big to scan at load


def check_ngram_weight(ngram_weight: float) -> float:
    if not (isinstance(ngram_weight, (int, float)) and math.isfinite(ngram_weight) and 0.0 <= ngram_weight <= 1.0):
        raise BadInput(f"--ngram-weight must be between 0 and 1, got {ngram_weight}")
    return float(ngram_weight)


class KeyTokens:
    """The keys' tokens and character n-grams: the n-gram overlap part of the score.

    Subclasses add ``query_vector`` and ``key_matrix`` (N, D): the word-vector ``KeyIndex`` here,
    the sentence encoder's ``EncoderIndex`` in ``encoder.py``.
    """

    name: str  # the model or encoder named in results
    key_matrix: np.ndarray  # (N, D) unit rows (0 for a key without a vector)

    def __init__(self, keys: list[str], *, ngram_weight: float = NGRAM_WEIGHT, hash_sizes: tuple[int, int] = (NGRAM_MIN, NGRAM_MAX)):
        self.keys = keys
        self.ngram_weight = check_ngram_weight(ngram_weight)
        self.missing_error: BadInput | None = None
        self.vectorless_keys: list[str] = []
        self.token_id: dict[str, int] = {}
        flat: list[int] = []  # token ids of all keys, key after key
        lengths: list[int] = []
        for key in keys:
            tokens = key_tokens(key)
            if not tokens:
                raise BadInput(f"key {clip(key)} has no word in it (letters or digits): rename the key or remove it")
            lengths.append(len(tokens))
            flat += [self.token_id.setdefault(t, len(self.token_id)) for t in tokens]
        self.tokens = list(self.token_id)  # G distinct tokens
        self.lengths = np.array(lengths, dtype=np.int64)  # (N,)
        self.flat = np.array(flat, dtype=np.int64)  # (T,) T tokens in all keys
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)  # (N,)

        # the n-gram side counts each distinct token of a key once: "color color" is no closer to
        # "colour" than "color" is
        self.first_use = self._first_uses()  # (T,) 1 where a token is new within its key, else 0
        # one hashing pass serves the overlap score (3-6-grams) and a model's subword vectors
        self.all_grams = ngram_hashes(self.tokens, min(NGRAM_MIN, hash_sizes[0]), max(NGRAM_MAX, hash_sizes[1]))
        self.grams = self.all_grams.only(NGRAM_MIN, NGRAM_MAX)  # every token has >= 1 3-6-gram
        self.key_gram_sizes = np.add.reduceat(self.grams.counts[self.flat] * self.first_use, self.starts)  # (N,)

    def query_vector(self, query: str, *, allow_no_vector: bool = False) -> tuple[list[str], np.ndarray]:
        raise NotImplementedError

    def check_query(self, query: str, *, allow_no_vector: bool = False) -> None:
        """BadInput if ``query`` cannot be scored (a batch checks every query before answering)."""
        self.query_vector(query, allow_no_vector=allow_no_vector)

    def _by_length(self):
        """(L, keys with L tokens, their token ids (n, L)) for each key length L."""
        for length in sorted(set(self.lengths.tolist())):  # not np.unique: it imports numpy.ma (10 ms)
            keys = np.flatnonzero(self.lengths == length)  # (n,)
            yield length, keys, self.flat[self.starts[keys][:, None] + np.arange(length)]  # (n, L)

    def _first_uses(self) -> np.ndarray:
        """(T,) int64 over the flat token list: 0 where the token already occurred in its key.

        The first index of each (key, token) pair, by one sort: O(T log T) whatever the keys'
        lengths (comparing each position with the ones before it was quadratic in a key's length).
        """
        out = np.zeros(len(self.flat), dtype=np.int64)
        if not len(self.flat):
            return out
        key_of = np.repeat(np.arange(len(self.lengths), dtype=np.int64), self.lengths)  # (T,)
        pair = key_of * (int(self.flat.max()) + 1) + self.flat  # (T,) one number per (key, token)
        _, first = np.unique(pair, return_index=True)
        out[first] = 1
        return out

    def ngram_scores(self, query_tokens: list[str]) -> np.ndarray:
        """(N,) Dice overlap of the query's character n-grams with each key's."""
        q = ngram_hashes(list(dict.fromkeys(query_tokens)), NGRAM_MIN, NGRAM_MAX).hashes  # a repeated token once
        qs = np.sort(q)  # (Q,); membership by binary search: np.isin and np.unique import numpy.ma (10 ms)
        at = np.minimum(np.searchsorted(qs, self.grams.hashes), max(len(qs) - 1, 0))  # (H,)
        hit = (qs[at] == self.grams.hashes).astype(np.int64) if len(qs) else np.zeros(len(self.grams.hashes), np.int64)
        per_token = np.add.reduceat(hit, self.grams.starts)  # (G,)
        overlap = np.add.reduceat(per_token[self.flat] * self.first_use, self.starts)  # (N,)
        overlap = np.minimum(overlap, len(q))  # two tokens of a key may both match the same n-gram of q
        return 2.0 * overlap / (len(q) + self.key_gram_sizes)

    def score(self, query: str, *, allow_no_vector: bool = False) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """(query tokens, cosine (N,), ngram (N,), similarity (N,))."""
        tokens, q = self.query_vector(query, allow_no_vector=allow_no_vector)
        cosine = np.clip(self.key_matrix @ q, -1.0, 1.0)  # (N, d) @ (d,) -> (N,)
        # the blend in float64: with a float32 cosine, (1 - 0.6) * 1.0 rounds to float32's 0.40000001
        # and a key scored 1.00000001 (> 1) in --json
        cosine = cosine.astype(np.float64)
        ngram = self.ngram_scores(tokens)
        lam = self.ngram_weight
        return tokens, cosine, ngram, (1.0 - lam) * cosine + lam * ngram


class KeyIndex(KeyTokens):
    """Embedded keys of one dictionary for one model; ``score(query)`` gives the similarities."""

    def __init__(self, vectors: Vectors, keys: list[str], *, ngram_weight: float = NGRAM_WEIGHT, center: bool = True):
        check_ngram_weight(ngram_weight)
        self.vectors = vectors
        self.name = vectors.name
        self.center = center
        # (d,) the direction every word shares; zero when centring is off
        self.mu = vectors.unit_vectors.mean(axis=0) if center else np.zeros(vectors.dim, dtype=np.float32)
        sub = vectors.subword or {"min_n": NGRAM_MIN, "max_n": NGRAM_MAX}
        super().__init__(keys, ngram_weight=ngram_weight, hash_sizes=(sub["min_n"], sub["max_n"]))
        missing: list[int] = []  # tokens with no vector at all (see missing_error)
        centred = unit_rows(embed_tokens(vectors, self.tokens, self.all_grams, missing=missing)) - self.mu  # (G, d)
        self.key_matrix = unit_rows(self._key_means(centred))  # (N, d)
        # A key with a token that has no vector has no c(key): its row is 0 (cosine 0). Such a key
        # is bad input for attention over the keys (missing_error, raised by lookup), but not for
        # an exact key, which answers like a dict whatever the other keys are.
        if missing:
            bad_token = np.zeros(len(self.tokens), dtype=np.int64)
            bad_token[missing] = 1
            vectorless = np.flatnonzero(np.add.reduceat(bad_token[self.flat], self.starts) > 0)  # key indices
            self.key_matrix[vectorless] = 0.0
            self.vectorless_keys = [keys[i] for i in vectorless.tolist()]
            first = self.vectorless_keys[0]
            word = next(t for t in key_tokens(first) if bad_token[self.token_id[t]])
            self.missing_error = BadInput(f"key {clip(first)}: {UnknownWord(word, vectors.name, has_subwords=vectors.has_subwords)}")

    def _key_means(self, token_vecs: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """(N, d): each key's mean token vector, summed column by column per key length (a long
        key in chunks of its tokens: linear time, bounded memory)."""
        out = np.empty((len(self.keys), token_vecs.shape[1]), dtype=np.float32)
        for length, keys, ids in self._by_length():
            if length > 64:
                for key in keys.tolist():
                    flat = self.flat[self.starts[key] : self.starts[key] + length]
                    acc = np.zeros(token_vecs.shape[1], dtype=np.float64)
                    for s in range(0, length, chunk):
                        acc += token_vecs[flat[s : s + chunk]].sum(axis=0, dtype=np.float64)
                    out[key] = acc / length
                continue
            acc = token_vecs[ids[:, 0]]  # (n, d), a copy (fancy indexing)
            for j in range(1, length):
                acc += token_vecs[ids[:, j]]
            out[keys] = acc / length
        return out

    def query_vector(self, query: str, *, allow_no_vector: bool = False) -> tuple[list[str], np.ndarray]:
        """The query's tokens and its (d,) unit vector c(query) / |c(query)|; with
        ``allow_no_vector`` (an exact key) a query with a word that has no vector gets 0."""
        tokens = tokenize(query)
        if not tokens:
            raise BadInput(f"the query {clip(query)} has no word in it (letters or digits) to look up")
        missing: list[int] | None = [] if allow_no_vector else None
        try:
            vecs = embed_tokens(self.vectors, tokens, missing=missing)  # (t, d)
        except UnknownWord as exc:
            raise BadInput(f"query {clip(query)}: {exc}") from None
        if missing:
            return tokens, np.zeros(self.vectors.dim, dtype=np.float32)
        q = unit_rows((unit_rows(vecs) - self.mu).mean(axis=0)[None, :])[0]  # (d,)
        return tokens, q
