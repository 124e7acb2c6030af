"""Attention rows recomputed from a layer's captured q and k (after RoPE), on the device the layer
runs on, in chunks of query rows: the traced pass's scores and pattern.

``T`` query tokens, ``S`` key tokens, ``h`` heads, ``T'`` the query rows asked for. One chunk of
rows is (h, C, S) on the device, C chosen so that chunk holds at most ``CHUNK_BYTES``; each is
copied to a NumPy (h, T', S) float64 result before the next is made. So the device never holds
one layer's (h, T, T), and the host holds only the rows asked for.

    scores[r, j]  = q_r . k_j * scale      the layer's own ``scaling``
                  = -inf                  where j > i (a decoder) or i - j >= window (a sliding window)
    pattern[r]    = softmax(scores[r])     with i = r + (S - T), the row's position among the keys

Computed in float64 (float32 on MPS, which has no float64).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

CHUNK_BYTES = 2**26  # one chunk of scores on the device: 64 MB


def compute_dtype(torch: Any, device: Any) -> Any:
    return torch.float32 if getattr(device, "type", str(device)) == "mps" else torch.float64


def chunk_rows(h: int, S: int, itemsize: int = 8, budget: int | None = None) -> int:
    """Query rows per chunk: (h, C, S) scores of ``itemsize`` bytes in at most ``budget`` (CHUNK_BYTES)."""
    return max(1, (budget or CHUNK_BYTES) // max(1, h * S * itemsize))


def scores(q: Any, k: Any, scale: float, qi: Any, *, causal: bool, window: int | None) -> Any:
    """(h, len(qi), S) q k^T * scale for the query positions ``qi`` (a LongTensor of row indices
    among q's T), -inf where masked; on q's device, in compute_dtype."""
    import torch

    T, S = q.shape[1], k.shape[1]
    dtype = compute_dtype(torch, q.device)
    qi = qi.to(q.device)
    s = (q[:, qi].to(dtype) @ k.to(dtype).transpose(-1, -2)) * float(scale)  # (h, C, S)
    if causal:
        i, j = (qi + (S - T))[:, None], torch.arange(S, device=q.device)[None, :]
        allowed = j <= i  # (C, S)
        if window:
            allowed &= j > i - int(window)
        s = s.masked_fill(~allowed, float("-inf"))
    return s


def rows_of(q: Any, k: Any, scale: float, rows: Sequence[int] | None, *, causal: bool, window: int | None,
            want_scores: bool, want_pattern: bool, budget: int | None = None
            ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The scores and pattern (each (h, T', S) float64, or None when not wanted) of the query
    ``rows`` (None: every row), made chunk by chunk on q's device."""
    import torch

    h, T = q.shape[0], q.shape[1]
    S = k.shape[1]
    picked = list(range(T)) if rows is None else [int(r) for r in rows]
    out_s = np.empty((h, len(picked), S)) if want_scores else None
    out_a = np.empty((h, len(picked), S)) if want_pattern else None
    step = chunk_rows(h, S, torch.finfo(compute_dtype(torch, q.device)).bits // 8, budget or CHUNK_BYTES)
    for start in range(0, len(picked), step):
        qi = torch.as_tensor(picked[start:start + step], dtype=torch.long)
        s = scores(q, k, scale, qi, causal=causal, window=window)  # (h, C, S)
        if out_s is not None:
            out_s[:, start:start + len(qi)] = s.cpu().double().numpy()
        if out_a is not None:
            out_a[:, start:start + len(qi)] = s.softmax(dim=-1).cpu().double().numpy()
        del s
    return out_s, out_a
