"""Retrieval heads (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context
Factuality") on needle-in-a-haystack inputs, and the causal test of masking the top ones.

Shapes: L layers, h heads, S keys (the prompt and the tokens decoded so far), N needles.

    sample        the model's leading special tokens, held-out text (the haystack) with a needle
                  sentence put in at a sentence break near a depth (0: the start, 1: the end), the
                  question, and the answer's first words: "... The secret code of NAME is W1 W2 W3. ...
                  Question: What is the secret code of NAME? Answer: The secret code of NAME is",
                  ``length`` tokens in all. The needle's tokens k are those of " W1 W2 W3".
    decoding      greedy, with a key/value cache (the prompt's pass by chunks of query rows), for
                  |k| + 2 steps or to a line break or a special token; step t's attention row is the
                  one of the query whose logits chose the token w_t it emits, (L, h, S).
    copy-paste    head (l, h) copies and pastes w_t at step t when its top-1 key (argmax over the
                  S keys of its row) is a needle position s in k holding w_t (ids[s] = w_t).
    score         of head (l, h) on a sample: |g| / |k|, g the needle positions it copied and
                  pasted (a set: a position counts once); its retrieval score: the mean over
                  samples (``retrieval``), and over the samples whose answer holds more than half
                  of the needle's words (``retrieval_recalled``: the filter of Wu et al.'s code).
    recall        of a sample: the share of the needle's words among the decoded answer's words.
    stability     R_n, the scores averaged over the first n needles (each needle's mean over the
                  lengths and depths); the top-k heads of R_N (those with a score > 0, at most k);
                  stable at the least n from which on every R_m (m >= n) has the same top-k set
                  and each of their scores within ``tolerance`` of R_N's.
    causal test   the top-K heads by score masked (their attn.z set to 0 at every position, in
                  the prompt's pass and each step), and K other heads drawn at random: the mean
                  recall over the same samples, clean and with each set masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.model.interface import require
from attncli.model.trace import Intervention, site

NAMES = ("Alice", "Bruno", "Carmen", "Daniel", "Elena", "Felix", "Grace", "Hector", "Irene", "Jonas", "Karen",
         "Leo", "Maria", "Nathan", "Olga", "Pedro", "Quinn", "Rosa", "Samuel", "Tina", "Victor", "Wendy", "Xavier",
         "Yara", "Zack", "Anna", "Boris", "Clara", "David", "Emma", "Frank", "Helen", "Ivan", "Julia", "Kevin",
         "Laura", "Martin", "Nora", "Oscar", "Paula")
WORDS = ("apple", "river", "stone", "candle", "garden", "silver", "window", "tiger", "orange", "pencil", "rocket",
         "forest", "mirror", "button", "dragon", "violin", "castle", "pepper", "harbor", "island", "jacket", "lemon",
         "marble", "needle", "ocean", "parrot", "rabbit", "saddle", "tunnel", "velvet", "wagon", "yellow", "anchor",
         "basket", "cactus", "desert", "engine", "feather", "ginger", "hammer", "kettle", "ladder", "meadow", "nickel",
         "onion", "pillow", "rubber", "spider", "tomato", "walnut")
VALUE_WORDS = 3  # words of a needle's value
RESERVE = 64  # tokens kept back from the depth's reach for the needle and the question (prefixes shared)
RECALLED = 0.5  # a sample is recalled when its answer holds more than half the needle's words (Wu et al.)
EXTRA_STEPS = 2  # decoded past the needle's tokens
DEFAULT_TOP = 10
DEFAULT_TOLERANCE = 0.05
SMALLER_K = (1, 3, 5)  # the stability of the top 1, 3 and 5 heads too


@dataclass(frozen=True)
class Needle:
    """A fact whose value the model can copy: "The secret code of NAME is W1 W2 W3."."""
    name: str
    value: tuple[str, ...]

    @property
    def head(self) -> str:
        return f" The secret code of {self.name} is"

    @property
    def question(self) -> str:
        return f"\nQuestion: What is the secret code of {self.name}?\nAnswer: The secret code of {self.name} is"


def make_needles(count: int, seed: int = 0) -> list[Needle]:
    """``count`` needles: distinct names (while they last), VALUE_WORDS distinct words each."""
    rng = np.random.default_rng(seed)
    names = [NAMES[i] for i in rng.permutation(len(NAMES))]
    return [Needle(names[i % len(names)] + ("" if i < len(names) else f" {i // len(names) + 1}"),
                   tuple(WORDS[j] for j in rng.choice(len(WORDS), VALUE_WORDS, replace=False)))
            for i in range(count)]


def depth_fractions(count: int) -> list[float]:
    """``count`` depths from 0 (the haystack's start) to 1 (its end); one depth: the middle."""
    return [0.5] if count == 1 else [i / (count - 1) for i in range(count)]


@dataclass
class Haystack:
    """Held-out text as token ids, with the places a sentence starts (where a needle may go)."""
    ids: list[int]
    breaks: list[int]  # ascending, 0 first


def haystack(model: Any, sentences: Sequence[str]) -> Haystack:
    ids: list[int] = []
    breaks = []
    for s in sentences:
        breaks.append(len(ids))
        ids += model.pieces(" " + s.strip())
    return Haystack(ids, breaks)


@dataclass
class Sample:
    ids: list[int]  # the prompt's token ids
    span: tuple[int, int]  # the needle's value tokens: ids[span[0]:span[1]]
    needle: int
    length: int
    depth: float


def build_sample(model: Any, hay: Haystack, prefix: Sequence[int], needles: Sequence[Needle], n: int, length: int,
                 depth: float) -> Sample:
    """Needle ``n`` at ``depth`` in ``length`` tokens: prefix, haystack, needle, haystack, question."""
    needle = needles[n]
    head, value, stop = model.pieces(needle.head), model.pieces(" " + " ".join(needle.value)), model.pieces(".")
    question = model.pieces(needle.question)
    inserted = len(head) + len(value) + len(stop)
    budget = length - len(prefix) - inserted - len(question)  # haystack tokens
    if budget < 0:
        raise BadInput(f"--lengths {length}: the needle and the question alone take "
                       f"{len(prefix) + inserted + len(question)} tokens")
    if budget > len(hay.ids):
        raise BadInput(f"--lengths {length}: the held-out text gives {len(hay.ids):,} tokens of haystack, "
                       f"{budget:,} are needed")
    reach = min(budget, max(0, length - len(prefix) - max(RESERVE, inserted + len(question))))
    at = max(b for b in hay.breaks if b <= int(depth * reach))  # a sentence break: shared by every needle
    ids = list(prefix) + hay.ids[:at] + head + value + stop + hay.ids[at:budget] + question
    start = len(prefix) + at + len(head)
    return Sample(ids, (start, start + len(value)), n, length, depth)


def decode(model: Any, cache: Any, ids: Sequence[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding of ``steps`` tokens at most (stopping after a line break or a special
    token): the tokens and each one's attention rows (L, h, S), S the keys its query saw."""
    out: list[int] = []
    rows = []
    for _ in range(min(steps, model.max_positions - len(ids) + 1)):  # the last step's input fits the model
        logits, pattern = cache.extend(list(ids) + out)  # (V,), (L, h, 1, S)
        token = int(np.argmax(logits))
        out.append(token)
        rows.append(pattern[:, :, 0])
        if token in model.special_ids or "\n" in model.token_texts([token])[0]:
            break
    return out, rows


def copy_paste(rows: Sequence[np.ndarray], emitted: Sequence[int], ids: Sequence[int],
               span: tuple[int, int]) -> np.ndarray:
    """(L, h) each head's share of the needle's positions ``span`` it copied and pasted: at step t,
    its argmax key s in the span with ids[s] == emitted[t] (ids: the prompt, then the emitted)."""
    start, end = span
    every = np.asarray(list(ids) + list(emitted), dtype=np.int64)
    got = np.zeros(rows[0].shape[:2] + (end - start,), dtype=bool) if rows else np.zeros((0, 0, 0), dtype=bool)
    for row, w in zip(rows, emitted):
        top = row.argmax(axis=-1)  # (L, h) the top-1 key of each head
        hit = (top >= start) & (top < end) & (every[top] == w)
        layer, head = np.nonzero(hit)
        got[layer, head, top[hit] - start] = True
    return got.sum(axis=-1) / max(1, end - start)  # (L, h)


def recall(model: Any, needle: Needle, emitted: Sequence[int]) -> tuple[float, str]:
    """(the share of the needle's words among the answer's words, the answer's text)."""
    text = model.decode(list(emitted))
    words = set(re.findall(r"[a-z]+", text.lower()))
    return sum(w in words for w in needle.value) / len(needle.value), text


def samples_of(model: Any, hay: Haystack, prefix: Sequence[int], needles: Sequence[Needle], lengths: Sequence[int],
               depths: Sequence[float]) -> list[Sample]:
    """Every (length, depth, needle), in that order: a depth's needles share the haystack before it."""
    return [build_sample(model, hay, prefix, needles, n, length, depth)
            for length in lengths for depth in depths for n in range(len(needles))]


def run(model: Any, samples: Sequence[Sample], needles: Sequence[Needle], *,
        interventions: Sequence[Intervention] = (), scores: bool = True,
        on_sample: Optional[Callable[[], None]] = None) -> list[dict[str, Any]]:
    """Each sample decoded: {answer, tokens, recall, score (L, h) when ``scores``}."""
    cache = model.new_rows_cache(interventions)
    out = []
    for s in samples:
        emitted, rows = decode(model, cache, s.ids, s.span[1] - s.span[0] + EXTRA_STEPS)
        r, text = recall(model, needles[s.needle], emitted)
        entry: dict[str, Any] = {"answer": text, "tokens": emitted, "recall": r}
        if scores:
            entry["score"] = copy_paste(rows, emitted, s.ids, s.span)
        out.append(entry)
        if on_sample is not None:
            on_sample()
    return out


def stability(per_needle: np.ndarray, k: int, tolerance: float) -> dict[str, Any]:
    """per_needle (N, L, h): the running means' agreement with the last (module docstring)."""
    N = per_needle.shape[0]
    running = np.cumsum(per_needle, axis=0) / np.arange(1, N + 1)[:, None, None]  # (N, L, h)
    final = running[-1].ravel()
    order = np.argsort(-final, kind="stable")
    top = [int(i) for i in order[:k] if final[i] > 0]

    def top_of(r: np.ndarray) -> set[int]:
        o = np.argsort(-r, kind="stable")
        return {int(i) for i in o[:len(top)] if r[i] > 0} if top else set()

    curve = []
    for n in range(N):
        r = running[n].ravel()
        change = float(np.abs(r[top] - final[top]).max()) if top else 0.0
        curve.append({"needles": n + 1, "same_top": top_of(r) == set(top), "max_change": change})
    stable_at = N
    while stable_at > 1 and curve[stable_at - 2]["same_top"] and curve[stable_at - 2]["max_change"] <= tolerance:
        stable_at -= 1
    out = {"k": len(top), "tolerance": tolerance, "needles": N, "stable_at": stable_at, "curve": curve}
    if k > 1:  # the fewer top heads, the sooner they settle: the same criterion for the top 1, 3, 5
        out["by_k"] = [{"k": sub["k"], "stable_at": sub["stable_at"]}
                       for sub in (stability(per_needle, j, tolerance) for j in SMALLER_K if j < k)]
    return out


def head_masks(heads: Sequence[tuple[int, int]]) -> list[Intervention]:
    """attn.z of each (layer, head) set to 0 (its output, at every position)."""
    return [Intervention(site(layer, "attn.z"), "zero", head=head) for layer, head in heads]


def scan(model: Any, hay: Haystack, prefix: Sequence[int], needles: Sequence[Needle], lengths: Sequence[int],
         depths: Sequence[float], *, top: int = DEFAULT_TOP, tolerance: float = DEFAULT_TOLERANCE, mask: int = 0,
         seed: int = 0, on_sample: Optional[Callable[[], None]] = None) -> dict[str, Any]:
    """The report: every head's retrieval score, the top ones, recall by length and depth, the
    stability of the top heads over needles, and (``mask`` > 0) the causal test."""
    require(model, "cache", "attn retrieval")
    if not needles:
        raise BadInput("no needle to look for")
    L, H = model.layers, model.heads
    if mask >= L * H:
        raise BadInput(f"--mask {mask}: the model has {L * H} heads; mask fewer, so random others remain")
    samples = samples_of(model, hay, prefix, needles, lengths, depths)
    clean = run(model, samples, needles, on_sample=on_sample)
    score = np.stack([c["score"] for c in clean])  # (samples, L, h)
    recalls = np.array([c["recall"] for c in clean])
    ok = recalls > RECALLED
    mean = score.mean(axis=0)  # (L, h)
    mean_ok = score[ok].mean(axis=0) if ok.any() else None
    N, nl, nd = len(needles), len(lengths), len(depths)
    per_needle = score.reshape(nl, nd, N, L, H).mean(axis=(0, 1))  # (N, L, h)
    heads = [{"layer": l, "head": h, "kv_head": model.kv_head(h), "retrieval": float(mean[l, h]),
              "retrieval_recalled": None if mean_ok is None else float(mean_ok[l, h])}
             for l in range(L) for h in range(H)]
    ranked = sorted(heads, key=lambda e: (-e["retrieval"], e["layer"], e["head"]))
    by = recalls.reshape(nl, nd, N)
    report: dict[str, Any] = {
        "layers": L, "heads_per_layer": H, "kv_heads": model.kv_heads, "needles": N, "lengths": list(lengths),
        "depths": list(depths), "samples": len(samples), "recalled_samples": int(ok.sum()), "recalled_above": RECALLED,
        "heads": heads, "top": ranked[:top],
        "recall": [{"length": length, "depth": depth, "recall": float(by[i, j].mean()),
                    "recalled": float((by[i, j] > RECALLED).mean())}
                   for i, length in enumerate(lengths) for j, depth in enumerate(depths)],
        "recall_mean": float(recalls.mean()),
        "stability": stability(per_needle, top, tolerance),
        "answers": [{"needle": s.needle, "length": s.length, "depth": s.depth, "position": s.span[0],
                     "value": " ".join(needles[s.needle].value), "answer": c["answer"], "recall": c["recall"]}
                    for s, c in zip(samples, clean)],
    }
    if mask > 0:
        report["causal"] = causal_test(model, samples, needles, ranked, mask, seed, recalls, on_sample)
    return report


def causal_test(model: Any, samples: Sequence[Sample], needles: Sequence[Needle], ranked: list[dict[str, Any]],
                k: int, seed: int, clean: np.ndarray, on_sample: Optional[Callable[[], None]] = None) -> dict[str, Any]:
    """The mean recall with the top-``k`` heads masked, and with ``k`` random other heads masked."""
    best = [(e["layer"], e["head"]) for e in ranked[:k]]
    rest = [(e["layer"], e["head"]) for e in ranked[k:]]
    rng = np.random.default_rng(seed)
    others = [rest[i] for i in sorted(rng.choice(len(rest), k, replace=False))]
    out: dict[str, Any] = {"k": k, "seed": seed, "recall_clean": float(clean.mean())}
    for name, chosen in (("top", best), ("random", others)):
        got = run(model, samples, needles, interventions=head_masks(chosen), scores=False, on_sample=on_sample)
        r = np.array([g["recall"] for g in got])
        out[name] = {"heads": [{"layer": l, "head": h} for l, h in chosen], "recall": float(r.mean()),
                     "drop": float(clean.mean() - r.mean())}
    return out
