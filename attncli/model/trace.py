"""One traced forward pass: named sites, the ones to keep, and interventions by name.

Every backend (attn's NumPy passes, and transformers' own modules under forward hooks) records
the same sites under the same names, so a view, an ablation or a patch reads one trace whatever
ran it. Shapes are for one text: T query tokens, S key tokens (S = T without a cache), d the
model dimension, h query heads, d_head a head's dimension, V the vocabulary.

    embed                     (T, d)          the embeddings (token + position [+ type]), layer 0's input
    blocks.{l}.resid_pre      (T, d)          the residual stream into layer l
    blocks.{l}.attn.q         (h, T, d_head)  queries (after RoPE where the model rotates)
    blocks.{l}.attn.k         (h, S, d_head)  keys (after RoPE), repeated per query head under GQA
    blocks.{l}.attn.v         (h, S, d_head)  values, repeated per query head under GQA
    blocks.{l}.attn.scores    (h, T, S)       q k^T * scale (+ a relative position bias), -inf where masked
    blocks.{l}.attn.pattern   (h, T, S)       softmax(scores): the attention weights
    blocks.{l}.attn.z         (T, h, d_head)  each head's mix of values, pattern @ v
    blocks.{l}.attn.out       (T, d)          the attention block's output, z W_O + b_O
    blocks.{l}.resid_mid      (T, d)          the stream between attention and MLP (post-LN models: after the LN)
    blocks.{l}.mlp.out        (T, d)          the MLP's output
    blocks.{l}.resid_post     (T, d)          the stream out of layer l (blocks.{l+1}.resid_pre)
    final_norm                (T, d)          the final norm's output (a model without one: the last resid_post)
    logits                    (T, V)          decoders, and encoders with their MLM head

A Keep with ``rows`` and ``heads`` cuts the scores and pattern to (heads, rows, S), in that order.

An intervention names a site and replaces all of it, one head's slice (the head axis: 1 for
``attn.z``, 0 for q, k, v, scores and pattern) or one position (the T axis), with zeros or with
a given value (a mean over reference texts, or the same site of another input's trace). The
replacement is made where the site is computed, so everything downstream sees it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from attncli.errors import BadInput

LAYER_SITES = ("resid_pre", "attn.q", "attn.k", "attn.v", "attn.scores", "attn.pattern", "attn.z",
               "attn.out", "resid_mid", "mlp.out", "resid_post")
MODEL_SITES = ("embed", "final_norm", "logits")
# the axis of a site's array that runs over heads, and the one that runs over query tokens
HEAD_AXIS = {"attn.q": 0, "attn.k": 0, "attn.v": 0, "attn.scores": 0, "attn.pattern": 0, "attn.z": 1}
POSITION_AXIS = {"attn.q": 1, "attn.k": 1, "attn.v": 1, "attn.scores": 1, "attn.pattern": 1}  # others: 0
MODES = ("zero", "mean", "replace")
_LAYER_SITE = re.compile(r"blocks\.(\d+)\.(.+)")


def site(layer: int, name: str) -> str:
    """``blocks.{layer}.{name}``, checked: ``name`` is one of LAYER_SITES."""
    if name not in LAYER_SITES:
        raise BadInput(f"no site '{name}' in a layer: the sites are {', '.join(LAYER_SITES)}")
    return f"blocks.{layer}.{name}"


def split(name: str) -> tuple[int | None, str]:
    """(layer, site in the layer) of a layer site, (None, name) of a model site; BadInput otherwise."""
    m = _LAYER_SITE.fullmatch(name)
    if m and m.group(2) in LAYER_SITES:
        return int(m.group(1)), m.group(2)
    if name in MODEL_SITES:
        return None, name
    raise BadInput(f"no site named '{name}': sites are {', '.join(MODEL_SITES)} and "
                   f"blocks.L.{{{','.join(LAYER_SITES)}}}")


def all_sites(layers: int) -> list[str]:
    """Every site name of a model with ``layers`` layers, in the order a pass computes them."""
    names = ["embed"]
    for l in range(layers):
        names += [f"blocks.{l}.{s}" for s in LAYER_SITES]
    return names + ["final_norm", "logits"]


@dataclass(frozen=True)
class Keep:
    """Which sites a trace holds: names or fnmatch patterns (``blocks.*.attn.pattern``), and for
    the pattern and scores, optionally only some query ``rows`` and some ``heads`` (the rest is
    never held: a long text's last rows of every layer cost rows x S, not T x S, per head), in
    float32 with ``float32`` (half the bytes; the pass itself keeps its own precision)."""
    patterns: tuple[str, ...] = ()
    rows: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    float32: bool = False

    @classmethod
    def of(cls, sites: "Keep | Iterable[str] | str | None", rows: Sequence[int] | None = None,
           heads: Sequence[int] | None = None) -> "Keep":
        """A Keep of ``sites``; ``rows`` / ``heads`` given here win over a given Keep's own."""
        rows = None if rows is None else tuple(int(r) for r in rows)
        heads = None if heads is None else tuple(int(h) for h in heads)
        if isinstance(sites, Keep):
            if rows is None and heads is None:
                return sites
            return replace(sites, rows=sites.rows if rows is None else rows,
                           heads=sites.heads if heads is None else heads)
        if sites is None:
            return cls((), rows, heads)
        pats = (sites,) if isinstance(sites, str) else tuple(sites)
        return cls(pats, rows, heads)

    def __contains__(self, name: str) -> bool:
        exact, wild = self._split
        return name in exact or any(fnmatch.fnmatchcase(name, p) for p in wild)

    @cached_property
    def _split(self) -> tuple[frozenset[str], tuple[str, ...]]:
        """The plain names (a set: a contribution view keeps 7 sites of every layer, 210 names that a
        pass asks about each of its sites) and the patterns with fnmatch's wildcards."""
        wild = tuple(p for p in self.patterns if any(c in p for c in "*?["))
        return frozenset(self.patterns) - set(wild), wild

    def check(self, tokens: int, heads: int) -> None:
        """BadInput for a row outside 0..tokens-1 or a head outside 0..heads-1."""
        if self.rows is not None and any(not 0 <= r < tokens for r in self.rows):
            raise BadInput(f"rows must lie in 0..{tokens - 1}")
        if self.heads is not None and any(not 0 <= h < heads for h in self.heads):
            raise BadInput(f"heads must lie in 0..{heads - 1}")


@dataclass(frozen=True)
class Intervention:
    """Replace ``site`` (or one head's slice, or one position of it) with zeros (``mode='zero'``)
    or with ``value`` (``'mean'``: a mean over reference texts; ``'replace'``: another trace's)."""
    site: str
    mode: str = "zero"
    head: int | None = None
    position: int | None = None
    value: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        layer, name = split(self.site)
        if self.mode not in MODES:
            raise BadInput(f"intervention mode '{self.mode}': the modes are {', '.join(MODES)}")
        if self.mode != "zero" and self.value is None:
            raise BadInput(f"a '{self.mode}' intervention on {self.site} needs a value")
        if self.head is not None and name not in HEAD_AXIS:
            raise BadInput(f"{self.site} has no head axis: a head is chosen in "
                           f"{', '.join('attn.' + s.split('.')[1] for s in HEAD_AXIS)}")

    def index(self, shape: tuple[int, ...]) -> tuple[slice | int, ...]:
        """The part of a site's array (of ``shape``, one text, no batch axis) this intervention replaces."""
        _, name = split(self.site)
        where: list[slice | int] = [slice(None)] * len(shape)
        if self.head is not None:
            axis = HEAD_AXIS[name]
            if not 0 <= self.head < shape[axis]:
                raise BadInput(f"head {self.head} is out of range for {self.site} ({shape[axis]} heads)")
            where[axis] = self.head
        if self.position is not None:
            axis = POSITION_AXIS.get(name, 0)
            if not -shape[axis] <= self.position < shape[axis]:
                raise BadInput(f"position {self.position} is out of range for {self.site} ({shape[axis]} tokens)")
            where[axis] = self.position
        return tuple(where)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """``x`` (one text's site array) with this intervention made: a new array, ``x`` untouched."""
        out = np.array(x, copy=True)
        where = self.index(out.shape)
        if self.mode == "zero":
            out[where] = 0
        else:
            value = np.asarray(self.value, dtype=out.dtype)
            try:
                out[where] = np.broadcast_to(value, out[where].shape)
            except ValueError:
                raise BadInput(f"the value for {self.site} has shape {value.shape}, the slice it replaces "
                               f"{out[where].shape}") from None
        return out


def apply_all(name: str, x: np.ndarray, interventions: Sequence[Intervention]) -> np.ndarray:
    """``x`` at site ``name`` after every intervention on that site, in order (``x`` itself if none)."""
    for iv in interventions:
        if iv.site == name:
            x = iv.apply(x)
    return x


class Trace(Mapping[str, np.ndarray]):
    """The kept sites of one forward pass of one text, by name (see the module docstring), with the
    token ids it read. Looking up a site that was not kept names the ones that were."""

    def __init__(self, ids: Sequence[int], sites: dict[str, np.ndarray], rows: Sequence[int] | None = None,
                 backend: str = "", heads: Sequence[int] | None = None):
        self.ids = list(ids)
        self.rows = None if rows is None else list(rows)  # the query rows pattern/scores hold, None: all
        self.heads = None if heads is None else list(heads)  # the heads pattern/scores hold, None: all
        self.backend = backend
        self._sites = sites

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._sites[name]
        except KeyError:
            split(name)  # a name that is no site at all is a BadInput of its own
            kept = ", ".join(self._sites) or "none"
            raise KeyError(f"site '{name}' was not kept in this trace (kept: {kept})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def stack(self, name: str, layers: int) -> np.ndarray:
        """``blocks.{l}.{name}`` for l in 0..layers-1 stacked on a new first axis."""
        return np.stack([self[f"blocks.{l}.{name}"] for l in range(layers)])


def qk_sites(layer: int) -> list[str]:
    return [site(layer, "attn.q"), site(layer, "attn.k")]


def value_sites(layer: int) -> list[str]:
    return [site(layer, "attn.pattern"), site(layer, "attn.v")]


def qk_of(tr: Trace, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """q, k (h, T, d_head) float64 of ``layer``."""
    return tr[site(layer, "attn.q")].astype(np.float64), tr[site(layer, "attn.k")].astype(np.float64)


def stream_of(tr: Trace, layers: int) -> np.ndarray:
    """(L + 1, T, d) the embeddings and each layer's resid_post (before the final norm)."""
    return np.stack([tr["embed"]] + [tr[site(l, "resid_post")] for l in range(layers)])
