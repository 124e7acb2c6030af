"""Attention sinks and massive activations (Sun et al. 2024, "Massive activations in large language
models") on the traced pass, and the causal test of setting the massive channels to their mean.

Shapes: L layers, h heads, T tokens of one text, d the model dimension, V the vocabulary.

    massive       an entry x[t, c] of blocks.{l}.resid_post (T, d) is massive when
                  |x[t, c]| >= ratio * median(|x|)   (the median over the whole (T, d) state of that
                  text at that layer) and |x[t, c]| >= min_value. The paper's criterion is
                  ratio 1,000 and min_value 100; the ratio to the median is reported for every layer
                  either way, so a small model whose values never reach 100 still shows its peaks.
    appear        the first layer with a massive entry in any text; its channels (the union over
                  texts) are the massive channels, the tokens holding them their carriers.
    sink share    head (l, h): the mean, over every query t >= 1 of every text, of the attention
                  pattern[h, t, s] summed over the carrier positions s <= t of that text (the tokens
                  with a massive entry at any layer); and the same on the first token alone.
                  (Query 0 is left out: a causal query 0 can only attend to itself.)
    secondary     keys s >= 1 by their token text: the attention they receive, pattern[h, t, s]
                  averaged over heads, layers and queries t > s, averaged over their occurrences.
    causal test   blocks.{appear}.resid_post's massive channels set to their mean over every token
                  of every text (an Intervention at that site, the rest of the pass rerun from
                  that layer): the change in the mean next-token cross-entropy (nats) and in the
                  mean sink share over heads of the layers after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.model.interface import has
from attncli.model.trace import Intervention, site
from attncli.numeric import logsumexp

PAPER_RATIO = 1000.0  # Sun et al. 2024: about 1,000 times the median magnitude
PAPER_MIN_VALUE = 100.0  # ... and above 100 in magnitude
TOP_CHANNELS = 3  # the largest channels each layer's row lists
BATCH = 16  # texts a padded pass holds
ATTENTION_BYTES = 2 * 2**30  # a padded pass's (B, L, h, T, T) float64 attention at most: one line of 8,192 tokens
# of SmolLM2-135M (30 layers x 9 heads) alone is 135 GiB, 16 lines of 512 tokens 8.4 GiB
PAIR_ROWS = 256  # final-norm rows paired_losses unembeds at once (Gemma: 537 MB of float64 logits)
LOSS_ROWS = 8  # logit rows a loss reads at a time (each (V,) float64: Gemma's 2 MB)
SECONDARY_MIN_COUNT = 3  # a secondary sink's token occurs at least this often (one rare word is no sink)


@dataclass
class LayerPeak:
    """One layer's largest entries over every text: by channel, its largest |value| and the ratio
    of that value to the median |value| of its text's state at the layer."""
    layer: int
    median: float  # the median over texts of each text's median |x|
    top: list[dict[str, Any]] = field(default_factory=list)  # [{channel, value, ratio, position, token}]
    massive: list[int] = field(default_factory=list)  # channels with a massive entry in some text


def massive_mask(x: np.ndarray, ratio: float, min_value: float) -> tuple[np.ndarray, float]:
    """(T, d) booleans: the massive entries of one state ``x`` (T, d), and the state's median |x|."""
    mag = np.abs(x.astype(np.float64))  # (T, d)
    median = float(np.median(mag))
    return (mag >= ratio * median) & (mag >= min_value), median


def token_mean_loss(logits: np.ndarray, ids: Sequence[int]) -> tuple[float, int]:
    """(sum of the next-token cross-entropies in nats, how many): logits (T, V) predicting ids[1:]."""
    if len(ids) < 2:
        return 0.0, 0
    nxt = np.asarray(ids[1:])  # (T-1,)
    picked = np.empty(len(nxt))  # (T-1,) log p(ids[t+1] | ids[..t]) = logits[t, ids[t+1]] - logsumexp(logits[t])
    for a in range(0, len(nxt), LOSS_ROWS):  # row by row as log_softmax's, no (T-1, V) array of it made
        x = np.asarray(logits[a: min(a + LOSS_ROWS, len(nxt))], dtype=np.float64)  # (n, V): rows 0..T-2 predict
        lse = logsumexp(x)  # (n,)
        with np.errstate(invalid="ignore"):
            got = x[np.arange(len(x)), nxt[a: a + len(x)]] - lse  # (n,)
        picked[a: a + len(x)] = np.where(lse == -np.inf, -np.inf, got)
    return float(-picked.sum()), len(ids) - 1


