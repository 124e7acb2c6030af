"""What the views read from one Trace (trace.py): the sites to keep for each, and the arrays
they are made of, so that a command runs one traced pass per text and derives everything it
shows from it. Shapes: L layers, h heads, T tokens, d the model dimension, d_head a head's.
"""

from __future__ import annotations

import numpy as np

from attncli.transformer.trace import Trace, site

PATTERNS = "blocks.*.attn.pattern"
STREAM = ("embed", "blocks.*.resid_post")


def qk_sites(layer: int) -> list[str]:
    return [site(layer, "attn.q"), site(layer, "attn.k")]


def value_sites(layer: int) -> list[str]:
    return [site(layer, "attn.pattern"), site(layer, "attn.v")]


def attentions_of(tr: Trace, layers: int) -> np.ndarray:
    """(L, h, T, S) every layer's pattern."""
    return tr.stack("attn.pattern", layers)


def qk_of(tr: Trace, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """q, k (h, T, d_head) float64 of ``layer``."""
    return tr[site(layer, "attn.q")].astype(np.float64), tr[site(layer, "attn.k")].astype(np.float64)


def stream_of(tr: Trace, layers: int) -> np.ndarray:
    """(L + 1, T, d) the embeddings and each layer's resid_post (before the final norm)."""
    return np.stack([tr["embed"]] + [tr[site(l, "resid_post")] for l in range(layers)])
