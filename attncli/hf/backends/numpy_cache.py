"""The key/value cache of attn's NumPy decoders (``NumpyPretrained.new_cache``): the keys and values,
logits and attentions of the tokens already read, so ``logits_and_attentions`` of a longer sequence
runs only the new tokens' queries against them (in a causal model earlier rows do not change as
tokens are added). Shapes: L layers, h query heads, P tokens cached, n new ones, S = P + n keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attncli.hf.kernels.chunked_attention import Mask
from attncli.model.record import Recorder
from attncli.model.trace import Keep
from attncli.hf.checks.weight_check import check_activations, check_finite

if TYPE_CHECKING:
    from attncli.hf.backends.numpy_backend import NumpyPretrained


class KVCache:
    """Keys and values (and the results so far) of the tokens a decoder has already read."""

    def __init__(self, layers: int):
        self.layers = layers
        self.clear()

    def clear(self) -> None:
        self.ids: list[int] = []
        self.keys: list[np.ndarray] = []  # per layer (1, h, P, d_head)
        self.values: list[np.ndarray] = []
        self.logits = np.zeros((0, 0))  # (P, V)
        self.attentions = np.zeros((self.layers, 0, 0, 0))  # (L, h, P, P)

    def __len__(self) -> int:
        return len(self.ids)

    def extend(self, model: "NumpyPretrained", ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T, V) logits and (L, h, T, T) attentions of ``ids``, running only what is new."""
        P = 0
        while P < min(len(self.ids), len(ids)) and self.ids[P] == ids[P]:
            P += 1
        if P < len(self.ids):  # the sequence diverged from the cached one: keep the common prefix
            self._truncate(P)
        if P == len(ids):
            return self.logits[:P].copy(), self.attentions[:, :, :P, :P].copy()
        new = ids[None, P:]  # (1, n)
        n, S = new.shape[1], len(ids)
        arch = model.arch
        x = arch.embeddings(new, np.zeros_like(new), np.ones_like(new, dtype=bool), offset=P)  # (1, n, d)
        keys = Mask(causal=True, offset=P)  # query i (position P + i) sees keys j <= P + i
        rec = Recorder(Keep.of(["blocks.*.attn.pattern", "blocks.*.attn.k", "blocks.*.attn.v"]))
        with model.running(n):
            for l in range(arch.layers):
                past = (self.keys[l], self.values[l]) if P else None
                x = arch.layer(l, x, keys, rec, past)
                check_activations(l, x)
                k, v = rec.sites[f"blocks.{l}.attn.k"], rec.sites[f"blocks.{l}.attn.v"]  # (1, h, S, d_head)
                if P:
                    self.keys[l], self.values[l] = k, v
                else:
                    self.keys.append(k)
                    self.values.append(v)
            logits = arch.logits(arch.final(x)[0])  # (n, V)
            check_finite(logits, "the logits")
        rows = [rec.sites[f"blocks.{l}.attn.pattern"][0] for l in range(arch.layers)]  # L x (h, n, S)
        attentions = np.zeros((self.layers, rows[0].shape[0], S, S))  # (L, h, S, S)
        if P:
            attentions[:, :, :P, :P] = self.attentions
        attentions[:, :, P:, :] = np.stack(rows)
        self.attentions = attentions
        self.logits = logits if P == 0 else np.concatenate([self.logits, logits])
        self.ids = [int(i) for i in ids]
        return self.logits.copy(), self.attentions.copy()

    def _truncate(self, P: int) -> None:
        if P == 0:
            self.clear()
            return
        self.ids = self.ids[:P]
        self.keys = [k[:, :, :P] for k in self.keys]
        self.values = [v[:, :, :P] for v in self.values]
        self.logits = self.logits[:P]
        self.attentions = self.attentions[:, :, :P, :P]
