"""fastText character n-gram hashes for many tokens at once, vectorised with NumPy.

``attncli.vectors.subword`` hashes one word at a time in plain Python (about 30 us a word): fine for a
query, too slow for a dictionary of 100,000 made-up keys. This module computes the same hashes
(32-bit FNV-1a over the UTF-8 bytes of each n-gram of ``<token>``, as gensim's
``ft_ngram_hashes`` before the ``% bucket``) for a whole list of tokens:

* Tokens are grouped by length in characters (fastText's n-grams count characters, not bytes);
  for a group of g tokens of length L the FNV states of all start positions are advanced
  together over a (g, L+2) matrix of code points, folding in each character's 1 to 4 UTF-8
  bytes: about max_n array operations per group, whatever g and L are.

The result is a ragged array in CSR form: ``hashes[starts[t] : starts[t] + counts[t]]`` are the
n-gram hashes of token t, duplicates kept (gensim averages over duplicates too). The order of
the hashes within a token is not gensim's; sums, means and overlaps do not depend on it.
tests/lookup/test_lookup.py checks the hashes against ``subword`` and gensim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncli.io.textio import check_word_length

_FNV_OFFSET = np.uint32(2166136261)
_FNV_PRIME = np.uint32(16777619)


@dataclass
class NgramHashes:
    hashes: np.ndarray  # (H,) uint32, all tokens' n-gram hashes, token after token
    starts: np.ndarray  # (G,) int64 offset of each token's first hash
    counts: np.ndarray  # (G,) int64 number of n-grams of each token
    sizes: np.ndarray  # (H,) uint8 the length n (characters) of each hash's n-gram
    min_n: int  # the n-gram lengths hashed
    max_n: int

    def select(self, tokens: np.ndarray) -> "NgramHashes":
        """The CSR rows of the given token indices only, in that order."""
        counts = self.counts[tokens]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        # flat index: for each selected token, its old start plus 0..count-1
        idx = np.repeat(self.starts[tokens] - starts, counts) + np.arange(int(counts.sum()))
        return NgramHashes(self.hashes[idx], starts, counts, self.sizes[idx], self.min_n, self.max_n)

    def only(self, min_n: int, max_n: int) -> "NgramHashes":
        """The same tokens with only their n-grams of min_n to max_n characters."""
        if not (self.min_n <= min_n <= max_n <= self.max_n):
            raise ValueError(f"n-grams {min_n}-{max_n} are not within the hashed {self.min_n}-{self.max_n}")
        keep = (self.sizes >= min_n) & (self.sizes <= max_n)  # (H,)
        kept_before = np.concatenate([[0], np.cumsum(keep)])  # (H+1,)
        counts = kept_before[self.starts + self.counts] - kept_before[self.starts]  # (G,)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        return NgramHashes(self.hashes[keep], starts, counts.astype(np.int64), self.sizes[keep], min_n, max_n)


def _utf8_bytes(cps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of code points (g, W): (4, g, W) uint32, sign-extended like a C int8, and
    (g, W) the number of bytes of each character (1 to 4)."""
    nbytes = 1 + (cps >= 0x80).astype(np.uint32) + (cps >= 0x800) + (cps >= 0x10000)  # (g, W)
    cont = lambda shift: 0x80 | ((cps >> shift) & 0x3F)  # noqa: E731  a continuation byte
    lead = np.select([nbytes == 1, nbytes == 2, nbytes == 3], [cps, 0xC0 | (cps >> 6), 0xE0 | (cps >> 12)], 0xF0 | (cps >> 18))
    second = np.select([nbytes == 2, nbytes == 3], [cont(0), cont(6)], cont(12))
    third = np.where(nbytes == 3, cont(0), cont(6))
    out = np.stack([lead, second, third, cont(0)]).astype(np.uint32)  # (4, g, W)
    out[out >= 0x80] |= np.uint32(0xFFFFFF00)
    return out, nbytes


