"""What the views read from one Trace (trace.py): the sites to keep for each, and the arrays
they are made of, so that a command runs one traced pass per text and derives everything it
shows from it. Shapes: L layers, h heads, T tokens, d the model dimension, d_head a head's.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from attncli.hf.methods import contributions as contrib
from attncli.model.trace import Keep, Trace, qk_of, qk_sites, site, value_sites
from attncli.model.interface import has, require

PATTERNS = "blocks.*.attn.pattern"
STREAM = ("embed", "blocks.*.resid_post")


def attentions_of(tr: Trace, layers: int) -> np.ndarray:
    """(L, h, T, S) every layer's pattern."""
    return tr.stack("attn.pattern", layers)


def view_sites(layers: int, layer: int | None, *, qk: bool = False, scores: bool = False, values: bool = False,
               every_layer: bool = False, only_layer: bool = False, contributions: Sequence[int] = ()) -> list[str]:
    """The sites a view of ``layer`` reads (every layer's with ``every_layer``: the page's extra views;
    ``only_layer``: that layer's pattern, not every layer's; ``contributions``: the layers whose
    contribution matrices are read, attncli.hf.methods.contributions)."""
    sites = [site(layer, "attn.pattern")] if only_layer and layer is not None else [PATTERNS]
    sites += contrib.sites(contributions)
    chosen = range(layers) if every_layer else ([] if layer is None else [layer])
    for l in chosen:
        sites += qk_sites(l) if qk else []
        sites += [site(l, "attn.scores")] if scores else []
        sites += [site(l, "attn.v")] if values else []
    return sites


class Reads:
    """One traced pass of one text and what the views read from it. A model without a traced pass (the
    torch backend's unmapped families, T5 and BART) answers from its own methods instead, a pass each."""

    def __init__(self, model, enc, sites: list[str], *, rows: Sequence[int] | None = None,
                 heads: Sequence[int] | None = None, on_layer: Callable[[int, int], None] | None = None):
        """``rows`` / ``heads``: the pattern and scores keep only these query rows and heads (a Keep's);
        ``on_layer(l, L)`` is called as each layer is done, where the model's trace takes it (``on_layer``
        in its signature)."""
        self.model, self.enc = model, enc
        self.rows = None if rows is None else [int(r) for r in rows]
        self.heads = None if heads is None else [int(h) for h in heads]
        self.tr = None
        self.contributed: dict[tuple[str, int], np.ndarray] = {}  # (method, layer) -> (T, T), each made once
        if has(model, "trace"):
            extra = {"on_layer": on_layer} if on_layer is not None and has(model, "progress") else {}
            self.tr = model.trace(enc, Keep.of(sites, heads=heads), rows=self.rows, **extra)

    def _has(self, *names: str) -> bool:
        return self.tr is not None and all(n in self.tr for n in names)

    def attentions(self) -> np.ndarray:
        """(L, h, T, T) every layer's attention weights."""
        whole = self.rows is None and self.heads is None  # every query row and head kept
        if whole and self._has(*(site(l, "attn.pattern") for l in range(self.model.layers))):
            return attentions_of(self.tr, self.model.layers)
        return self.model.attentions(self.enc)  # a pass of its own: this trace kept less

    def pattern(self, layer: int) -> np.ndarray:
        """(h, R, T) ``layer``'s attention weights: the kept rows (every row, R = T, without ``rows``)."""
        name = site(layer, "attn.pattern")
        return self.tr[name] if self._has(name) else self.model.attentions(self.enc)[layer]

    def qk(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """q, k (h, T, d_head) of ``layer``."""
        require(self.model, "qk", "--explain (a score's q and k)")
        return qk_of(self.tr, layer) if self._has(*qk_sites(layer)) else self.model.qk(self.enc, layer)

    def scores(self, layer: int) -> np.ndarray:
        """(h, T, T) q k^T * scale of ``layer``, -inf where masked."""
        require(self.model, "qk", "--show scores")
        name = site(layer, "attn.scores")
        return self.tr[name].astype(np.float64) if self._has(name) else self.model.scores(self.enc, layer)

    def value_vectors(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """The pattern (h, T, T) and each head's value vectors through W_O (h, T, d) of ``layer``."""
        if self._has(*value_sites(layer)) and has(self.model, "contributions"):  # attn's NumPy pass: from the trace
            self.model.check_layer(layer)
            self.model.check_value_vectors()
            return self.model.value_vectors_of(self.tr, layer)
        return self.model.value_vectors(self.enc, layer)

    def contributions(self, method: str, layers: Sequence[int]) -> np.ndarray:
        """(len(layers), T, T) ``method``'s matrix of each of ``layers`` (attncli.hf.methods.contributions), from
        this pass where it kept their sites, else from a pass of their own; each layer's made once."""
        contrib.check(self.model, method)
        todo = [l for l in layers if (method, l) not in self.contributed]
        if todo:
            kept = self._has(*contrib.sites(todo)) and self.rows is None and self.heads is None  # whole layers
            made = (contrib.of_trace(self.model, self.tr, method, todo) if kept
                    else contrib.contributions(self.model, self.enc, method, todo))
            self.contributed.update(((method, l), m) for l, m in zip(todo, made))
        return np.stack([self.contributed[(method, l)] for l in layers])
