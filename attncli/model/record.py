"""The one mechanism every NumPy forward pass records its sites through (see trace.py for the names).

An architecture's ``layer`` calls ``x = rec("attn.z", l, x)`` where a site is computed: the
recorder makes the interventions on that site (so everything downstream sees them) and holds the
array if the trace keeps it. Arrays carry a batch axis first (B texts, or B copies of one text
each with its own interventions: one layer's heads ablated as one batch); a site's shape in a
Trace is the per-text one. ``chunked_attention.attend`` is the scaled dot-product attention every
architecture shares, recording q, k, v, the scores, the pattern and z on the way: chunk by chunk of
query rows, the scores and pattern it keeps go into the arrays ``holder`` gives (only the Keep's
rows and heads), so no layer's whole (B, h, T, S) is held unless it is asked for.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from attncli.model.trace import Intervention, Keep, split

ROW_SITES = ("attn.scores", "attn.pattern")  # the sites ``rows`` cuts (query axis 2 with the batch axis)
# a site's token axes in its per-text shape (trace.py), for ``cut``; every other site: (0,)
TOKEN_AXES = {"attn.q": (1,), "attn.k": (1,), "attn.v": (1,), "attn.scores": (1, 2), "attn.pattern": (1, 2)}
AFTER_ATTENTION = ("attn.z", "attn.out", "resid_mid", "mlp.out", "resid_post")  # a layer's sites from z on


class PassDone(Exception):
    """Raised by a Recorder when it has recorded its ``stop_after`` site: nothing after it is read."""


def attention_only(keep: Keep, layers: int) -> str | None:
    """The site a pass keeping ``keep`` may stop after, or None: the last layer's z when ``keep``
    holds nothing computed from it (no later site of that layer, no final norm, no logits). A
    statistics pass keeps only the patterns: its last layer's output projection and MLP (an eighth
    of all-MiniLM-L6-v2's products: 16.5 GFLOP instead of 18.9 for 48 texts) would be for nothing."""
    last = [f"blocks.{layers - 1}.{name}" for name in AFTER_ATTENTION]
    return None if any(name in keep for name in [*last, "final_norm", "logits"]) else last[0]


class Recorder:
    """Interventions and kept sites of one pass. ``interventions`` apply to every batch element;
    ``per_batch[b]`` (optional) are batch element b's own, after those. ``stop_after``: a site
    (``attention_only``) whose recording raises PassDone, the pass's caller catching it."""

    def __init__(self, keep: Keep | None = None, interventions: Sequence[Intervention] = (),
                 per_batch: Sequence[Sequence[Intervention]] | None = None, stop_after: str | None = None):
        self.keep = keep if keep is not None else Keep()
        self.stop_after = stop_after  # the site whose recording ends the pass (PassDone), or None
        self.sites: dict[str, np.ndarray] = {}  # kept sites, with the batch axis
        self._kept: dict[str, bool] = {}  # the Keep's answer per site name, once
        self.on: dict[str, list[tuple[int | None, Intervention]]] = {}
        for iv in interventions:
            self.on.setdefault(iv.site, []).append((None, iv))
        for b, ivs in enumerate(per_batch or ()):
            for iv in ivs:
                self.on.setdefault(iv.site, []).append((b, iv))
        self._rows = None if self.keep.rows is None else np.asarray(self.keep.rows, dtype=np.int64)  # (R,)

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
        if self.kept(full):
            self.sites[full] = self.select(x) if name in ROW_SITES else x
        if full == self.stop_after:
            raise PassDone(full)
        return x

    def select(self, x: np.ndarray) -> np.ndarray:
        """The Keep's heads and rows of scores or a pattern x (B, h, T, S), in float32 if it asks."""
        if self.keep.heads is not None:
            x = x[:, list(self.keep.heads)]
        if self._rows is not None:
            x = x[:, :, self._rows]
        return x.astype(np.float32) if self.keep.float32 else x

    def intervenes(self, layer: int, names: Sequence[str]) -> bool:
        """Whether an intervention replaces one of the sites ``names`` of ``layer``."""
        return any(f"blocks.{layer}.{name}" in self.on for name in names)

    def holder(self, layer: int, name: str, shape: tuple[int, int, int, int], dtype: type) -> np.ndarray | None:
        """The array a kept ``name`` (scores or pattern, of ``shape`` (B, h, T, S) whole) of
        ``layer`` is filled into chunk by chunk (``put``): the Keep's heads and rows only, -inf
        (scores) or 0 (pattern) where no chunk writes (keys masked for every row of a chunk).
        None when the site is not kept."""
        full = f"blocks.{layer}.{name}"
        if not self.kept(full):
            return None
        B, h, T, S = shape
        h = h if self.keep.heads is None else len(self.keep.heads)
        T = T if self._rows is None else len(self._rows)
        held = np.full((B, h, T, S), -np.inf if name == "attn.scores" else 0.0,
                       dtype=np.float32 if self.keep.float32 else dtype)
        self.sites[full] = held
        return held

    def put(self, held: np.ndarray | None, x: np.ndarray, rows: slice, keys: slice) -> None:
        """Write a chunk x (B, h, c, s), query ``rows`` a..b-1 against ``keys`` lo..hi-1 of the
        whole, into ``held`` (from ``holder``; None: nothing)."""
        if held is None:
            return
        if self.keep.heads is not None:
            x = x[:, list(self.keep.heads)]
        if self._rows is None:
            held[:, :, rows, keys] = x
            return
        at = np.nonzero((self._rows >= rows.start) & (self._rows < rows.stop))[0]  # places in the Keep's rows
        if at.size:
            held[:, :, at, keys] = x[:, :, self._rows[at] - rows.start]

    def one(self, b: int = 0) -> dict[str, np.ndarray]:
        """The kept sites of batch element ``b``, per-text shapes."""
        return {name: x[b] for name, x in self.sites.items()}

    def cut(self, b: int, n: int, copy: bool = True) -> dict[str, np.ndarray]:
        """The kept sites of batch element ``b`` of a right-padded batch, every token axis cut to
        its first ``n`` tokens (its own text's): per-text shapes, copies (the batch is not held;
        ``copy=False``: views, for a caller that copies them itself)."""
        out = {}
        for name, x in self.sites.items():
            where: list[slice] = [slice(None)] * (x.ndim - 1)
            for axis in TOKEN_AXES.get(split(name)[1], (0,)):
                where[axis] = slice(0, n)
            out[name] = x[b][tuple(where)].copy() if copy else x[b][tuple(where)]
        return out
