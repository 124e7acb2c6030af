"""Per-head statistics as sums and counts, so that any split of a corpus merges exactly.

Shapes: L layers, h heads, T tokens of one text, n scored queries, K examples kept per head.
A text's attention A is (L, h, T, T), row = query i, column = key j. The queries scored are the
text's non-special tokens that see at least two keys (``attncli.attention.heads``' rule, shared
with ``attn heads``); each statistic is a mean over those queries, kept as a sum per head and one
count:

    sink             A[i, 0]                                  mass on the first token
    entropy          -sum_j A[i, j] log A[i, j] / log(visible keys of i)     0 = one key, 1 = even
    distance         sum_j A[i, j] |i - j|                    mean distance to the keys, in tokens
    previous_token   A[i, i-1]
    duplicate_token  sum_j A[i, j] over earlier j with token_j == token_i (an encoder: any j != i);
                     only queries that have such a key count
    induction        sum_j A[i, j] over j with token_{j-1} == token_i, on the probe (decoders only)

The probe is a separate input: a sequence of distinct random token ids repeated twice (after the
model's leading special tokens), drawn for every ``probe_every``-th text index from a generator
seeded by (seed, text index), so a text range always brings the same probes wherever it runs.

For sink, previous_token and duplicate_token each head also keeps its top K (score, text index,
query position, context) over the queries it scored; ties go to the lower text index, then the
lower position, so any merge order selects the same K.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from attncli.attention.heads import row_scores, scored_rows

STATS_VERSION = 1  # the definitions above; a change makes old shards refuse to merge with new ones
MAX_TOP_K = 100  # examples kept per head and statistic (attn stats --top-k)
STATS = ("sink", "entropy", "distance", "previous_token", "duplicate_token", "induction")
TOP_STATS = ("sink", "previous_token", "duplicate_token")
_HEADS_NAME = {"sink": "first_token", "entropy": "entropy", "previous_token": "previous_token",
               "duplicate_token": "duplicate_token", "induction": "induction"}
CONTEXT_BEFORE, CONTEXT_AFTER, PIECE_CHARS = 8, 2, 24  # a context: tokens around the query, each cut


@dataclass(frozen=True)
class Settings:
    """What a statistic's value depends on besides the model and the texts: shards made with
    other settings do not merge."""
    top_k: int = 5
    probe_every: int = 4  # a probe for text indices 0, N, 2N, ...
    probe_length: int = 20  # random tokens per half of a probe
    seed: int = 0
    precision: str = "float32"  # the NumPy pass's weights (attention weights within float32 rounding of float64's: docs/stats.md)

    def as_dict(self) -> dict[str, Any]:
        return {"top_k": self.top_k, "probe_every": self.probe_every, "probe_length": self.probe_length,
                "seed": self.seed, "precision": self.precision}


def context(tokens: Sequence[str], position: int) -> str:
    """The tokens around ``position``, the query in brackets: what a top example shows."""
    cut = lambda t: t if len(t) <= PIECE_CHARS else t[: PIECE_CHARS - 1] + "…"  # noqa: E731
    before = [cut(t) for t in tokens[max(0, position - CONTEXT_BEFORE): position]]
    after = [cut(t) for t in tokens[position + 1: position + 1 + CONTEXT_AFTER]]
    return " ".join(before + [f"[{cut(tokens[position])}]"] + after)


@dataclass
class Accumulator:
    """Sums (L, h) and counts per statistic, the top K examples per head, and what was read."""
    layers: int
    heads: int
    top_k: int
    sums: dict[str, np.ndarray] = field(default_factory=dict)  # each (L, h)
    counts: dict[str, int] = field(default_factory=dict)
    top_score: Optional[np.ndarray] = None  # (S, L, h, K) -inf where empty; S = len(TOP_STATS)
    top_text: Optional[np.ndarray] = None  # (S, L, h, K) int64, -1 where empty
    top_pos: Optional[np.ndarray] = None  # (S, L, h, K) int64
    top_context: Optional[np.ndarray] = None  # (S, L, h, K) object (str)
    texts: int = 0  # texts read (a text too short to score counts as read)
    scored: int = 0  # texts that had a query to score
    tokens: int = 0
    probes: int = 0

    def __post_init__(self) -> None:
        L, h, K, S = self.layers, self.heads, self.top_k, len(TOP_STATS)
        for name in STATS:
            self.sums.setdefault(name, np.zeros((L, h)))
            self.counts.setdefault(name, 0)
        if self.top_score is None:
            self.top_score = np.full((S, L, h, K), -np.inf)
            self.top_text = np.full((S, L, h, K), -1, dtype=np.int64)
            self.top_pos = np.zeros((S, L, h, K), dtype=np.int64)
            self.top_context = np.full((S, L, h, K), "", dtype=object)

    def add(self, name: str, per_query: np.ndarray) -> None:
        """Add one text's (L, h, n) per-query values of ``name``."""
        self.sums[name] += per_query.sum(axis=-1)
        self.counts[name] += per_query.shape[-1]

    def offer(self, stat: int, score: np.ndarray, text: np.ndarray, pos: np.ndarray, ctx: np.ndarray) -> None:
        """Candidates (L, h, m) for TOP_STATS[stat]; the K best of them and the kept ones stay."""
        s = np.concatenate([self.top_score[stat], score], axis=-1)  # (L, h, K + m)
        t = np.concatenate([self.top_text[stat], text], axis=-1)
        p = np.concatenate([self.top_pos[stat], pos], axis=-1)
        c = np.concatenate([self.top_context[stat], ctx], axis=-1)
        best = np.lexsort((p, t, -s), axis=-1)[..., : self.top_k]  # highest score, then lowest text, position
        for arr, src in ((self.top_score, s), (self.top_text, t), (self.top_pos, p), (self.top_context, c)):
            arr[stat] = np.take_along_axis(src, best, axis=-1)

    def merge(self, other: "Accumulator") -> None:
        """Add ``other`` (the same model and settings) into this one: sums and counts added, the
        top K chosen again from both."""
        for name in STATS:
            self.sums[name] += other.sums[name]
            self.counts[name] += other.counts[name]
        for stat in range(len(TOP_STATS)):
            self.offer(stat, other.top_score[stat], other.top_text[stat], other.top_pos[stat], other.top_context[stat])
        self.texts += other.texts
        self.scored += other.scored
        self.tokens += other.tokens
        self.probes += other.probes

    def means(self) -> dict[str, Optional[np.ndarray]]:
        """{name: (L, h) mean, or None when no query was scored for it}."""
        return {n: (self.sums[n] / self.counts[n] if self.counts[n] else None) for n in STATS}

    def top(self, stat: str, layer: int, head: int) -> list[dict[str, Any]]:
        i = TOP_STATS.index(stat)
        return [{"score": float(self.top_score[i, layer, head, k]), "text": int(self.top_text[i, layer, head, k]),
                 "position": int(self.top_pos[i, layer, head, k]), "context": str(self.top_context[i, layer, head, k])}
                for k in range(self.top_k) if self.top_text[i, layer, head, k] >= 0]