def paired_losses(model: Any, finals: Sequence[np.ndarray], ids: Sequence[int]) -> list[tuple[float, int]]:
    """token_mean_loss of each pass of ``ids`` from its final-norm rows (T, d): the rows of every
    pass through ``model.unembed`` together, PAIR_ROWS at a time, so the LM head (Gemma's 262,144
    rows) is read once for all of them, at most PAIR_ROWS rows of logits held; each loss's terms summed as
    token_mean_loss sums them (the same number to the rounding of the LM head's product, which BLAS
    blocks by the rows it is given; the same bits on Gemma-3-270M's 100-sentence run)."""
    T = len(ids)
    if T < 2:
        return [(0.0, 0)] * len(finals)
    rows = np.concatenate([np.asarray(f).reshape(T, -1) for f in finals])  # (P T, d)
    nxt = np.asarray(list(ids[1:]) + [0])  # (T,) the next token of each position (the last predicts none)
    picked = np.empty(len(rows))  # (P T,) log p(next | ...)
    for b in range(0, len(rows), PAIR_ROWS):  # one unembed a block (a GGUF head not held is dequantized each call)
        logits = model.unembed(rows[b: b + PAIR_ROWS])  # (m, V)
        for a in range(b, b + len(logits), LOSS_ROWS):
            x = np.asarray(logits[a - b: a - b + LOSS_ROWS], dtype=np.float64)  # (n, V)
            if not np.isfinite(x).all():  # as the traced pass's own check of its logits
                raise RuntimeFailure(f"damaged model: {'NaN' if np.isnan(x).any() else 'infinity'} in the logits")
            lse = logsumexp(x)  # (n,)
            at = np.arange(a, a + len(x))
            picked[a: a + len(x)] = x[np.arange(len(x)), nxt[at % T]] - lse
    return [(float(-picked[p * T: p * T + T - 1].sum()), T - 1) for p in range(len(finals))]


def sink_shares(pattern: np.ndarray, keys: Sequence[int]) -> np.ndarray:
    """(h,) the summed attention of every query t >= 1 on ``keys``, summed over those queries;
    pattern (h, T, T)."""
    if pattern.shape[1] < 2:
        return np.zeros(pattern.shape[0])
    return pattern[:, 1:, list(keys)].astype(np.float64).sum(axis=(1, 2))  # (h,)


