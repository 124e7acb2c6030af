"""Training word vectors with gensim (word2vec or fastText) and storing them.

Word2vec (Mikolov et al. 2013, "Distributed Representations of Words and Phrases and their
Compositionality") learns one vector per vocabulary word. FastText (Bojanowski et al. 2017,
"Enriching Word Vectors with Subword Information") also learns vectors for hashed character
n-grams (``min_n``..``max_n`` characters, ``bucket`` hash rows), so a word never seen in training
(``colour`` is not in Brown) still gets a vector: the mean of its n-gram rows.

The core here knows nothing of Typer or rich: ``train_model`` takes a ``progress`` callable that
is called after each epoch with an :class:`EpochReport`.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from attncli import __version__
from attncli.errors import BadInput, RuntimeFailure
from attncli.vectors import store
from attncli.vectors.corpus import Corpus
from attncli.vectors.evaluate import evaluate_arrays
from attncli.vectors.model import load_vectors

ALGORITHMS = ("fasttext", "word2vec")
PRECISIONS = ("float16", "float32")
PROBE_WORDS = ("man", "city", "money", "good", "walked", "colour")

# Upper bounds of the numeric options (TrainParams.validate). Far above any useful value, low
# enough that gensim's C code cannot overflow and the tables fit in memory.
MAX_DIM = 10_000
MAX_WINDOW = 1_000
MAX_EPOCHS = 10_000
MAX_MIN_COUNT = 10**9
MAX_NEGATIVE = 1_000
MAX_WORKERS = 1_024
MAX_BUCKET = 100_000_000  # fastText's own default is 2M
MAX_NGRAM = 100  # --min-n, --max-n (characters)
MAX_NGRAM_CELLS = 1_000_000_000  # --bucket x --dim: the float32 n-gram table, 4 GiB


@dataclass
class TrainParams:
    """Every training option; the defaults are ``attn train``'s (chosen in docs/default-model.md)."""

    algorithm: str = "fasttext"
    dim: int = 100
    window: int = 10
    epochs: int = 20
    min_count: int = 5
    sg: bool = True
    negative: int = 5
    sample: float = 1e-4
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    seed: int = 1
    bucket: int = 50_000
    min_n: int = 5
    max_n: int = 6
    precision: str = "float16"

    def validate(self) -> None:
        """BadInput (exit 2) naming the option, for any value gensim would reject or misuse."""
        if self.algorithm not in ALGORITHMS:
            raise BadInput(f"unknown --algorithm {self.algorithm!r}: choose {' or '.join(ALGORITHMS)}")
        if self.precision not in PRECISIONS:
            raise BadInput(f"unknown --precision {self.precision!r}: choose {' or '.join(PRECISIONS)}")
        at_least_one = {
            "--dim": self.dim,
            "--window": self.window,
            "--epochs": self.epochs,
            "--min-count": self.min_count,
            "--negative": self.negative,
            "--workers": self.workers,
        }
        if self.algorithm == "fasttext":
            at_least_one.update({"--bucket": self.bucket, "--min-n": self.min_n, "--max-n": self.max_n})
        for option, value in at_least_one.items():
            if value < 1:
                raise BadInput(f"{option} must be at least 1, got {value}")
        if self.dim > MAX_DIM:
            raise BadInput(f"--dim {self.dim} is far too large for word vectors (at most {MAX_DIM:,}): use 50-300")
        # Upper bounds: gensim's C code overflows on huge integers (and a worker thread that dies
        # leaves training hung forever), and huge tables fail with MemoryError; refuse them here.
        at_most = {"--window": MAX_WINDOW, "--epochs": MAX_EPOCHS, "--min-count": MAX_MIN_COUNT,
                   "--negative": MAX_NEGATIVE, "--workers": MAX_WORKERS}
        if self.algorithm == "fasttext":
            at_most.update({"--bucket": MAX_BUCKET, "--min-n": MAX_NGRAM, "--max-n": MAX_NGRAM})
        for option, limit in at_most.items():
            value = at_least_one[option]
            if value > limit:
                raise BadInput(f"{option} must be at most {limit:,}, got {value}")
        if not 0 <= self.sample < 1:
            raise BadInput(f"--sample must be in [0, 1) (0 disables downsampling), got {self.sample}")
        if self.algorithm == "fasttext" and self.min_n > self.max_n:
            raise BadInput(f"--min-n ({self.min_n}) must not exceed --max-n ({self.max_n})")
        if self.algorithm == "fasttext" and self.bucket * self.dim > MAX_NGRAM_CELLS:
            raise BadInput(
                f"--bucket {self.bucket:,} x --dim {self.dim:,} = {self.bucket * self.dim:,} n-gram table cells "
                f"(at most {MAX_NGRAM_CELLS:,}, {MAX_NGRAM_CELLS * 4 / 2**30:.0f} GiB): lower --bucket or --dim"
            )
        if self.seed < 0 or self.seed >= 2**32:
            raise BadInput(f"--seed must be in [0, 2^32), got {self.seed}")

    def gensim_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the gensim constructor (bench_train.py uses the same)."""
        kwargs: dict[str, Any] = dict(
            vector_size=self.dim,
            window=self.window,
            epochs=self.epochs,
            min_count=self.min_count,
            sg=int(self.sg),
            hs=0,
            negative=self.negative,
            sample=self.sample,
            workers=self.workers,
            seed=self.seed,
        )
        if self.algorithm == "fasttext":
            kwargs.update(bucket=self.bucket, min_n=self.min_n, max_n=self.max_n)
        else:
            kwargs.update(compute_loss=True)
        return kwargs


@dataclass
class EpochReport:
    epoch: int  # 1-based
    epochs: int
    seconds: float
    words_per_s: float  # corpus tokens read per second (before downsampling and min-count)
    loss: float | None  # word2vec only: this epoch's loss (gensim's figure is cumulative)


@dataclass
class TrainResult:
    name: str
    meta: dict[str, Any]
    epochs: list[EpochReport]
    neighbours: dict[str, list[tuple[str, float]]]
    seconds: float  # wall time of the whole training: vocabulary, epochs, evaluation, storing

    def summary(self) -> dict[str, Any]:
        """The ``attn train --json`` document (stable keys)."""
        m = self.meta
        return {
            "model": self.name,
            "algorithm": m["algorithm"],
            "dim": m["dim"],
            "vocab_size": m["vocab_size"],
            "corpus": m["corpus"],
            "params": m["params"],
            "seconds": round(self.seconds, 3),
            "train_seconds": m["train_seconds"],
            "epochs": [
                {"epoch": e.epoch, "seconds": round(e.seconds, 3), "words_per_s": round(e.words_per_s), "loss": e.loss}
                for e in self.epochs
            ],
            "evaluation": m["evaluation"],
            "neighbours": {
                w: [{"word": n, "similarity": round(s, 4)} for n, s in ns] for w, ns in self.neighbours.items()
            },
        }


def default_name(corpus: Corpus, algorithm: str) -> str:
    """``brown-fasttext``, ``brown-word2vec``, or ``<file stem>-<algorithm>`` for a user's corpus."""
    if corpus.source == "brown":
        stem = "brown"
    else:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.splitext(os.path.basename(corpus.source))[0]).strip("-._")
        stem = stem[:40] or "corpus"
    return f"{stem}-{algorithm}"


