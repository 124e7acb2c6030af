"""attncli.vectors.subword against gensim's own n-gram and hash functions (the oracle)."""

from __future__ import annotations

import pytest
from conftest import needed
from hypothesis import given, settings
from hypothesis import strategies as st

from attncli.vectors.subword import ft_hash, ngram_buckets, ngrams_bytes

gensim_inner = needed("gensim.models.fasttext_inner")
gensim_ft = needed("gensim.models.fasttext")

WORDS = [
    "colour", "a", "I", "it's", "self-confidence", "1960", "x",  # ASCII
    "café", "naïve", "straße", "Ελλάδα", "москва", "日本語", "🙂", "e\u0301", "ǅemal", "ﬁ",  # not ASCII
]
NGRAM_RANGES = [(3, 6), (1, 1), (1, 3), (2, 4), (4, 6), (5, 5), (3, 12)]


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize(("min_n", "max_n"), NGRAM_RANGES)
def test_ngrams_match_gensim(word, min_n, max_n):
    assert ngrams_bytes(word, min_n, max_n) == gensim_inner.compute_ngrams_bytes(word, min_n, max_n)


@pytest.mark.parametrize("word", WORDS)
def test_hash_matches_gensim(word):
    for gram in [word.encode("utf-8")] + gensim_inner.compute_ngrams_bytes(word, 1, 6):
        assert ft_hash(gram) == gensim_inner.ft_hash_bytes(gram)


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("bucket", [1, 7, 50_000, 2_000_000])
def test_buckets_match_gensim(word, bucket):
    assert ngram_buckets(word, 3, 6, bucket) == list(gensim_ft.ft_ngram_hashes(word, 3, 6, bucket))


def test_non_ascii_bytes_are_sign_extended():
    """A byte >= 0x80 enters FNV-1a as a sign-extended int8 (fastText's quirk): the hash differs
    from the textbook FNV-1a on that byte, and gensim agrees with us, not with the textbook."""
    data = "é".encode("utf-8")
    textbook = 2166136261
    for b in data:
        textbook = ((textbook ^ b) * 16777619) & 0xFFFFFFFF
    assert ft_hash(data) == gensim_inner.ft_hash_bytes(data)
    assert ft_hash(data) != textbook
    assert ft_hash(b"abc") == gensim_inner.ft_hash_bytes(b"abc")


def test_ngram_lengths_count_characters_not_bytes():
    grams = ngrams_bytes("日本", 1, 1)  # "<日本>": single characters, the boundary symbols excluded
    assert grams == ["日".encode(), "本".encode()]


@settings(max_examples=300, deadline=None)
@given(
    word=st.text(min_size=1, max_size=12, alphabet=st.characters(blacklist_categories=("Cs",))),
    min_n=st.integers(1, 6),
    span=st.integers(0, 4),
)
def test_property_matches_gensim(word, min_n, span):
    max_n = min_n + span
    assert ngrams_bytes(word, min_n, max_n) == gensim_inner.compute_ngrams_bytes(word, min_n, max_n)
    assert ngram_buckets(word, min_n, max_n, 50_000) == list(gensim_ft.ft_ngram_hashes(word, min_n, max_n, 50_000))