def _group_hashes(words: list[str], min_n: int, max_n: int) -> tuple[np.ndarray, np.ndarray]:
    """(g, M) uint32 hashes of words of the same length in characters, M n-grams per word, and
    (M,) the length n of each column's n-gram.

    After step n, ``h[:, i]`` is the FNV state of the n characters starting at character i
    (shape (g, W-n+1)): step n+1 folds in the bytes of character i+n for every start i at
    once, so a group costs max_n (times bytes per character) array operations, however many
    words it has and however long they are.
    """
    framed = "".join(f"<{w}>" for w in words)
    width = len(words[0]) + 2
    cps = np.frombuffer(framed.encode("utf-32-le"), dtype=np.uint32).reshape(len(words), width)  # (g, W)
    if framed.isascii():
        utf8, nbytes, widest = cps[None], None, 1  # (1, g, W)
    else:
        utf8, nbytes = _utf8_bytes(cps)
        widest = int(nbytes.max())
    h = np.full((len(words), width), _FNV_OFFSET, dtype=np.uint32)  # (g, W)
    cols, sizes = [], []
    with np.errstate(over="ignore"):
        for n in range(1, min(max_n, width) + 1):
            h = h[:, : width - n + 1]
            for k in range(widest):  # byte k of character i+n-1, where that character has one
                step = (h ^ utf8[k][:, n - 1 :]) * _FNV_PRIME  # uint32 arithmetic wraps mod 2^32
                h = step if k == 0 else np.where(nbytes[:, n - 1 :] > k, step, h)
            if n >= min_n:
                cols.append(h[:, 1:-1] if n == 1 else h)  # a lone '<' or '>' is not an n-gram
                sizes.append(np.full(cols[-1].shape[1], n, dtype=np.uint8))
    if not cols:
        return np.zeros((len(words), 0), dtype=np.uint32), np.zeros(0, dtype=np.uint8)
    return np.concatenate(cols, axis=1), np.concatenate(sizes)  # (g, M), (M,)


def ngram_hashes(tokens: list[str], min_n: int, max_n: int) -> NgramHashes:
    """The fastText n-gram hashes of every token (see the module docstring); BadInput for a token
    longer than textio.MAX_WORD_CHARS."""
    for word in tokens:
        check_word_length(word)
    n_tok = len(tokens)
    groups: dict[int, list[int]] = {}
    for t, word in enumerate(tokens):
        groups.setdefault(len(word), []).append(t)
    group_hashes = {length: _group_hashes([tokens[t] for t in idx], min_n, max_n) for length, idx in groups.items()}
    counts = np.zeros(n_tok, dtype=np.int64)
    for length, idx in groups.items():
        counts[idx] = group_hashes[length][0].shape[1]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if n_tok else np.zeros(0, np.int64)
    hashes = np.empty(int(counts.sum()), dtype=np.uint32)
    sizes = np.empty(int(counts.sum()), dtype=np.uint8)
    for length, idx in groups.items():
        H, ns = group_hashes[length]  # (g, M), (M,)
        if H.shape[1]:
            pos = starts[idx][:, None] + np.arange(H.shape[1])  # (g, M)
            hashes[pos] = H
            sizes[pos] = ns
    return NgramHashes(hashes, starts, counts, sizes, min_n, max_n)


def subword_vectors(ngrams: np.ndarray, hashed: NgramHashes, bucket: int, chunk_rows: int = 65_536) -> np.ndarray:
    """(G, d) float32: each token's mean n-gram row (gensim's vector of an unknown word).

    Tokens with the same number M of n-grams are averaged together as one (g, M, d) array, in
    chunks of about ``chunk_rows`` rows so that memory stays bounded. A token without any
    n-gram gets a zero row; the caller decides what that means.
    """
    n_tok, d = len(hashed.counts), ngrams.shape[1]
    out = np.zeros((n_tok, d), dtype=np.float32)
    rows = (hashed.hashes % np.uint32(bucket)).astype(np.int64)  # (H,)
    for m in sorted(set(hashed.counts.tolist())):  # not np.unique: it imports numpy.ma (10 ms of start-up)
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
