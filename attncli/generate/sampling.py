"""The softmax over the vocabulary and how the next token is picked from it.

Shapes: V vocabulary size. Probabilities are float64 (a float32 softmax over 50k tokens loses
the small ones).

    p_model  = softmax(z)                             what the model says (temperature 1)
    p_sample = softmax(z / T) on the top-k logits     what is sampled from (0 elsewhere)

Banned tokens (the built-in LM's ``<unk>``: "some other word" is not a word it can write) get
no probability in ``p_sample``; ``p_model`` keeps them, it is the model's own distribution.
"""

from __future__ import annotations

import numpy as np

from attncli import numeric
from attncli.errors import BadInput

MAX_TEMPERATURE = 1000.0


def softmax(z: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """(V,) float64 softmax(z / temperature); -inf entries get exactly 0. The max is subtracted
    before the division, so the top logit's term is exactly 1 for any temperature > 0; a tiny one
    (5e-324) sends every other to -inf (probability exactly 0: the argmax), with no warning."""
    return numeric.softmax(np.asarray(z, dtype=np.float64), temperature)  # (V,)


def check_sampling(temperature: float, top_k: int | None) -> None:
    if temperature <= 0:
        raise BadInput(f"--temperature must be > 0 (got {temperature}); "
                       "for the most probable token at every step use --greedy")
    if not np.isfinite(temperature) or temperature > MAX_TEMPERATURE:
        raise BadInput(f"--temperature must be a number in (0, {MAX_TEMPERATURE:g}] (got {temperature})")
    if top_k is not None and top_k < 0:
        raise BadInput(f"--top-k must be 0 (the whole vocabulary) or more (got {top_k})")


def allowed_logits(z: np.ndarray, banned: tuple[int, ...] = ()) -> np.ndarray:
    """(V,) float64 logits with the banned tokens at -inf (an id outside 0..V-1 is no token: passed over)."""
    z = np.array(z, dtype=np.float64)
    inside = [i for i in banned if 0 <= i < z.shape[0]]
    if inside:
        z[inside] = -np.inf
    return z


def sampling_distribution(z: np.ndarray, *, temperature: float = 1.0, top_k: int | None = None,
                          banned: tuple[int, ...] = ()) -> np.ndarray:
    """(V,) float64: softmax(z / T) over the ``top_k`` largest allowed logits (0 or None: all), 0 elsewhere.

    Ties at the k-th logit are broken by token id (a stable sort), so the set is deterministic.
    """
    z = allowed_logits(z, banned)
    if top_k and top_k < np.isfinite(z).sum():  # None or 0: no cut
        keep = np.zeros(z.shape, dtype=bool)
        keep[largest(z, top_k)] = True
        z = np.where(keep, z, -np.inf)
    return softmax(z, temperature)


def greedy_choice(z: np.ndarray, banned: tuple[int, ...] = ()) -> int:
    """argmax of the allowed logits (the lowest id on a tie, as np.argmax)."""
    return int(np.argmax(allowed_logits(z, banned)))


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from ``p`` by inverse CDF with one ``rng.random()``: the same seed, the same token."""
    cdf = np.cumsum(p)  # (V,)
    u = rng.random() * cdf[-1]
    i = int(np.searchsorted(cdf, u, side="right"))
    i = min(i, len(p) - 1)
    while p[i] == 0:  # u fell on the edge of a zero-probability token: take the last one that has mass
        i -= 1
    return i


def top_candidates(p: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` most probable ids with their probabilities, most probable first (ties by id)."""
    return [(int(i), float(p[i])) for i in largest(p, k)]


def largest(z: np.ndarray, k: int) -> np.ndarray:
    """The ids of the ``k`` largest of ``z`` (V,), largest first, ties by id: argsort(-z, kind="stable")[:k],
    without sorting all V (a 49,152-token vocabulary's sort was 6% of a generated token's time)."""
    if k >= len(z):
        return np.argsort(-z, kind="stable")[:k]
    kth = np.partition(z, len(z) - k)[len(z) - k]  # the k-th largest value
    ids = np.flatnonzero(z >= kth)  # (>= k,) every id at or above it, ties at it included, in id order
    return ids[np.argsort(-z[ids], kind="stable")[:k]]
