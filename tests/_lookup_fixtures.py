"""Small stored models for the lookup tests (built in the per-test ATTN_HOME in milliseconds).

``fasttext_like``: random word parts and a random n-gram table, combined the way fastText does
it (a vocabulary word's stored vector is the mean of its own row and its n-gram rows), so an
unknown word like ``colour`` gets a subword vector that shares most of its n-grams with
``color``. ``plain``: the same words without an n-gram table (word2vec-like: unknown words fail).

``transformers_poolings``: the reference for an encoder's sentence embeddings, each pooling by its
formula over transformers' own last hidden state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import needed

from attncli.vectors import store
from attncli.vectors.subword import ngram_buckets

WORDS = (
    "the a of and brand model color top speed price power horsepower battery range weight seats "
    "torque acceleration charging time maker paint"
).split()
DIM = 16
BUCKET = 2000
SUBWORD = {"min_n": 3, "max_n": 6, "bucket": BUCKET}


def save_fasttext_like(name: str = "tiny", *, seed: int = 0, words: list[str] = WORDS) -> None:
    rng = np.random.default_rng(seed)
    ngrams = rng.standard_normal((BUCKET, DIM)).astype(np.float32)
    own = rng.standard_normal((len(words), DIM)).astype(np.float32)
    vectors = np.empty_like(own)
    for i, w in enumerate(words):
        rows = ngram_buckets(w, 3, 6, BUCKET)
        vectors[i] = (own[i] + ngrams[rows].sum(axis=0)) / (len(rows) + 1)
    store.save_vectors(name, list(words), vectors, ngrams=ngrams, subword=SUBWORD, meta={"algorithm": "test"})


def save_plain(name: str = "plain", *, seed: int = 0, words: list[str] = WORDS) -> None:
    rng = np.random.default_rng(seed)
    store.save_vectors(name, list(words), rng.standard_normal((len(words), DIM)).astype(np.float32), meta={"algorithm": "test"})


def save_axes(name: str = "axes") -> list[str]:
    """Words whose vectors are the coordinate axes: cosines are 0 or 1, easy to work by hand."""
    words = ["brand", "model", "color", "other"]
    store.save_vectors(name, words, np.eye(4, dtype=np.float32), meta={"algorithm": "test"})
    return words


def transformers_poolings(model_dir: Path, texts: list[str]) -> dict[str, np.ndarray]:
    """Each of sentence-transformers' poolings, by its formula over transformers' own last hidden
    state in float64 (the reference for attn's ``pool``): name -> (n, d)."""
    torch = needed("torch")
    transformers = needed("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.double()  # (n, T, d)
    mask = batch["attention_mask"].unsqueeze(-1).double()  # (n, T, 1)
    total, count = (hidden * mask).sum(1), mask.sum(1)  # (n, d), (n, 1)
    return {"cls": hidden[:, 0].numpy(), "max": hidden.masked_fill(mask == 0, -torch.inf).max(1).values.numpy(),
            "mean": (total / count).numpy(), "mean_sqrt_len": (total / count.sqrt()).numpy()}
