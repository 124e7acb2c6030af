"""Helpers for the trained-attention tests: tiny vector models, random attention weights, tiny Brown."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from attncli.vectors import store

from attncli.tinylm import checkpoint, train as train_attention
from attncli.vectors.tokenize import normalize_sentence

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran after the cat",
    "time flies like an arrow",
    "fruit flies like a banana",
    "the old man saw the dog in the park",
]


def make_vectors(name: str, words: list[str], d: int = 16, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    store.save_vectors(name, sorted(set(words)), rng.normal(size=(len(set(words)), d)).astype(np.float32),
                       meta={"algorithm": "test", "corpus": "test"})


# The word-vector model the matrix views' tests use (--explain, the request's checks): 9 words, 12 dims.
VIEW_WORDS = "the time flies like an arrow fruit a banana".split()
VIEW_DIM = 12


def save_view_words(name: str = "tiny") -> str:
    """Store VIEW_WORDS as model NAME, random vectors drawn with seed 0 (test_matrix_cli.py's)."""
    rng = np.random.default_rng(0)
    store.save_vectors(name, VIEW_WORDS, rng.standard_normal((len(VIEW_WORDS), VIEW_DIM)).astype(np.float32))
    return name


def step_values(steps: list[dict]) -> dict:
    """An explanation's steps as {name: value}."""
    return {s["name"]: s["value"] for s in steps}


def widest(config) -> int:
    """A trained attention model's widest float32 reduction (tests/_tolerance.py's ``length``): its
    width or its MLP's."""
    return max(config["d_model"], config["d_ff"])


def random_config(d: int, layers: int, heads: int, n_out: int) -> dict:
    return {
        "format": checkpoint.FORMAT, "format_version": checkpoint.FORMAT_VERSION, "d_model": d, "layers": layers,
        "heads": heads, "d_ff": 4 * d, "output_vocab_size": n_out, "positions": "sinusoidal",
        "norm": "pre-layernorm", "activation": "gelu_tanh", "layer_norm_eps": 1e-5, "max_len_trained": 80,
    }


def make_random_attention(name: str, *, layers: int = 2, heads: int = 4, d: int = 16, seed: int = 0, scale: float = 0.6):
    """Vectors for SENTENCES' words plus random (far from uniform) attention weights, stored as ``name``."""
    words = sorted({w for s in SENTENCES for w in s.split()})
    make_vectors(name, words, d, seed)
    out_words = words[:10] + ["<unk>", "</s>"]
    config = random_config(d, layers, heads, len(out_words))
    rng = np.random.default_rng(seed + 1)
    weights = {}
    for key, shape in checkpoint.expected_shapes(config).items():
        w = rng.normal(scale=scale, size=shape)
        if ".ln" in key or key.startswith("final_ln"):
            w = (1.0 if key.endswith("weight") else 0.0) + 0.1 * w
        weights[key] = w.astype(np.float32)
    src = store.model_dir(name)
    meta = store.read_meta(src)
    train_attention.save(name, src, config, weights, out_words, SENTENCES, dict(meta, attention={"perplexity": 1.0}))
    return config, weights


@lru_cache(maxsize=1)
def _tiny_brown() -> tuple:
    from nltk.corpus import brown

    docs = []
    for fileid in brown.fileids()[::50]:  # 10 documents across the genres
        sents = [normalize_sentence(list(s)) for s in brown.sents(fileid)[:40]]
        docs.append((fileid, tuple(tuple(s) for s in sents if s)))
    return tuple(docs)


def tiny_brown() -> list[tuple[str, list[list[str]]]]:
    """10 Brown documents of at most 40 sentences each (400 sentences); the calling test skips where
    Brown is missing and cannot be downloaded (fails under CI: conftest.skip_without_brown)."""
    from conftest import skip_without_brown

    skip_without_brown()
    return [(f, [list(s) for s in sents]) for f, sents in _tiny_brown()]


def tiny_brown_model(name: str, d: int = 16) -> None:
    make_vectors(name, [w for _, sents in tiny_brown() for s in sents for w in s], d)
