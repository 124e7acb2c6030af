"""fastText character n-gram hashes for many tokens at once, vectorised with NumPy.

``attncli.subword`` hashes one word at a time in plain Python (about 30 us a word): fine for a
query, too slow for a dictionary of 100,000 made-up keys. This module computes the same hashes
(32-bit FNV-1a over the UTF-8 bytes of each n-gram of ``<token>``, as gensim's
``ft_ngram_hashes`` before the ``% bucket``) for a whole list of tokens:

* ASCII tokens are grouped by length; for a group of g tokens of length L the FNV states of all
  start positions are advanced together, one byte at a time, over a (g, L+2) byte matrix: max_n
  array operations per group, whatever g and L are.
* Other tokens (UTF-8 n-grams count characters, not bytes) go through ``subword`` one by one.

The result is a ragged array in CSR form: ``hashes[starts[t] : starts[t] + counts[t]]`` are the
n-gram hashes of token t, duplicates kept (gensim averages over duplicates too). The order of
the hashes within a token is not gensim's; sums, means and overlaps do not depend on it.
tests/test_lookup.py checks the hashes against ``subword`` and gensim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.subword import ft_hash, ngrams_bytes

_FNV_OFFSET = np.uint32(2166136261)
_FNV_PRIME = np.uint32(16777619)


@dataclass
class NgramHashes:
    hashes: np.ndarray  # (H,) uint32, all tokens' n-gram hashes, token after token
    starts: np.ndarray  # (G,) int64 offset of each token's first hash
    counts: np.ndarray  # (G,) int64 number of n-grams of each token

    def select(self, tokens: np.ndarray) -> "NgramHashes":
        """The CSR rows of the given token indices only, in that order."""
        counts = self.counts[tokens]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        # flat index: for each selected token, its old start plus 0..count-1
        idx = np.repeat(self.starts[tokens] - starts, counts) + np.arange(int(counts.sum()))
        return NgramHashes(self.hashes[idx], starts, counts)


def _ascii_group(words: list[str], min_n: int, max_n: int) -> np.ndarray:
    """(g, M) uint32 hashes of same-length ASCII words; M n-grams per word.

    After step n, ``h[:, i]`` is the FNV state of the n bytes starting at i (shape (g, W-n+1)):
    step n+1 folds in byte i+n for every start i at once, so a group costs max_n array
    operations however many words it has and however long they are.
    """
    framed = np.frombuffer("".join(f"<{w}>" for w in words).encode("ascii"), dtype=np.uint8)
    width = len(words[0]) + 2
    B = framed.reshape(len(words), width).astype(np.uint32)  # (g, W)
    h = np.full((len(words), width), _FNV_OFFSET, dtype=np.uint32)  # (g, W)
    cols = []
    with np.errstate(over="ignore"):
        for n in range(1, min(max_n, width) + 1):
            h = (h[:, : width - n + 1] ^ B[:, n - 1 :]) * _FNV_PRIME  # (g, W-n+1), wraps mod 2^32
            if n >= min_n:
                cols.append(h[:, 1:-1] if n == 1 else h)  # a lone '<' or '>' is not an n-gram
    if not cols:
        return np.zeros((len(words), 0), dtype=np.uint32)
    return np.concatenate(cols, axis=1)  # (g, M)


def ngram_hashes(tokens: list[str], min_n: int, max_n: int) -> NgramHashes:
    """The fastText n-gram hashes of every token (see the module docstring)."""
    n_tok = len(tokens)
    per_token: dict[int, np.ndarray] = {}
    groups: dict[int, list[int]] = {}
    for t, word in enumerate(tokens):
        if word.isascii():
            groups.setdefault(len(word), []).append(t)
        else:
            per_token[t] = np.array([ft_hash(g) for g in ngrams_bytes(word, min_n, max_n)], dtype=np.uint32)
    group_hashes = {length: _ascii_group([tokens[t] for t in idx], min_n, max_n) for length, idx in groups.items()}
    counts = np.zeros(n_tok, dtype=np.int64)
    for length, idx in groups.items():
        counts[idx] = group_hashes[length].shape[1]
    for t, h in per_token.items():
        counts[t] = len(h)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if n_tok else np.zeros(0, np.int64)
    hashes = np.empty(int(counts.sum()), dtype=np.uint32)
    for length, idx in groups.items():
        H = group_hashes[length]  # (g, M)
        if H.shape[1]:
            pos = starts[idx][:, None] + np.arange(H.shape[1])  # (g, M)
            hashes[pos] = H
    for t, h in per_token.items():
        hashes[starts[t] : starts[t] + len(h)] = h
    return NgramHashes(hashes, starts, counts)


def subword_vectors(ngrams: np.ndarray, hashed: NgramHashes, bucket: int, chunk_rows: int = 65_536) -> np.ndarray:
    """(G, d) float32: each token's mean n-gram row (gensim's vector of an unknown word).

    Tokens with the same number M of n-grams are averaged together as one (g, M, d) array, in
    chunks of about ``chunk_rows`` rows so that memory stays bounded. A token without any
    n-gram gets a zero row; the caller decides what that means.
    """
    n_tok, d = len(hashed.counts), ngrams.shape[1]
    out = np.zeros((n_tok, d), dtype=np.float32)
    rows = (hashed.hashes % np.uint32(bucket)).astype(np.int64)  # (H,)
    for m in np.unique(hashed.counts).tolist():
        if m == 0:
            continue
        tokens = np.flatnonzero(hashed.counts == m)
        if m > chunk_rows // 8:  # a very long token: count its rows, one (B,) @ (B, d) product
            for t in tokens.tolist():
                seg = rows[hashed.starts[t] : hashed.starts[t] + m]
                counts = np.bincount(seg, minlength=bucket).astype(np.float32)  # (B,)
                out[t] = (counts @ np.asarray(ngrams, dtype=np.float32)) / m  # (B,) @ (B, d) -> (d,)
            continue
        step = max(1, chunk_rows // int(m))
        for lo in range(0, len(tokens), step):
            part = tokens[lo : lo + step]  # (g,)
            idx = rows[hashed.starts[part][:, None] + np.arange(m)]  # (g, M)
            out[part] = np.asarray(ngrams[idx], dtype=np.float32).mean(axis=1)  # (g, M, d) -> (g, d)
    return out
