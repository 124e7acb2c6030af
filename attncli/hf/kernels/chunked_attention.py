"""Scaled dot-product attention by chunks of query rows, as transformers' ``eager_attention_forward``
computes it whole: per chunk of c rows, scores (B, h, c, s) -> softmax -> z, so no layer's
(B, h, T, S) is ever held unless a kept site asks for the whole pattern or an intervention replaces
part of it.

    for rows a..b-1 (c = b - a rows, as many as fit CHUNK_BYTES of scores):
        lo, hi  = the keys any of these rows may see (causal: none past b-1; a sliding window: none
                  before a - window + 1); every other key is masked for every row of the chunk
        scores  = q[a:b] k[lo:hi]^T * scale (+ bias) , -inf where the mask says no    (B, h, c, s)
        pattern = softmax(scores) over the s keys, row by row                        (B, h, c, s)
        z[a:b]  = pattern v[lo:hi]                                                    (B, c, h, d_head)

Each row sees all its keys in one chunk, so its softmax is the plain one (no running max and
rescaling as FlashAttention, Dao et al. 2022, which splits the keys too). A key outside lo..hi has
weight exactly 0 and score -inf, as the whole computation gives it. Grouped-query attention: the
g = h / h_kv query heads of a key-value head are stacked into one product with its keys, which are
never repeated unless a kept or replaced k or v site needs them per query head. q may come as
``Queries``, made for each chunk's rows (Llama: so its whole q is never held), and every chunk's
scores are written into one buffer of CHUNK_BYTES.

Shapes: B texts, T query rows, S keys (T, or more with a cache: the queries are positions P..P+T-1),
h query heads, h_kv key-value heads, d_head a head's width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from attncli.hf.kernels import blas
from attncli.model.record import ROW_SITES, Recorder
from attncli.hf.checks.weight_check import check_finite
from attncli.numeric import softmax

CHUNK_BYTES = 4 * 2**20  # one chunk's scores at most: at 8,192 tokens and 30 layers, 8 MiB took about 10% less
# CPU and peaked 5 MiB higher (764 MiB against 770 MiB allowed); 16 MiB ran no faster and held 40 MiB more


@dataclass(frozen=True)
class Mask:
    """Which keys each query row may attend, made per chunk (never a (T, S) array): query row i,
    at position P + i of the S keys (P = ``offset``, the tokens a cache holds), sees key j when j
    is a real token (``real[b, j]``; None: all are) or j = P + i (a padding query sees itself, so
    no row has every key masked), and, if ``causal``, j <= P + i, and in a sliding ``window``,
    P + i - j < window. A masked key gets weight exactly 0."""
    real: np.ndarray | None = None  # (B, S) bool
    causal: bool = False
    offset: int = 0
    window: int | None = None

    def windowed(self, window: int | None) -> "Mask":
        return self if window is None else replace(self, window=window)

    def span(self, a: int, b: int, S: int) -> tuple[int, int]:
        """(lo, hi): the keys lo..hi-1 any of query rows a..b-1 may see."""
        hi = min(S, self.offset + b) if self.causal else S
        lo = max(0, self.offset + a - self.window + 1) if self.window is not None else 0
        return lo, hi

    def rows(self, a: int, b: int, lo: int, hi: int) -> tuple[int, np.ndarray | None]:
        """(start, allowed): may query row i (a..b-1) see key j (start..hi-1), allowed (B or 1, 1,
        b - a, hi - start) bool; every row sees every key lo..start-1 (causal alone: the keys before
        the chunk's first row). allowed None: every row sees every key."""
        if self.real is None and not self.causal and self.window is None:
            return lo, None
        start = max(lo, self.offset + a) if self.real is None and self.window is None else lo
        i = np.arange(self.offset + a, self.offset + b)[:, None]  # (c, 1) positions
        j = np.arange(start, hi)[None]  # (1, s')
        ok = np.ones((b - a, hi - start), dtype=bool)
        if self.causal:
            ok &= j <= i
        if self.window is not None:
            ok &= (i - j) < self.window
        if self.real is None:
            return start, ok[None, None]
        return start, ok[None, None] & (self.real[:, None, None, start:hi] | (j == i)[None, None])  # (B, 1, c, s')


@dataclass(frozen=True)
class Queries:
    """q made chunk by chunk instead of held whole (Llama: projected and rotated for those rows
    only): ``make(a, b)`` gives query rows a..b-1 (B, h, b - a, d_head), the rows a..b-1 of a whole
    q of ``shape`` (B, h, T, d_head). ``attend`` makes it whole, make(0, T), when the q site is kept
    or replaced or an intervention needs the whole scores."""
    shape: tuple[int, int, int, int]
    dtype: np.dtype
    make: Callable[[int, int], np.ndarray]


def chunk_rows(T: int, row_bytes: int, budget: int | None = None) -> int:
    """How many query rows one chunk takes: as many as keep its scores (``row_bytes`` a row) within
    ``budget`` bytes (CHUNK_BYTES), at least one, at most T."""
    budget = CHUNK_BYTES if budget is None else budget
    return max(1, min(T, budget // max(1, row_bytes)))


def attend(rec: Recorder, l: int, q: np.ndarray | Queries, k: np.ndarray, v: np.ndarray, scale: float,
           mask: Mask, bias: np.ndarray | None = None, score_dtype: type | None = None) -> np.ndarray:
    """Attention of layer ``l``, its sites recorded by ``rec``: q (B, h, T, d_head) and k, v
    (B, h_kv, S, d_head) after RoPE (h_kv divides h: grouped-query attention, query head i reads
    key-value head i // (h / h_kv)), or q as ``Queries`` made per chunk; bias (1, h, T, S) added to the scores (MPNet) or None;
    ``score_dtype``: the scores and pattern in that dtype (Llama: float64 from float32 q, k), unless
    the Keep asks for float32 and q is float32 (then float32, twice as fast).
    Returns the heads' outputs z merged, (B, T, h d_head), ready for the output projection."""
    B, h, T, d_head = q.shape
    whole = rec.intervenes(l, ROW_SITES)  # an intervention replaces part of the whole scores or pattern
    if isinstance(q, Queries) and (whole or rec.wants(f"blocks.{l}.attn.q")):
        q = q.make(0, T)  # (B, h, T, d_head)
    if not isinstance(q, Queries):
        q = rec("attn.q", l, q)
    if k.shape[1] != h and any(rec.wants(f"blocks.{l}.{name}") for name in ("attn.k", "attn.v")):
        k, v = (np.repeat(t, h // t.shape[1], axis=1) for t in (k, v))  # (B, h, S, d_head): the sites' shape
    if k.shape[1] == h:
        k, v = rec("attn.k", l, k), rec("attn.v", l, v)
    S = k.shape[2]
    dtype = np.dtype(score_dtype) if score_dtype is not None else np.result_type(q, k)
    if rec.keep.float32 and q.dtype == np.float32:  # the view asks no more: as transformers' eager attention
        dtype = np.dtype(np.float32)
    k = k.astype(dtype, copy=False)  # (B, h_kv, S, d_head)
    c = T if whole else chunk_rows(T, B * h * S * dtype.itemsize)
    held = {name: None if whole else rec.holder(l, name, (B, h, T, S), dtype) for name in ROW_SITES}
    z = np.empty((B, T, h, d_head), dtype=v.dtype)
    # every chunk's scores in one buffer: chunks of a growing number of keys (causal) each allocated
    # anew left the allocator's heap fragmented, 40 MiB more resident at 8,192 tokens
    buffer = None if whole else np.empty(B * h * c * S, dtype=dtype)
    with blas.one_thread():  # a chunk's products are small: two threads wait on each other (blas.py)
        for a in range(0, T, c):
            _chunk(rec, l, q, k, v, z, scale, mask, bias, dtype, buffer, held, a, min(T, a + c))
    z = rec("attn.z", l, z)
    return z.reshape(B, T, h * d_head)


def _chunk(rec: Recorder, l: int, q: np.ndarray | Queries, k: np.ndarray, v: np.ndarray, z: np.ndarray, scale: float,
           mask: Mask, bias: np.ndarray | None, dtype: np.dtype, buffer: np.ndarray | None, held: dict,
           a: int, b: int) -> None:
    """Query rows a..b-1 of ``attend``: their scores (in ``buffer``; None: the whole computation,
    a new array), pattern (recorded, or put into ``held``) and z[:, a:b] (B, c, h, d_head)."""
    B, h, T, d_head = q.shape
    h_kv, S = k.shape[1], k.shape[2]
    g = h // h_kv
    whole = buffer is None
    lo, hi = (0, S) if whole else mask.span(a, b, S)
    qc = q.make(a, b) if isinstance(q, Queries) else q[:, :, a:b]  # (B, h, c, d_head)
    qc = qc.astype(dtype, copy=False).reshape(B, h_kv, g * (b - a), d_head)  # a group's heads stacked
    shape = (B, h_kv, g * (b - a), hi - lo)
    out = None if whole else buffer[: math.prod(shape)].reshape(shape)
    scores = np.matmul(qc, k[:, :, lo:hi].swapaxes(-1, -2), out=out).reshape(B, h, b - a, hi - lo)  # (B, h, c, s)
    scores *= scale
    if bias is not None:
        scores += bias[:, :, a:b, lo:hi]
    start, allowed = mask.rows(a, b, lo, hi)  # (B or 1, 1, c, hi - start): keys lo..start-1 all seen
    if allowed is not None:
        np.copyto(scores[..., start - lo:], -np.inf, where=~allowed)
    if whole:
        scores = rec("attn.scores", l, scores)
    rec.put(held["attn.scores"], scores, slice(a, b), slice(lo, hi))
    pattern = scores.copy() if whole else scores  # (B, h, c, s), the softmax written over it: a row that
    # holds NaN or +inf (sum NaN) or has every key masked (sum 0) is refused: "damaged model: NaN in ..."
    softmax(pattern, out=pattern, check=lambda total: check_finite(np.where(total > 0, total, np.nan),
                                                                   f"layer {l}'s attention"))
    if whole:
        pattern = rec("attn.pattern", l, pattern)
        check_finite(pattern, f"layer {l}'s attention")  # as an intervention left it
    rec.put(held["attn.pattern"], pattern, slice(a, b), slice(lo, hi))
    mixed = pattern.astype(v.dtype, copy=False).reshape(B, h_kv, g * (b - a), hi - lo) @ v[:, :, lo:hi]
    z[:, a:b] = mixed.reshape(B, h, b - a, d_head).transpose(0, 2, 1, 3)  # (B, c, h, d_head)
