"""A key/value cache that holds no attentions (``NumpyPretrained.new_rows_cache``): greedy decoding
over a long prompt that records only the decoded positions' attention rows. numpy_cache.KVCache
keeps every row it has computed ((L, h, S, S): 8 GB at 2,048 tokens on a 30-layer, 9-head model) and
every position's logits; this one keeps each layer's keys and values, and each ``extend`` returns
the last new token's logits and the new tokens' kept rows alone.

Shapes: L layers, h query heads, P tokens cached, n new ones, S = P + n keys, V the vocabulary.

    extend(ids, rows)   the longest prefix of ``ids`` already cached is kept (at least the last
                        token is run again), the rest runs through every layer against the cached
                        k, v (the attention by chunks of query rows: chunked_attention.py), and
                        -> logits (V,) of the last token, pattern (L, h, len(rows), S) float32 of the
                           new tokens ``rows`` (indices among the n new ones; default: the last one).
                        The scores and softmax run in float32 where q and k are float32 (the
                        Llama family; a quarter less CPU than float64's at 1,500 tokens on SmolLM2).

``interventions`` (fixed when the cache is made: the cached keys and values were computed under
them) are made in every pass, the prompt's and each step's, as a trace makes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.hf.checks.weight_check import check_activations, check_finite
from attncli.hf.kernels.chunked_attention import Mask
from attncli.model.record import Recorder
from attncli.model.trace import Intervention, Keep

if TYPE_CHECKING:
    from attncli.hf.backends.numpy_backend import NumpyPretrained


class RowsCache:
    """Keys and values of the tokens a decoder has read, under fixed ``interventions``."""

    def __init__(self, model: "NumpyPretrained", interventions: Sequence[Intervention] = ()):
        self.model = model
        self.interventions = tuple(interventions)
        self.ids: list[int] = []
        self.keys: list[np.ndarray] = []  # per layer (1, h, P, d_head) (repeated per query head under GQA)
        self.values: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.ids)

    def extend(self, ids: Sequence[int], rows: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(logits (V,) of the last of ``ids``, pattern (L, h, R, S) of the new tokens' ``rows``)."""
        model, arch = self.model, self.model.arch
        arr = model.check_ids(ids)  # (S,)
        P = 0
        while P < min(len(self.ids), len(arr) - 1) and self.ids[P] == arr[P]:
            P += 1
        if P < len(self.ids):  # diverged (or the same ids again): keep the common prefix
            self.ids = self.ids[:P]
            self.keys, self.values = ([t[:, :, :P] for t in kept] if P else [] for kept in (self.keys, self.values))
        new = arr[None, P:]  # (1, n)
        n = new.shape[1]
        rows = (n - 1,) if rows is None else tuple(int(r) for r in rows)
        if any(not 0 <= r < n for r in rows):
            raise BadInput(f"rows must lie among the {n} new tokens")
        x = arch.embeddings(new, np.zeros_like(new), np.ones_like(new, dtype=bool), offset=P)  # (1, n, d)
        keys = Mask(causal=True, offset=P)  # query i (position P + i) sees keys j <= P + i
        rec = Recorder(Keep(("blocks.*.attn.pattern", "blocks.*.attn.k", "blocks.*.attn.v"), rows=rows,
                            float32=True), self.interventions)  # float32 scores, as transformers' eager pass
        if hasattr(arch.w, "hold_widened"):  # many passes: dequantized or widened weights kept across them
            arch.w.hold_widened()
        with model.running(n):
            for l in range(arch.layers):
                x = arch.layer(l, rec("resid_pre", l, x), keys, rec, (self.keys[l], self.values[l]) if P else None)
                check_activations(l, x)
                x = rec("resid_post", l, x)
                k, v = rec.sites.pop(f"blocks.{l}.attn.k"), rec.sites.pop(f"blocks.{l}.attn.v")  # (1, h, S, d_head)
                if P:
                    self.keys[l], self.values[l] = k, v
                else:
                    self.keys.append(k)
                    self.values.append(v)
            logits = arch.logits(arch.final(x[:, -1:])[0])[0]  # (V,)
            check_finite(logits, "the logits")
        self.ids = [int(i) for i in arr]
        pattern = np.stack([rec.sites[f"blocks.{l}.attn.pattern"][0] for l in range(arch.layers)])  # (L, h, R, S)
        return logits, pattern
