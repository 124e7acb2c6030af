"""Two attention matrices side by side and their difference (``attn compare``).

Two inputs (or one input under two models, variants or masks) give matrices A (R_a, C_a) and
B (R_b, C_b), by token or by word. They are compared cell by cell: by word or token when both
have the same rows and columns (``align="same"``), else only with ``align="position"``, which
keeps the first min(R_a, R_b) rows and min(C_a, C_b) columns of each. The difference is
delta = B - A (positive: B attends more).

    >>> import numpy as np
    >>> c = compare(np.eye(2), np.ones((2, 2)) / 2, ["x", "y"], ["x", "y"], ["u", "v"], ["u", "w"])
    >>> c.delta.tolist(), c.key_labels
    ([[-0.5, 0.5], [0.5, -0.5]], ['u', 'v/w'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from attncli.errors import BadInput
from attncli.attention import checkpoint_views as pv

ALIGNS = ("same", "position")


@dataclass
class Comparison:
    a: np.ndarray  # (R, C)
    b: np.ndarray  # (R, C)
    delta: np.ndarray  # (R, C): b - a
    tokens_a: list[str]  # (R,)
    tokens_b: list[str]
    key_tokens_a: list[str]  # (C,)
    key_tokens_b: list[str]
    align: str
    cropped: bool  # position alignment dropped rows or columns of the longer one

    @property
    def labels(self) -> list[str]:
        return _joined(self.tokens_a, self.tokens_b)

    @property
    def key_labels(self) -> list[str]:
        return _joined(self.key_tokens_a, self.key_tokens_b)


def _joined(a: Sequence[str], b: Sequence[str]) -> list[str]:
    return [x if x == y else f"{x}/{y}" for x, y in zip(a, b)]


def compare(a: np.ndarray, b: np.ndarray, tokens_a: Sequence[str], tokens_b: Sequence[str],
            key_tokens_a: Sequence[str], key_tokens_b: Sequence[str], align: str = "same",
            unit: str = "tokens") -> Comparison:
    """A and B aligned (see the module docstring) and their difference B - A. ``unit`` names the
    rows in the refusal ("words" or "tokens")."""
    if align not in ALIGNS:
        raise BadInput(f"--align {align!r}: choose same or position")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cropped = False
    if a.shape != b.shape:
        if align != "position":
            raise BadInput(f"the two have {a.shape[0]} and {b.shape[0]} {unit} (rows) and {a.shape[1]} and "
                           f"{b.shape[1]} (columns): compare texts of the same length, or add --align position "
                           f"(the first {min(a.shape[0], b.shape[0])} of each)")
        R, C = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
        a, b, cropped = a[:R, :C], b[:R, :C], True
    R, C = a.shape
    return Comparison(a=a, b=b, delta=b - a, tokens_a=list(tokens_a[:R]), tokens_b=list(tokens_b[:R]),
                      key_tokens_a=list(key_tokens_a[:C]), key_tokens_b=list(key_tokens_b[:C]), align=align,
                      cropped=cropped)


def document(c: Comparison, a_meta: dict[str, Any], b_meta: dict[str, Any], unit: str) -> dict[str, Any]:
    """The ``--json`` document: each side's tokens, matrix and what made it; the delta B - A."""
    def side(meta, tokens, keys, m):
        if "token_texts" in meta:  # as the tokens: the first R and C of each (--align position)
            meta = {**meta, "token_texts": meta["token_texts"][:len(tokens)],
                    "key_token_texts": meta["key_token_texts"][:len(keys)]}
        return {**meta, "tokens": tokens, "key_tokens": keys, "weights": m.tolist()}

    return {"unit": unit, "align": c.align, "cropped": c.cropped,
            "a": side(a_meta, c.tokens_a, c.key_tokens_a, c.a), "b": side(b_meta, c.tokens_b, c.key_tokens_b, c.b),
            "delta": c.delta.tolist(), "delta_max_abs": float(np.abs(c.delta).max()) if c.delta.size else 0.0}
