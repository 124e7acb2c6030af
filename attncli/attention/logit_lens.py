"""The logit lens (nostalgebraist 2020, "interpreting GPT: the logit lens"): what a decoder
would predict if it stopped after layer l, read by applying its final norm and unembedding to the
residual stream there.

    probs_l = softmax(unembed(final_norm(x_l)))     x_0 = the embeddings, x_L = the last layer's output

so the last row is the model's own next-token distribution. Shapes: ``L`` layers, ``T`` positions,
``d`` width, ``V`` vocabulary, ``k`` tokens kept per cell.

    >>> import numpy as np
    >>> stream = np.array([[[0.0, 1.0]], [[2.0, 0.0]]])  # (L + 1 = 2, T = 1, d = 2)
    >>> r = logit_lens(stream, lambda x: x, k=1)        # the identity as norm + unembedding: V = 2
    >>> r.top_ids[:, 0, 0].tolist(), first_top_layer(r.top_ids[:, 0, 0], 0)
    ([1, 0], 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from attncli.numeric import softmax

SOURCE = "nostalgebraist 2020, interpreting GPT: the logit lens (LessWrong)"
BLOCK = 512  # residual vectors per to_logits call: 512 x 50257 GPT-2 logits are 100 MB in float32


@dataclass
class Lens:
    top_ids: np.ndarray  # (L + 1, T, k) the k most probable next tokens, best first
    top_probs: np.ndarray  # (L + 1, T, k)
    follow_rank: Optional[np.ndarray] = None  # (L + 1, T) rank of the followed token (0 = the top), or None
    follow_prob: Optional[np.ndarray] = None  # (L + 1, T)


def top_k(p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest entries of each row of ``p`` (n, V), best first (ties: the lower id first):
    ids (n, k) and values (n, k). One argmax per rank, each found entry then set to -inf in ``p``
    itself, which is spent: for k <= 20 of V = 50257 several times faster than an argpartition,
    whose (n, V) int64 index array alone is 100 MB for 260 rows."""
    n = p.shape[0]
    kk = min(k, p.shape[-1])
    rows = np.arange(n)
    ids = np.empty((n, kk), dtype=np.int64)
    values = np.empty((n, kk), dtype=p.dtype)
    for rank in range(kk):
        best = p.argmax(axis=-1)  # (n,)
        ids[:, rank], values[:, rank] = best, p[rows, best]
        p[rows, best] = -np.inf
    return ids, values


def logit_lens(stream: np.ndarray, to_logits: Callable[[np.ndarray], np.ndarray], k: int = 5,
               follow: Optional[int] = None) -> Lens:
    """The lens of ``stream`` (L + 1, T, d): per layer and position the top ``k`` tokens and their
    probabilities; with ``follow`` (a token id), that token's rank and probability everywhere.
    ``to_logits`` maps (n, d) residual vectors to (n, V) logits (final norm, then unembedding). It
    is called on as many layers at once as fit ``BLOCK`` logits (one tall product is several times
    faster than L + 1 short ones), so memory holds one block, never all (L + 1) T V logits."""
    n_layers, T, d = stream.shape
    top_ids, top_probs, ranks, probs_f = [], [], [], []
    per_block = max(1, BLOCK // max(T, 1))
    for start in range(0, n_layers, per_block):
        group = stream[start:start + per_block]  # (g, T, d)
        logits = np.asarray(to_logits(group.reshape(-1, d)))  # (g T, V), the dtype to_logits gives
        p = softmax(logits)  # (g T, V), one new array
        if follow is not None:
            pf = p[:, follow]  # (g T,)
            probs_f.append(pf.astype(np.float64).reshape(-1, T))
            ranks.append((p > pf[:, None]).sum(axis=-1).reshape(-1, T))  # tokens strictly more probable
        ids, probs = top_k(p, k)  # (g T, kk) each, best first; p is spent
        top_ids.append(ids.reshape(-1, T, ids.shape[-1]))
        top_probs.append(probs.astype(np.float64).reshape(-1, T, ids.shape[-1]))
    lens = Lens(np.concatenate(top_ids), np.concatenate(top_probs))
    if follow is not None:
        lens.follow_rank, lens.follow_prob = np.concatenate(ranks), np.concatenate(probs_f)
    return lens


def first_top_layer(top1: np.ndarray, token: int) -> Optional[int]:
    """The first layer (index into ``top1`` (L + 1,), the top token at one position per layer)
    from which ``token`` is the top prediction in every later layer too; None if the last isn't."""
    top1 = np.asarray(top1)
    if top1.size == 0 or top1[-1] != token:
        return None
    layer = top1.size - 1
    while layer > 0 and top1[layer - 1] == token:
        layer -= 1
    return int(layer)