def add_text(acc: Accumulator, attentions: np.ndarray, *, text_id: int, tokens: Sequence[str], ids: Sequence[int],
             special: Sequence[bool], causal: bool, windows: Optional[Sequence[Optional[int]]] = None) -> bool:
    """Add one text's (L, h, T, T) attention to ``acc``; False when no query of it can be scored.
    ``windows`` (L,): each layer's sliding window or None (a query's visible keys, which the
    entropy is normalised by)."""
    L, h, T, _ = attentions.shape
    queries = ~np.asarray(special, dtype=bool)  # (T,)
    flat = attentions.reshape(L * h, T, T)  # the heads of every layer as one axis
    only = ("first_token", "entropy", "previous_token", "duplicate_token")
    kw = dict(causal=causal, window=1, queries=queries, token_ids=list(ids), only=only)
    _, _, rows = scored_rows(T, **kw)
    if not rows["entropy"].any():
        return False
    windows = [None] * L if windows is None else list(windows)
    scores: dict[str, np.ndarray] = {}  # {name: (L*h, n)}, the layers of each window scored together
    for sliding in dict.fromkeys(windows):
        layers = [l for l in range(L) if windows[l] == sliding]
        mine = attentions if len(layers) == L else attentions[layers]  # every layer: no copy of the text's A
        part = row_scores(mine.reshape(len(layers) * h, T, T), sliding=sliding, **kw)
        for name, values in part.items():
            scores.setdefault(name, np.zeros((L, h, values.shape[-1])))[layers] = values.reshape(len(layers), h, -1)
    scores = {name: values.reshape(L * h, -1) for name, values in scores.items()}
    use = rows["entropy"]  # (T,)
    dist = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])  # (T, T)
    per_query = {"distance": (flat[:, use, :] * dist[use]).sum(axis=-1)}  # (L*h, n)
    for stat, name in _HEADS_NAME.items():
        if name in scores:
            per_query[stat] = scores[name]
    for stat, values in per_query.items():
        acc.add(stat, values.reshape(L, h, -1))
    contexts: dict[int, str] = {}  # position -> its context, made once per text
    for i, stat in enumerate(TOP_STATS):
        if stat not in per_query or per_query[stat].shape[-1] == 0:
            continue
        positions = np.flatnonzero(rows[_HEADS_NAME[stat]])  # (n,)
        vals = per_query[stat].reshape(L, h, -1)  # (L, h, n)
        pos = np.broadcast_to(positions, vals.shape)
        best = np.lexsort((pos, -vals), axis=-1)[..., : acc.top_k]  # (L, h, k) within the text
        pick = np.take_along_axis(pos, best, axis=-1)
        ctx = np.empty(pick.shape, dtype=object)
        for p in np.unique(pick):
            contexts.setdefault(int(p), context(tokens, int(p)))
        ctx[...] = [[[contexts[p] for p in hp] for hp in lp] for lp in pick.tolist()]
        acc.offer(i, np.take_along_axis(vals, best, axis=-1), np.full(pick.shape, text_id, dtype=np.int64),
                  pick.astype(np.int64), ctx)
    acc.scored += 1
    return True


def probe_ids(text_id: int, settings: Settings, prefix: Sequence[int], vocab: int, exclude: set[int],
              max_positions: int) -> list[int]:
    """The probe of ``text_id``: ``prefix`` then n distinct random ids (not in ``exclude``) twice;
    n = probe_length, fewer when the model's limit or vocabulary is smaller."""
    n = min(settings.probe_length, (max_positions - len(prefix)) // 2, vocab - len(exclude))
    if n < 2:
        return []
    rng = np.random.default_rng([settings.seed, text_id])
    pool = np.setdiff1d(np.arange(vocab), np.fromiter(exclude, dtype=np.int64, count=len(exclude)))
    half = rng.choice(pool, size=n, replace=False).tolist()
    return list(prefix) + half + half


def add_probe(acc: Accumulator, attentions: np.ndarray, ids: Sequence[int]) -> None:
    """Add a probe's (L, h, T, T) attention: the induction score of every query that has a key."""
    L, h, T, _ = attentions.shape
    scores = row_scores(attentions.reshape(L * h, T, T), causal=True, window=1, token_ids=list(ids),
                        only=("induction",))
    if "induction" in scores:
        acc.add("induction", scores["induction"].reshape(L, h, -1))
    acc.probes += 1
