"""What a head does: its attention scored against simple patterns, and a label from the scores.

Shared by ``attn heads`` on attn's own LM (``attncli.tinylm.heads``) and on pretrained transformers.
Pure NumPy. Shapes: ``h`` heads, ``T`` tokens (self-attention), ``n`` scored queries.

A pattern P is a (T, T) 0/1 matrix of the keys a head of that kind attends to; a query row's score
is the attention it puts there, sum_j A[i, j] P[i, j] (TransformerLens' ``detect_head`` with its
"mul" measure, per row). Patterns (Elhage et al. 2021, Clark et al. 2019, Olsson et al. 2022):

    previous_token   P[i, i-1]                     the token just before
    next_token       P[i, i+1]                     the token just after (bidirectional models)
    first_token      P[i, 0]                       the first token: [CLS], <s>, or a decoder's first word
    separator        P[i, j] for every separator j [SEP], </s> (Clark et al.'s "attend to [SEP]")
    self             P[i, i]
    duplicate_token  P[i, j] for j < i with token_j == token_i   (TransformerLens; an encoder: any j != i)
    induction        P[i, j] for j <= i with token_{j-1} == token_i           (TransformerLens; decoders)
    local            |i - j| <= window (causal: i - window <= j <= i)
    entropy          H(A[i]) / log(visible keys of i): 1 = spread evenly, 0 = one key

The visible keys of query i: every key (an encoder), j <= i (a decoder), and with a sliding window
W (Mistral, Phi-3, Qwen2's windowed layers: ``sliding``) only i - W < j <= i.

Only queries that can say something are scored: at least two visible keys, and for
duplicate_token / induction at least one key of the pattern (a sentence without a repeated token
says nothing about a duplicate-token head). ``exclude_first`` drops key 0 and renormalises each
row over the other keys first (an "attention sink" on the first token otherwise hides what a
head does with the rest; first_token is then not scored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from attncli.numeric import entropy

PATTERNS = ("previous_token", "next_token", "first_token", "separator", "self", "duplicate_token", "induction")
SCORES = PATTERNS + ("local", "entropy")


def visible_keys(T: int, causal: bool, exclude_first: bool = False, S: Optional[int] = None,
                 sliding: Optional[int] = None) -> np.ndarray:
    """(T, S) True where query i may see key j (S: T, self-attention; else another sequence's keys);
    ``sliding`` W: only the keys less than W positions back (i - j < W)."""
    S = T if S is None else S
    vis = np.tril(np.ones((T, S), dtype=bool)) if causal else np.ones((T, S), dtype=bool)
    if sliding is not None:
        vis &= (np.arange(T)[:, None] - np.arange(S)[None, :]) < sliding  # (T, S)
    if exclude_first:
        vis[:, 0] = False
    return vis


def pattern_masks(T: int, *, causal: bool, window: int, separators: Optional[np.ndarray] = None,
                  token_ids: Optional[Sequence[int]] = None, S: Optional[int] = None) -> dict[str, np.ndarray]:
    """The (T, S) 0/1 patterns that apply to one input (see the module docstring). Across two
    sequences (cross-attention, S keys of another text) the positions are compared as they are:
    "self" is the diagonal, a monotone alignment; no token ids there."""
    S = T if S is None else S
    i = np.arange(T)[:, None]  # (T, 1)
    j = np.arange(S)[None, :]  # (1, S)
    masks = {"previous_token": j == i - 1, "first_token": np.broadcast_to(j == 0, (T, S)), "self": i == j}
    if not causal:
        masks["next_token"] = j == i + 1
    if separators is not None and np.any(separators):
        masks["separator"] = np.broadcast_to(np.asarray(separators, bool)[None, :], (T, S))
    if token_ids is not None and S == T:
        ids = np.asarray(token_ids)
        same = ids[:, None] == ids[None, :]  # (T, T)
        masks["duplicate_token"] = same & ((j < i) if causal else (j != i))  # an encoder's copy may come later
        if causal:
            before = np.zeros((T, T), dtype=bool)
            before[:, 1:] = ids[:, None] == ids[None, :-1]  # token_{j-1} == token_i
            masks["induction"] = before & (j <= i)
    masks["local"] = (np.abs(i - j) <= window) & ((j <= i) if causal else True)
    return masks


def row_scores(weights: np.ndarray, *, causal: bool, window: int, queries: Optional[np.ndarray] = None,
               separators: Optional[np.ndarray] = None, token_ids: Optional[Sequence[int]] = None,
               exclude_first: bool = False, only: Sequence[str] = SCORES,
               sliding: Optional[int] = None) -> dict[str, np.ndarray]:
    """Per-query scores of every head: {score name: (h, n)} for the scores in ``only`` that apply.

    ``weights`` (h, T, T) are one input's attention rows; ``queries`` (T,) bool picks the queries
    to score (default all; e.g. not the special tokens); ``separators`` (T,) marks separator keys;
    ``token_ids`` enables duplicate_token and induction. ``sliding``, the model's sliding window,
    sets the visible keys the entropy is normalised by; the queries scored and the patterns'
    keys stay the text's (a masked key holds 0 anyway), so every layer scores the same queries."""
    A = np.asarray(weights, dtype=np.float64)  # (h, T, S): S == T but for cross-attention
    h, T, S = A.shape
    vis, keys, rows = scored_rows(T, causal=causal, window=window, queries=queries, separators=separators,
                                  token_ids=token_ids, exclude_first=exclude_first, only=only, S=S)
    if exclude_first:  # rows renormalised over the keys that are left
        A = np.where(vis, A, 0.0)
        mass = A.sum(axis=-1, keepdims=True)  # (h, T, 1)
        A = np.divide(A, mass, out=np.zeros_like(A), where=mass > 0)
    out: dict[str, np.ndarray] = {}
    for name, use in rows.items():
        if name == "entropy":
            seen = vis if sliding is None else visible_keys(T, causal, exclude_first, S, sliding)  # (T, S)
            n_vis = seen.sum(axis=-1)  # (T,) the keys the query sees: its window's, with one
            ent = entropy(A) / np.log(np.maximum(n_vis, 2))  # (h, T)
            out[name] = ent[:, use]
            continue
        k = keys[name]  # (T, S)
        if k.sum(axis=-1).max(initial=0) <= 1:  # at most one key a row (first, previous token): its weight,
            has = k.any(axis=-1)  # (T,)                  # the sum of one term and zeros, read directly
            out[name] = np.where(has, A[:, np.arange(T), k.argmax(axis=-1)], 0.0)[:, use]  # (h, n)
            continue
        out[name] = (A * k).sum(axis=-1)[:, use]  # (h, n)
    return out


def scored_rows(T: int, *, causal: bool, window: int, queries: Optional[np.ndarray] = None,
                separators: Optional[np.ndarray] = None, token_ids: Optional[Sequence[int]] = None,
                exclude_first: bool = False, only: Sequence[str] = SCORES, S: Optional[int] = None
                ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What :func:`row_scores` scores, without the weights: the (T, T) visible keys, each
    pattern's (T, T) keys (its mask where visible), and each score's (T,) bool query rows, for
    the scores in ``only`` that apply (see the module docstring for which queries count)."""
    vis = visible_keys(T, causal, exclude_first, S)  # (T, S)
    n_vis = vis.sum(axis=-1)  # (T,)
    use = (n_vis >= 2) if queries is None else (np.asarray(queries, bool) & (n_vis >= 2))  # (T,)
    masks = pattern_masks(T, causal=causal, window=window, separators=separators, token_ids=token_ids, S=S)
    if exclude_first:
        masks.pop("first_token")
    keys: dict[str, np.ndarray] = {}
    rows: dict[str, np.ndarray] = {}
    for name in only:
        if name == "entropy":
            rows[name] = use
            continue
        if name not in masks:
            continue
        keys[name] = masks[name] & vis  # (T, T)
        rows[name] = use & keys[name].any(axis=-1) if name in ("duplicate_token", "induction") else use  # (T,)
    return vis, keys, rows


def uniform_weights(T: int, causal: bool, S: Optional[int] = None) -> np.ndarray:
    """(1, T, S) a head that spreads each row evenly over the keys it may see: the baseline."""
    vis = visible_keys(T, causal, S=S)
    return (vis / vis.sum(axis=-1, keepdims=True))[None]  # (1, T, S)


class Tally:
    """Sums and counts of per-query scores over many inputs, per (layer, head) and score name."""

    def __init__(self, layers: int, heads: int):
        self.sums = {name: np.zeros((layers, heads)) for name in SCORES}  # each (L, h)
        self.counts = {name: 0 for name in SCORES}
        self.layers, self.heads = layers, heads

    def add(self, layer: int, scores: dict[str, np.ndarray], count_queries: bool = True) -> None:
        for name, s in scores.items():  # s: (h, n)
            self.sums[name][layer] += s.sum(axis=-1)
            if count_queries:
                self.counts[name] += s.shape[-1]

    def add_all_layers(self, per_layer: list[dict[str, np.ndarray]]) -> None:
        for layer, scores in enumerate(per_layer):
            self.add(layer, scores, count_queries=layer == 0)

    def means(self) -> dict[str, Optional[np.ndarray]]:
        """{name: (L, h) mean score, or None when no query was scored for it}."""
        return {name: (self.sums[name] / self.counts[name] if self.counts[name] else None) for name in SCORES}


def label(scores: dict[str, Optional[float]], uniform: dict[str, Optional[float]], *, patterns: Sequence[str],
          pattern_min: float, local_min: float, broad_min: float, margin: float) -> str:
    """The first rule that holds: the largest of ``patterns`` (those scored) if it is >= pattern_min
    and at least ``margin`` above a uniform head's score; else 'local' if local >= local_min and
    beats uniform by the margin; else 'broad' if entropy >= broad_min; else 'mixed'."""
    scored = [p for p in patterns if scores.get(p) is not None]
    if scored:
        best = max(scored, key=lambda p: scores[p])
        if scores[best] >= pattern_min and scores[best] >= (uniform.get(best) or 0.0) + margin:
            return best
    if scores["local"] >= local_min and scores["local"] >= uniform["local"] + margin:
        return "local"
    if scores["entropy"] >= broad_min:
        return "broad"
    return "mixed"


# --- classifying a pretrained model's heads --------------------------------------------------------

# Calibrated on all-MiniLM-L6-v2's 72 heads over 200 held-out Brown sentences (docs/transformers.md,
# bench/calibrate_heads.py): a head "is" a pattern when the pattern's key is the strongest key of at
# least half its rows; a mean score of 0.3 agrees with that on all 288 (head, pattern) pairs with
# --exclude-first, and on 346 of 360 without it (the [CLS] sink blurs both readings; 0.25 also
# gives 13 disagreements there, 0.4 gives 28). local, broad and the margin: the lm's.
THRESHOLDS = {"pattern": 0.3, "local": 0.7, "broad": 0.7, "margin": 0.2}


@dataclass
class ScoredInput:
    """One input's attention and what its patterns need."""

    attentions: np.ndarray  # (L, h, T, T); cross-attention (L, h, T, S)
    queries: np.ndarray  # (T,) bool: the queries to score (e.g. not the special tokens)
    separators: Optional[np.ndarray] = None  # (S,) bool: separator keys ([SEP], </s>)
    token_ids: Optional[Sequence[int]] = None  # enables duplicate_token / induction
    only: Sequence[str] = SCORES  # the scores this input contributes


def classify(inputs: Iterable[ScoredInput], *, layers: int, heads: int, causal: bool, window: int,
             exclude_first: bool = False, thresholds: Optional[dict[str, float]] = None) -> dict[str, Any]:
    """Mean per-query scores of every head over ``inputs``, the same for a uniform head, and a label
    per head (:func:`label` over every pattern that was scored). JSON-ready."""
    t = dict(THRESHOLDS if thresholds is None else thresholds)
    tally, base = Tally(layers, heads), Tally(1, 1)
    n_inputs = 0
    for inp in inputs:
        n_inputs += "entropy" in inp.only  # a repeated copy for duplicate/induction is not another sentence
        kw = dict(causal=causal, window=window, queries=inp.queries, separators=inp.separators,
                  token_ids=inp.token_ids, exclude_first=exclude_first, only=inp.only)
        tally.add_all_layers([row_scores(inp.attentions[layer], **kw) for layer in range(layers)])
        T, S = inp.attentions.shape[-2:]
        base.add(0, row_scores(uniform_weights(T, causal, S=S), **kw))
    means, uniform_means = tally.means(), base.means()
    uniform = {k: (None if v is None else float(v[0, 0])) for k, v in uniform_means.items()}
    scored = [p for p in PATTERNS if means[p] is not None]
    out = []
    for layer in range(layers):
        for head in range(heads):
            s = {k: (None if v is None else float(v[layer, head])) for k, v in means.items()}
            s["label"] = label(s, uniform, patterns=scored, pattern_min=t["pattern"], local_min=t["local"],
                               broad_min=t["broad"], margin=t["margin"])
            out.append({"layer": layer, "head": head, **s})
    return {"sentences": n_inputs, "queries": tally.counts["entropy"], "window": window,
            "exclude_first": exclude_first, "scores": [k for k in SCORES if means[k] is not None],
            "uniform": uniform, "thresholds": t, "heads": out}