def _epoch_callback(n_tokens: int, epochs: int, progress: Callable[[EpochReport], None] | None, reports: list):
    from gensim.models.callbacks import CallbackAny2Vec

    class EpochTimer(CallbackAny2Vec):
        def __init__(self):
            self.start = 0.0
            self.epoch = 0
            self.last_loss = 0.0

        def on_epoch_begin(self, model):
            self.start = time.perf_counter()

        def on_epoch_end(self, model):
            seconds = time.perf_counter() - self.start
            self.epoch += 1
            loss = None
            if getattr(model, "compute_loss", False):
                total = float(model.get_latest_training_loss())
                loss, self.last_loss = total - self.last_loss, total
            report = EpochReport(self.epoch, epochs, seconds, n_tokens / seconds if seconds > 0 else 0.0, loss)
            reports.append(report)
            if progress is not None:
                progress(report)

    return EpochTimer()


def build_model(corpus: Corpus, params: TrainParams):
    """An untrained gensim model with its vocabulary built; BadInput if the vocabulary is empty."""
    from gensim.models import FastText, Word2Vec

    kwargs = params.gensim_kwargs()
    model = (FastText if params.algorithm == "fasttext" else Word2Vec)(**kwargs)
    model.build_vocab(corpus_iterable=corpus.sentences)
    if len(model.wv) == 0:
        from collections import Counter

        top = Counter(t for s in corpus.sentences for t in s).most_common(1)
        most = f"its most frequent word, {top[0][0]!r}, occurs {top[0][1]} times" if top else "it has no words"
        raise BadInput(f"--min-count {params.min_count} leaves no vocabulary ({most}): lower --min-count")
    return model


