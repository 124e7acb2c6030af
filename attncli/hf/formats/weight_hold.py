"""Weights made in memory (bfloat16 / float16 widened to float32, GGUF blocks dequantized) kept
across passes while they fit a budget, so a grid, a generation or a corpus makes each tensor once.

The budget is HOLD_BYTES (1 GiB: SmolLM2-135M's 540 MB of float32, or Gemma-3-270M's 1.07 GB,
fit), or the environment's ATTN_WEIGHTS_BUDGET (bytes, or a number and K, M or G; 0 keeps
nothing). A model whose tensors made all together fit it keeps each one once made (a loaded model
is made once); a larger one keeps none across passes, only the layer at hand (a pass holds one
layer in float32 beside the mapped file, never the model), until ``extend`` (a corpus's many
passes) lets it keep a budget's worth. One mechanism for both readers: weights.Weights
(safetensors) and gguf_reader.GGUFWeights.
"""

from __future__ import annotations

import os
import re
from typing import Hashable

import numpy as np

from attncli.errors import BadInput

HOLD_BYTES = 2**30
BUDGET_VARIABLE = "ATTN_WEIGHTS_BUDGET"
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"^\s*(\d{1,15})\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def budget() -> int:
    """Bytes of made weights a model may keep: ATTN_WEIGHTS_BUDGET when set, else HOLD_BYTES."""
    given = os.environ.get(BUDGET_VARIABLE)
    if given is None or not given.strip():
        return HOLD_BYTES
    found = SIZE.match(given)
    if not found:
        shown = given[:40].encode("unicode_escape").decode("ascii")
        raise BadInput(f"{BUDGET_VARIABLE}='{shown}' is not a size: give bytes, or a number and K, M or G "
                       "(e.g. 2G); 0 keeps no made weights across passes")
    return int(found.group(1)) * UNITS[found.group(2).upper()]


class Hold:
    """The made tensors one weights reader keeps: ``kept`` across passes (``held`` bytes of them,
    at most ``limit``), and the rest of the layer at hand (``layer``: its key and its tensors)."""

    def __init__(self, whole: int):
        """``whole``: bytes of every tensor the reader would make, from its header (nothing read)."""
        allowed = budget()
        self.limit = allowed if 0 < whole <= allowed else 0
        self.held = 0
        self.kept: dict[Hashable, np.ndarray] = {}
        self.layer: tuple[str | None, dict[Hashable, np.ndarray]] = (None, {})

    def extend(self, limit: int | None = None) -> None:
        """From now on keep up to ``limit`` bytes (None: the budget) across passes, the rest by layer."""
        self.limit = max(self.limit, budget() if limit is None else limit)

    def find(self, key: Hashable, layer: str | None) -> np.ndarray | None:
        """The tensor kept under ``key`` (of ``layer``: None outside the layers), or None."""
        if key in self.kept:
            return self.kept[key]
        if layer is not None and layer == self.layer[0]:
            return self.layer[1].get(key)
        return None

    def fits(self, nbytes: int) -> bool:
        return self.held + nbytes <= self.limit

    def keep(self, key: Hashable, layer: str | None, tensor: np.ndarray) -> np.ndarray:
        """Keep ``tensor``, just made: across passes while within the limit, else only while its
        layer is the one at hand (asking for another layer's drops it); a table outside the layers
        (an embedding, a tied head) over the limit is not kept."""
        if self.fits(tensor.nbytes):
            self.kept[key] = tensor
            self.held += tensor.nbytes
        elif layer is not None:
            if layer != self.layer[0]:
                self.layer = (layer, {})
            self.layer[1][key] = tensor
        return tensor