def scan(model: Any, texts_ids: list[list[int]], *, ratio: float = PAPER_RATIO, min_value: float = PAPER_MIN_VALUE,
         causal: int = 0, causal_layer: Optional[int] = None,
         on_text: Optional[Callable[[], None]] = None) -> dict[str, Any]:
    """The report: per-layer peaks, the massive channels and their layer, the carrier tokens, each
    head's sink share, the secondary sinks, and (``causal`` > 0) the causal test on the first
    ``causal`` texts, at ``causal_layer`` (default: the layer they appear at; its massive channels)."""
    if not texts_ids:
        raise BadInput("no text to look for massive activations in")
    texts_ids, encs = [list(getattr(e, "ids", e)) for e in texts_ids], texts_ids
    L, H = model.layers, model.heads
    if causal_layer is not None and not 0 <= causal_layer < L:  # before any pass
        raise BadInput(f"--layer {causal_layer}: model has layers 0..{L - 1}")
    _check_lengths(model, texts_ids)
    keep = ["blocks.*.resid_post", "blocks.*.attn.pattern"]
    medians = [[] for _ in range(L)]
    best: list[dict[int, dict[str, Any]]] = [{} for _ in range(L)]  # per layer: channel -> its largest entry
    massive_at: list[set[int]] = [set() for _ in range(L)]
    carriers: list[set[int]] = []  # per text: positions with a massive entry at any layer
    first_layer_carriers: list[list[tuple[int, int]]] = []  # per text: (layer, position) pairs
    # each text's pattern and state are read as it is traced, never all held: the sink shares and
    # the secondary sinks summed at once, the states summed per channel (the causal test's means;
    # the test reruns its texts and reads each one's state from its own clean pass)
    share, first = np.zeros((L, H)), np.zeros((L, H))
    queries = 0
    recv: dict[int, list[float]] = {}
    channel_sum: list[Any] = [0] * L  # per layer: (d,) float64 the sum over every token of every text
    tokens = 0
    for ids, tr in traced(model, encs, keep):
        resid = tr.stack("resid_post", L)  # (L, T, d)
        pos: set[int] = set()
        hits = []
        for l in range(L):
            mask, median = massive_mask(resid[l], ratio, min_value)
            medians[l].append(median)
            mag = np.abs(resid[l].astype(np.float64))  # (T, d)
            where = mag.argmax(axis=0)  # (d,) the token of each channel's largest entry
            top = mag[where, np.arange(mag.shape[1])]  # (d,)
            for c in np.argsort(-top)[:TOP_CHANNELS]:
                c = int(c)
                r = float(top[c] / median) if median > 0 else float("inf")
                if c not in best[l] or r > best[l][c]["ratio"]:
                    best[l][c] = {"channel": c, "value": float(resid[l][where[c], c]), "ratio": r,
                                  "position": int(where[c]), "token_id": int(ids[where[c]])}
            ts, cs = np.nonzero(mask)
            massive_at[l].update(int(c) for c in cs)
            pos.update(int(t) for t in ts)
            hits += [(l, int(t)) for t in np.unique(ts)]  # a position once, however many of its channels
            channel_sum[l] = channel_sum[l] + resid[l].astype(np.float64).sum(axis=0)
        tokens += resid.shape[1]
        carriers.append(pos)
        first_layer_carriers.append(hits)
        _sinks_of(tr.stack("attn.pattern", L), ids, sorted(pos) if pos else [0], share, first, recv)  # (L, h, T, T)
        queries += max(len(ids) - 1, 0)
        if on_text is not None:
            on_text()
    appear = next((l for l in range(L) if massive_at[l]), None)
    layers = []
    for l in range(L):
        top = sorted(best[l].values(), key=lambda e: -e["ratio"])[:TOP_CHANNELS]
        layers.append({"layer": l, "median": float(np.median(medians[l])), "top": top,
                       "massive_channels": sorted(massive_at[l])})
    channels = sorted(massive_at[appear]) if appear is not None else []
    # the carriers at the layer they appear (and from it on): position and token
    carrier_tokens: dict[int, int] = {}
    at_first = 0
    for ids, hits in zip(texts_ids, first_layer_carriers):
        seen = {t for l, t in hits if l == appear}
        at_first += int(0 in seen)
        for t in seen:
            carrier_tokens[int(ids[t])] = carrier_tokens.get(int(ids[t]), 0) + 1
    keys_of = [sorted(p) if p else [0] for p in carriers]
    queries = max(queries, 1)
    secondary = sorted(({"token_id": k, "received": float(np.mean(v)), "count": len(v)} for k, v in recv.items()
                        if len(v) >= SECONDARY_MIN_COUNT),
                       key=lambda e: -e["received"])[:5]
    report = {"ratio": ratio, "min_value": min_value, "texts": len(texts_ids), "queries": queries,
              "layers": layers, "appear": appear, "channels": channels,
              "carriers": {"texts_with_first_token": at_first,
                           "tokens": sorted(({"token_id": k, "count": v} for k, v in carrier_tokens.items()),
                                            key=lambda e: -e["count"])[:8]},
              "sink_keys": "massive" if any(carriers) else "first",
              "sink_share": (share / queries).tolist(), "first_token_share": (first / queries).tolist(),
              "secondary": secondary}
    at = appear if causal_layer is None else causal_layer
    if causal > 0 and at is not None and massive_at[at]:
        chosen = sorted(massive_at[at])
        means = channel_sum[at][chosen] / tokens  # (C,)
        report["causal"] = causal_test(model, texts_ids[:causal], at, chosen, means=means, keys_of=keys_of[:causal])
    return report


def _sinks_of(pat: np.ndarray, ids: list[int], keys: list[int], share: np.ndarray, first: np.ndarray,
              recv: dict[int, list[float]]) -> None:
    """One text's pattern (L, h, T, T) added to the sink shares (L, h) on ``keys`` and on the first
    token, and each key s >= 1's received attention to ``recv`` by its token id."""
    for l in range(pat.shape[0]):
        share[l] += sink_shares(pat[l], keys)
        first[l] += sink_shares(pat[l], [0])
    for s in range(1, len(ids) - 1):
        got = float(pat[:, :, s + 1:, s].astype(np.float64).mean())  # heads, layers, queries t > s
        recv.setdefault(int(ids[s]), []).append(got)


def _entry_bytes(model: Any) -> int:
    """Bytes of one (query, key) entry of the attention over every layer and head, in float64."""
    return model.layers * model.heads * 8


def _check_lengths(model: Any, texts_ids: list[list[int]]) -> None:
    """BadInput, before any pass, for a text whose attention alone passes ATTENTION_BYTES."""
    per_entry = _entry_bytes(model)
    for n, ids in enumerate(texts_ids):
        if per_entry * len(ids) ** 2 > ATTENTION_BYTES:
            raise BadInput(f"text {n + 1} is {len(ids):,} tokens: its attention ({model.layers} layers x {model.heads} "
                           f"heads x {len(ids):,}^2, float64) would take {per_entry * len(ids) ** 2 / 2**30:,.1f} GiB, "
                           f"more than the {ATTENTION_BYTES // 2**30} GiB attn sinks holds at once: at most "
                           f"{math.isqrt(ATTENTION_BYTES // per_entry):,} tokens a sentence for this model (split it)")


