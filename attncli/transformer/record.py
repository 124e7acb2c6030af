"""The one mechanism every NumPy forward pass records its sites through (see trace.py for the names).

An architecture's ``layer`` calls ``x = rec("attn.z", l, x)`` where a site is computed: the
recorder makes the interventions on that site (so everything downstream sees them) and holds the
array if the trace keeps it. Arrays carry a batch axis first (B texts, or B copies of one text
each with its own interventions: one layer's heads ablated as one batch); a site's shape in a
Trace is the per-text one. ``attend`` is the scaled dot-product attention every architecture shares,
recording q, k, v, the scores, the pattern and z on the way.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from attncli.transformer import ops
from attncli.transformer.trace import Intervention, Keep, split

ROW_SITES = ("attn.scores", "attn.pattern")  # the sites ``rows`` cuts (query axis 2 with the batch axis)
# a site's token axes in its per-text shape (trace.py), for ``cut``; every other site: (0,)
TOKEN_AXES = {"attn.q": (1,), "attn.k": (1,), "attn.v": (1,), "attn.scores": (1, 2), "attn.pattern": (1, 2)}


class Recorder:
    """Interventions and kept sites of one pass. ``interventions`` apply to every batch element;
    ``per_batch[b]`` (optional) are batch element b's own, after those."""

    def __init__(self, keep: Keep | None = None, interventions: Sequence[Intervention] = (),
                 per_batch: Sequence[Sequence[Intervention]] | None = None):
        self.keep = keep if keep is not None else Keep()
        self.sites: dict[str, np.ndarray] = {}  # kept sites, with the batch axis
        self._kept: dict[str, bool] = {}  # the Keep's answer per site name, once
        self.on: dict[str, list[tuple[int | None, Intervention]]] = {}
        for iv in interventions:
            self.on.setdefault(iv.site, []).append((None, iv))
        for b, ivs in enumerate(per_batch or ()):
            for iv in ivs:
                self.on.setdefault(iv.site, []).append((b, iv))
        self.pattern: np.ndarray | None = None  # the last layer's pattern (B, h, T, S), for the damage check

    def kept(self, name: str) -> bool:
        if name not in self._kept:
            self._kept[name] = name in self.keep
        return self._kept[name]

    def wants(self, name: str) -> bool:
        """Whether anything reads or replaces site ``name`` (a full name): else it need not be computed."""
        return self.kept(name) or name in self.on

    def __call__(self, name: str, layer: int | None, x: np.ndarray) -> np.ndarray:
        """``x`` (B, ...) at site ``name`` of ``layer`` (None: a model site) after its interventions."""
        full = name if layer is None else f"blocks.{layer}.{name}"
        ivs = self.on.get(full)
        if ivs:
            x = np.array(x, copy=True)
            for b, iv in ivs:
                for i in range(x.shape[0]) if b is None else (b,):
                    x[i] = iv.apply(x[i])
        if name == "attn.pattern":
            self.pattern = x
        if self.kept(full):
            rows = self.keep.rows
            self.sites[full] = x[:, :, list(rows)] if rows is not None and name in ROW_SITES else x
        return x

    def one(self, b: int = 0) -> dict[str, np.ndarray]:
        """The kept sites of batch element ``b``, per-text shapes."""
        return {name: x[b] for name, x in self.sites.items()}

    def cut(self, b: int, n: int) -> dict[str, np.ndarray]:
        """The kept sites of batch element ``b`` of a right-padded batch, every token axis cut to
        its first ``n`` tokens (its own text's): per-text shapes, copies (the batch is not held)."""
        out = {}
        for name, x in self.sites.items():
            where: list[slice] = [slice(None)] * (x.ndim - 1)
            for axis in TOKEN_AXES.get(split(name)[1], (0,)):
                where[axis] = slice(0, n)
            out[name] = x[b][tuple(where)].copy()
        return out


def attend(rec: Recorder, l: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
           allowed: np.ndarray | None, bias: np.ndarray | None = None,
           score_dtype: type | None = None) -> np.ndarray:
    """Scaled dot-product attention as transformers' ``eager_attention_forward``, its sites recorded.

    q (B, h, T, d_head), k, v (B, h, S, d_head) (after RoPE, repeated per query head under GQA);
    allowed (B, 1, T, S) bool or None; bias (1, h, T, S) added to the scores (MPNet) or None;
    ``score_dtype``: the scores and pattern in that dtype (Llama: float64 from float32 q, k).
    Returns the heads' outputs z merged, (B, T, h d_head), ready for the output projection."""
    q, k, v = rec("attn.q", l, q), rec("attn.k", l, k), rec("attn.v", l, v)
    if score_dtype is not None:
        scores = (q.astype(score_dtype) @ k.astype(score_dtype).swapaxes(-1, -2)) * scale  # (B, h, T, S)
    else:
        scores = (q @ k.swapaxes(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    scores = rec("attn.scores", l, scores)
    pattern = rec("attn.pattern", l, ops.softmax(scores))  # (B, h, T, S)
    z = (pattern.astype(v.dtype, copy=False) @ v).transpose(0, 2, 1, 3)  # (B, T, h, d_head)
    z = rec("attn.z", l, z)
    B, T, h, dh = z.shape
    return z.reshape(B, T, h * dh)

