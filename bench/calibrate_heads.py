"""Calibrate the pattern floor of ``attn heads --transformer`` on a real model (docs/transformers.md).

    python bench/calibrate_heads.py MODEL_DIR [--exclude-first] [--sentences 200]

For every (head, pattern) of an encoder (previous/next/first/separator/self) it compares two
readings over held-out Brown sentences: the mean score (the attention a row puts on the pattern's
keys, what attn heads reports) and the hard one (the share of rows whose strongest key is one of
the pattern's). A head "is" the pattern when the hard share is >= 0.5; for each candidate floor it
prints how many (head, pattern) pairs the two readings agree and disagree on.
"""

from __future__ import annotations

import argparse

import numpy as np

from attncli.attention.heads import row_scores
from attncli.tinylm.data import brown_texts
from attncli.hf import load

NAMES = ["previous_token", "next_token", "first_token", "separator", "self"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--exclude-first", action="store_true")
    ap.add_argument("--sentences", type=int, default=200)
    a = ap.parse_args()
    m = load(a.model)
    L, H = m.layers, m.heads
    mean = {n: np.zeros((L, H)) for n in NAMES}
    hard = {n: np.zeros((L, H)) for n in NAMES}
    count = 0
    for text in brown_texts(a.sentences):
        enc = m.encode(text, truncate=True)
        special = np.array(enc.special)
        seps = special.copy()
        seps[0] = False
        q = np.flatnonzero(~special)
        A = m.attentions(enc)  # (L, h, T, T)
        targets = {"previous_token": q - 1, "next_token": q + 1, "self": q, "first_token": np.zeros_like(q)}
        for layer in range(L):
            s = row_scores(A[layer], causal=False, window=3, queries=~special, separators=seps,
                           exclude_first=a.exclude_first, only=NAMES)
            W = A[layer][:, ~special].copy()  # (h, n, T)
            if a.exclude_first:
                W[..., 0] = -1.0
            strongest = W.argmax(-1)  # (h, n)
            for n in s:
                mean[n][layer] += s[n].sum(-1)
                hard[n][layer] += seps[strongest].sum(-1) if n == "separator" else (strongest == targets[n]).sum(-1)
        count += len(q)
    pairs = [(mean[n][l, h] / count, hard[n][l, h] / count) for n in mean for l in range(L) for h in range(H)
             if not (a.exclude_first and n == "first_token")]
    print(f"{len(pairs)} (head, pattern) pairs, {count} queries; a head is the pattern when >= 50% of its rows' strongest key is it")
    print("floor  both  score only  strongest-key only")
    for floor in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5):
        both = sum(s >= floor and h >= 0.5 for s, h in pairs)
        score_only = sum(s >= floor and h < 0.5 for s, h in pairs)
        hard_only = sum(s < floor and h >= 0.5 for s, h in pairs)
        print(f"{floor:5.2f}  {both:4d}  {score_only:10d}  {hard_only:18d}")


if __name__ == "__main__":
    main()