def train_model(
    corpus: Corpus,
    params: TrainParams,
    *,
    name: str | None = None,
    progress: Callable[[EpochReport], None] | None = None,
    probes: tuple[str, ...] = PROBE_WORDS,
    started: float | None = None,
    force: bool = False,
) -> TrainResult:
    """Train, evaluate and store a model; the store is touched only once training has succeeded.

    Before any training, the store is checked to be writable, and a model ``name`` that holds
    trained attention (which new vectors would orphan) is refused unless ``force``.

    ``started`` (a ``time.perf_counter()`` value) lets the caller count corpus loading in the total.
    """
    import logging
    from datetime import datetime, timezone

    import numpy as np


    params.validate()
    name = store.check_new_name(name or default_name(corpus, params.algorithm))
    store.check_writable(name)
    store.check_replace(name, force=force)
    logging.getLogger("gensim").setLevel(logging.ERROR)  # gensim's INFO/WARNING chatter is not for users

    started = time.perf_counter() if started is None else started
    reports: list[EpochReport] = []
    try:
        model = build_model(corpus, params)
        timer = _epoch_callback(corpus.n_tokens, params.epochs, progress, reports)
        train_start = time.perf_counter()
        model.train(
            corpus_iterable=corpus.sentences,
            total_examples=model.corpus_count,
            total_words=model.corpus_total_words,
            epochs=params.epochs,
            compute_loss=params.algorithm == "word2vec",
            callbacks=[timer],
        )
    except MemoryError:
        raise RuntimeFailure(
            f"not enough memory to train {params.algorithm} with --dim {params.dim}"
            + (f" and --bucket {params.bucket}" if params.algorithm == "fasttext" else "")
            + ": lower them (or raise --min-count to shrink the vocabulary)"
        ) from None
    train_seconds = time.perf_counter() - train_start

    import gensim

    wv = model.wv
    words = list(wv.index_to_key)
    vectors = wv.vectors.astype(params.precision)  # (V, d); fastText: combined with n-grams
    ngrams = wv.vectors_ngrams.astype(params.precision) if params.algorithm == "fasttext" else None  # (B, d)
    counts = np.array([wv.get_vecattr(w, "count") for w in words], dtype=np.int64)  # (V,)
    evaluation = evaluate_arrays(words, vectors)
    meta = {
        "algorithm": params.algorithm,
        "params": asdict(params),
        "corpus": corpus.describe(),
        "corpus_label": corpus.label(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "train_seconds": round(train_seconds, 3),
        "evaluation": evaluation,
        "gensim_version": gensim.__version__,
        "attn_version": __version__,
    }
    subword = {"min_n": params.min_n, "max_n": params.max_n, "bucket": params.bucket} if ngrams is not None else None
    store.save_vectors(
        name, words, vectors, ngrams=ngrams, subword=subword, counts=counts, meta=meta, dtype=params.precision
    )
    stored = load_vectors(name)
    meta = stored.meta
    neighbours = {}
    for w in probes:
        if stored.can_embed(w):
            neighbours[w] = stored.most_similar(stored.vector(w), k=5, exclude={w})
    return TrainResult(name, meta, reports, neighbours, time.perf_counter() - started)
