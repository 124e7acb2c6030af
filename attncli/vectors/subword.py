"""fastText's character n-grams and their hashes, in plain Python (no gensim import).

``attn lookup`` must build an unknown word's vector from its n-grams without importing gensim
(1-2 s), so this module reimplements the two small functions gensim uses:
``gensim.models.fasttext_inner.compute_ngrams_bytes`` and ``ft_hash_bytes`` (Facebook's
fastText ``Dictionary::hash``: 32-bit FNV-1a over the UTF-8 bytes, each byte sign-extended as a
C ``int8``). tests/vectors/test_subword.py checks both against gensim's own results.
"""

from __future__ import annotations

from attncli.io.textio import check_word_length

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619
_MASK32 = 0xFFFFFFFF


def ngrams_bytes(word: str, min_n: int, max_n: int) -> list[bytes]:
    """The character n-grams of ``<word>`` (n from min_n to max_n characters), as UTF-8 bytes.

    Lengths count characters, not bytes: a continuation byte (10xxxxxx) never starts or ends
    an n-gram. The lone boundary symbols ``<`` and ``>`` are not n-grams.
    """
    utf8 = f"<{word}>".encode("utf-8")
    num_bytes = len(utf8)
    out: list[bytes] = []
    for i in range(num_bytes):
        if utf8[i] & 0xC0 == 0x80:
            continue
        j, n = i, 1
        while j < num_bytes and n <= max_n:
            j += 1
            while j < num_bytes and utf8[j] & 0xC0 == 0x80:
                j += 1
            if n >= min_n and not (n == 1 and (i == 0 or j == num_bytes)):
                out.append(utf8[i:j])
            n += 1
    return out


def ft_hash(data: bytes) -> int:
    """fastText's FNV-1a variant: bytes >= 0x80 are sign-extended first (C ``int8`` to uint32)."""
    h = _FNV_OFFSET
    for b in data:
        if b >= 0x80:
            b |= 0xFFFFFF00  # sign extension of an int8 to 32 bits
        h = ((h ^ b) * _FNV_PRIME) & _MASK32
    return h


def ngram_buckets(word: str, min_n: int, max_n: int, bucket: int) -> list[int]:
    """Row indices into the n-gram table for ``word`` (gensim's ``ft_ngram_hashes``); BadInput for
    a word longer than textio.MAX_WORD_CHARS."""
    check_word_length(word)
    return [ft_hash(g) % bucket for g in ngrams_bytes(word, min_n, max_n)]