def batches(encs: Sequence[Any], per_entry: int) -> list[list[Any]]:
    """Consecutive runs of at most BATCH encodings whose padded attention, run length x longest^2 x
    ``per_entry`` bytes, stays within ATTENTION_BYTES (a text over it alone: _check_lengths)."""
    runs: list[list[Any]] = []
    longest = 0
    for enc in encs:
        T = len(enc.ids)
        if runs and len(runs[-1]) < BATCH and (len(runs[-1]) + 1) * per_entry * max(longest, T) ** 2 <= ATTENTION_BYTES:
            runs[-1].append(enc)
            longest = max(longest, T)
        else:
            runs.append([enc])
            longest = T
    return runs


def traced(model: Any, encs: Sequence[Any], keep: list[str]) -> Iterator[tuple[list[int], Any]]:
    """(ids, trace) of each text: up to BATCH encodings at a time through one padded pass where the
    model has one (a quantized model's weights dequantized once a batch, not once a text), their
    attention within ATTENTION_BYTES (``batches``), else one ``trace`` of each text's ids."""
    if has(model, "batch") and all(hasattr(e, "ids") for e in encs):
        for run in batches(encs, _entry_bytes(model)):
            for enc, tr in zip(run, model.trace_batch(list(run), keep)):
                yield list(enc.ids), tr
        return
    for e in encs:
        ids = list(getattr(e, "ids", e))
        yield ids, model.trace(ids, keep)


def _from_fixed(model: Any, layer: int, fixed: np.ndarray) -> dict[str, Any]:
    """The trace arguments of a pass with blocks.{layer}.resid_post replaced by ``fixed`` (T, d): the
    pass resumed at layer + 1 from ``fixed`` (trace's start: the layers before it, which cannot see
    the replacement, not run again); at the last layer, the Intervention."""
    if layer + 1 < model.layers:
        return {"start": (layer + 1, fixed)}
    return {"interventions": [Intervention(site(layer, "resid_post"), "replace", value=fixed)]}


def causal_test(model: Any, texts_ids: list[list[int]], layer: int, channels: Sequence[int], *,
                means: np.ndarray, keys_of: list[list[int]]) -> dict[str, Any]:
    """The mean next-token loss and the mean sink share (heads of layers after ``layer``) with
    ``channels`` of blocks.{layer}.resid_post as they are and set to ``means`` (C,), their mean
    over every token of every text: the clean pass of each text keeps its state at ``layer``, which
    the second pass gets back with those channels set (nothing of a text is held past its own test)."""
    L = model.layers
    loss = {"clean": [0.0, 0], "mean": [0.0, 0]}
    share = {"clean": 0.0, "mean": 0.0}
    queries = 0
    after = list(range(layer + 1, L))
    at = site(layer, "resid_post")
    paired = has(model, "unembed")  # both passes' final rows through the LM head together (its rows read once)
    keep = ["final_norm" if paired else "logits"] + [site(l, "attn.pattern") for l in after]
    for ids, keys in zip(texts_ids, keys_of):
        clean = model.trace(list(ids), keep + [at])
        fixed = np.array(clean[at], copy=True)  # (T, d)
        fixed[:, list(channels)] = means
        mean = model.trace(list(ids), keep, **_from_fixed(model, layer, fixed))
        finals = []
        for name, tr in (("clean", clean), ("mean", mean)):
            if paired:
                finals.append(np.asarray(tr["final_norm"]))  # (T, d)
            else:
                s, n = token_mean_loss(tr["logits"], ids)
                loss[name][0] += s
                loss[name][1] += n
            share[name] += sum(float(sink_shares(tr[site(l, "attn.pattern")], keys).sum()) for l in after)
        for name, (s, n) in zip(("clean", "mean"), paired_losses(model, finals, ids) if paired else ()):
            loss[name][0] += s
            loss[name][1] += n
        queries += max(len(ids) - 1, 0) * len(after) * model.heads
    n = max(loss["clean"][1], 1)
    q = max(queries, 1)
    return {"layer": layer, "channels": list(channels), "means": means.tolist(), "texts": len(texts_ids),
            "tokens": loss["clean"][1], "loss": loss["clean"][0] / n, "loss_mean": loss["mean"][0] / n,
            "sink_share": share["clean"] / q, "sink_share_mean": share["mean"] / q}
