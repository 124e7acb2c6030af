"""What a worker does with a chunk of texts: the model loaded once (checked to be the files the run
started on), each text's attention patterns read through one seam (:func:`patterns`, the traced
pass when the model can trace), the chunk's sums returned as a shard document. Used alike here,
in local worker processes (``runner.py``) and in Ray actors (``cluster.py``).

Shapes: L layers, h heads, T tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from attncli.model.interface import has
from attncli.errors import RuntimeFailure
from attncli.io.fileio import FileProblem
from attncli.stats.accumulate import Accumulator, Settings, add_probe, add_text, probe_ids
from attncli.stats.shards import Identity, model_fingerprint, texts_digest, to_document
from attncli.hf import load as load_transformer
from attncli.hf.text.encoding import Encoding
from attncli.hf.families import registry
from attncli.hf.backends.pretrained_base import length_batches

BATCH_SIZE = 8  # texts per forward pass by default (measured best on MiniLM, 8-24 word texts)
BATCH_BUDGET = 2**24  # kept attention weights (L B h T^2) per pass: 128 MB in float64; a longer text runs alone
PATTERNS = "blocks.*.attn.pattern"


def each_pattern(model, encs: Sequence[Encoding], *, batch_size: int = BATCH_SIZE,
                 precision: str = "float64") -> Iterator[tuple[int, np.ndarray]]:
    """(i, attention patterns of ``encs[i]``, (L, h, T, T)) for every encoding, a batch at a time:
    the one place the statistics read a model. The NumPy path (``trace_batch``) runs texts of
    similar length together (sorted by length, at most ``batch_size`` and BATCH_BUDGET a pass,
    padded and masked); another model that traces runs each text alone (``trace``); else its
    ``attentions``. ``precision`` is the NumPy pass's."""
    if has(model, "batch"):
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        for batch in length_batches([len(encs[i].ids) for i in order], model.heads * model.layers, batch_size, BATCH_BUDGET):
            rows = [order[j] for j in batch]
            for i, trace in zip(rows, model.trace_batch([encs[i] for i in rows], PATTERNS, precision=precision)):
                yield i, trace.stack("attn.pattern", model.layers)
    elif has(model, "trace"):
        for i, enc in enumerate(encs):
            yield i, model.trace(enc, keep=PATTERNS).stack("attn.pattern", model.layers)
    else:
        for i, enc in enumerate(encs):
            yield i, model.attentions(enc)


def patterns(model, encs: Sequence[Encoding], **how: Any) -> list[np.ndarray]:
    """Each encoding's attention patterns, (L, h, T, T), in order (see :func:`each_pattern`)."""
    out: list[Any] = [None] * len(encs)
    for i, A in each_pattern(model, encs, **how):
        out[i] = A
    return out


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads the model the run was started on."""
    name: str
    backend: str = "auto"
    allow_missing_weights: bool = False
    batch_size: int = BATCH_SIZE  # texts per forward pass (the NumPy path)


def identity(model) -> Identity:
    try:
        fingerprint = model_fingerprint(model.path)
    except FileProblem as exc:
        raise RuntimeFailure(f"model '{model.name}': a file cannot be read to fingerprint it: {exc}") from None
    return Identity({"name": str(model.name), "fingerprint": fingerprint, "model_type": model.model_type,
                     "layers": int(model.layers), "heads": int(model.heads), "causal": bool(model.is_decoder)},
                    {})


def sliding_windows(config: dict[str, Any], layers: int) -> list[Optional[int]]:
    """(L,) each layer's sliding window (a query sees the keys less than W positions back), or None:
    from the config as the forward pass reads it (the family's description, hf/families/registry.windows),
    None for the families without one."""
    return registry.windows(config, layers)


class ChunkWork:
    """A loaded model and what a chunk needs from it (the probe's vocabulary, once)."""

    def __init__(self, model, settings: Settings, ident: Identity, batch_size: int = BATCH_SIZE):
        self.model, self.settings, self.ident, self.batch_size = model, settings, ident, batch_size
        self.causal = bool(model.is_decoder)
        self.prefix: list[int] = []
        if self.causal:
            enc = model.encode("a")
            for i, special in zip(enc.ids, enc.special):
                if not special:
                    break
                self.prefix.append(int(i))
        config = model.config
        self.windows = sliding_windows(config, model.layers)
        self.vocab = model.vocab_size
        self.exclude = set(self.prefix) | set(model.special_ids)

    def compute(self, start: int, texts: Sequence[str]) -> dict[str, Any]:
        """The shard document of texts [start, start + len(texts))."""
        model, s = self.model, self.settings
        acc = Accumulator(model.layers, model.heads, s.top_k)
        how = dict(batch_size=self.batch_size, precision=s.precision)
        encs = [model.encode(t, truncate=True) for t in texts]
        for offset, A in each_pattern(model, encs, **how):  # by length: sums and top K do not depend on order
            enc = encs[offset]
            acc.texts += 1
            acc.tokens += len(enc.ids)
            add_text(acc, A, text_id=start + offset, tokens=enc.tokens, ids=enc.ids, special=enc.special,
                     causal=self.causal, windows=self.windows)
        if self.causal and self.vocab:
            probes = [probe_ids(i, s, self.prefix, self.vocab, self.exclude, model.max_positions)
                      for i in range(start, start + len(texts)) if i % s.probe_every == 0]
            probes = [Encoding(ids=ids, tokens=[""] * len(ids), segments=[None] * len(ids), special=[False] * len(ids),
                               word_ids=[None] * len(ids), words=[], type_ids=[0] * len(ids), text="")
                      for ids in probes if ids]
            for i, A in each_pattern(model, probes, **how):
                add_probe(acc, A, probes[i].ids)
        return to_document(acc, self.ident, start, start + len(texts), texts_digest(texts))


def load_work(spec: ModelSpec, settings: Settings, ident: Identity) -> ChunkWork:
    """A worker's model, checked to be the same files the run was started on."""
    model = load_transformer(spec.name, backend=spec.backend, allow_missing_weights=spec.allow_missing_weights)
    mine = identity(model).model["fingerprint"]
    if mine != ident.model["fingerprint"]:
        raise RuntimeFailure(f"the model '{spec.name}' a worker loaded is not the one the run started on "
                             "(another copy or version on that machine)")
    return ChunkWork(model, settings, ident, spec.batch_size)


def bounded(items: Iterable[tuple[int, list[str]]], submit: Callable[[int, list[str]], Any],
            get: Callable[[Any], dict[str, Any]], inflight: int) -> Iterator[dict[str, Any]]:
    """Each chunk submitted, at most ``inflight`` at a time, results in submission order."""
    queue: deque = deque()
    for start, texts in items:
        queue.append(submit(start, texts))
        if len(queue) >= inflight:
            yield get(queue.popleft())
    while queue:
        yield get(queue.popleft())
