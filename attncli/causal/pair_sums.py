"""A causal test averaged over prompt pairs (``--pairs FILE``): each pair computed by the
single-pair code, kept as sums, so that any split of the pairs merges exactly.

    ablate     grids.ablate on the clean text        grid (L, h)       clean
    patch      grids.patch                           grid (L, T | h)   clean, corrupt
    attribute  attribution.attribute (AtP / AtP*)    grid (L | L h, T | h)  clean, corrupt
    circuit    circuit.edge_scores (EAP / EAP-IG)    scores (U, D)     clean, corrupt

patch and attribute also keep each cell as a change of the metric (``effect``, the fraction times
clean - corrupt), so that the dataset's restored fraction is the mean change over the mean
difference, sum(effect) / sum(clean - corrupt) (the pairs' mean of their own fractions is kept too:
a pair whose two metrics nearly agree makes its own fraction huge and float32's rounding of its
denominator part of the mean).

Each value v of a pair is added to ``sums`` and v * v to ``squares``; the mean over n pairs is
sums / n and its standard error sqrt((squares / n - mean^2) * n / (n - 1) / n). A grid over
positions (patch and attribute at resid, attn, mlp, key, query) needs every pair to have the same
number of tokens (a mean over positions 0..T-1 of texts of other lengths is not defined): another
length is refused by its line. A grid over heads, and the circuit's edges, take pairs of any
length. Each pair's own target (and contrast) is resolved on its own clean text.

Shapes: L layers, h heads, T tokens, U writers, D readers (hf/methods/edges.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from attncli.causal import grids
from attncli.causal.attribution import SITES as ATTRIBUTE_SITES, attribute, attribute_together
from attncli.causal.circuit import MAX_STEPS, edge_scores
from attncli.causal.pairs_file import Pair
from attncli.causal.target import Target, resolve
from attncli.errors import BadInput, RuntimeFailure, TooLong

KINDS = ("ablate", "patch", "attribute", "circuit")
PER_POSITION = frozenset({"resid", "attn", "mlp", "key", "query"})  # sites whose grid has a column per position
BATCH_ROWS = 256  # attribute: corrupted tokens of the pairs run side by side at most (their passes and one
# backward), e.g. 17 pairs of 15 tokens; a pair longer than this runs alone


@dataclass(frozen=True)
class PairsJob:
    """What is computed for each pair (what a shard's numbers depend on besides the model)."""
    kind: str
    site: str = "resid"  # patch, attribute
    qk_fix: bool = True  # attribute: AtP* (True) or plain AtP
    steps: int = 1  # circuit: 1 EAP, more EAP-IG

    def check(self) -> None:
        if self.kind not in KINDS:
            raise BadInput(f"--pairs runs {', '.join(KINDS)}, not {self.kind!r}")
        sites = {"patch": tuple(grids.PATCH_SITES), "attribute": ATTRIBUTE_SITES}.get(self.kind)
        if sites is not None and self.site not in sites:
            raise BadInput(f"--site {self.site!r}: choose one of {', '.join(sites)}")
        if self.kind == "circuit" and not 1 <= self.steps <= MAX_STEPS:
            raise BadInput(f"--steps {self.steps}: give 1 (EAP) to {MAX_STEPS} points on the path")

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind in ("patch", "attribute"):
            out["site"] = self.site
        if self.kind == "attribute":
            out["qk_fix"] = self.qk_fix
        if self.kind == "circuit":
            out["steps"] = self.steps
        return out

    @property
    def per_position(self) -> bool:
        return self.kind in ("patch", "attribute") and self.site in PER_POSITION

    @property
    def uses_corrupt(self) -> bool:
        return self.kind != "ablate"


def _at(pair: Pair, exc: BadInput) -> BadInput:
    said = exc.shorten() if isinstance(exc, TooLong) else str(exc)  # the --pairs commands have no --truncate
    return BadInput(f"--pairs line {pair.line}: {said}")


def encoded(model: Any, pair: Pair, job: PairsJob) -> tuple[list[int], list[int], Target]:
    """(clean ids, corrupted ids, the pair's target); BadInput naming the pair's line."""
    try:
        clean = list(model.encode(pair.clean).ids)
        corrupt = list(model.encode(pair.corrupt).ids) if job.uses_corrupt else []
        if job.uses_corrupt:
            grids.check_same_length(model, clean, corrupt)
        t = resolve(model, clean, target=pair.target, target_id=pair.target_id, contrast=pair.contrast,
                    contrast_id=pair.contrast_id, named="key")
    except BadInput as exc:
        raise _at(pair, exc) from None
    return clean, corrupt, t


def check_pairs(model: Any, pairs: Sequence[Pair], job: PairsJob) -> Optional[int]:
    """Every pair encoded and its target resolved before any pass; the token count every pair
    shares when the grid is over positions (None otherwise). BadInput naming the first bad line."""
    tokens: Optional[int] = None
    first = None
    for pair in pairs:
        clean, _, _ = encoded(model, pair, job)
        if job.per_position:
            if tokens is None:
                tokens, first = len(clean), pair.line
            elif len(clean) != tokens:
                raise BadInput(f"--pairs line {pair.line} has {len(clean)} tokens, line {first} has {tokens}: the "
                               f"--site {job.site} grid is over positions, so every pair needs as many tokens "
                               "(--site head takes pairs of any length; or split the file by length)")
    return tokens


def fractions(grid: np.ndarray, clean: float, corrupt: float) -> dict[str, np.ndarray]:
    """A patch or attribute pair's values: its restored fractions (``grid``), the same cells as
    changes of the metric (``effect``: grid (clean - corrupt), what patching moved it by), and the
    two metrics. The dataset's fraction is sum(effect) / sum(clean - corrupt) (pairs_document)."""
    grid = np.asarray(grid, dtype=np.float64)
    return {"grid": grid, "effect": grid * (float(clean) - float(corrupt)), "clean": np.float64(clean),
            "corrupt": np.float64(corrupt)}


def one_pair(model: Any, job: PairsJob, pair: Pair) -> dict[str, np.ndarray]:
    """The pair's values by name (module docstring), float64."""
    clean, corrupt, t = encoded(model, pair, job)
    try:
        if job.kind == "ablate":
            g = grids.ablate(model, clean, t)
            return {"grid": g.values, "clean": np.float64(g.clean)}
        if job.kind == "patch":
            g = grids.patch(model, clean, corrupt, t, where=job.site)
            return fractions(g.values, g.clean, g.corrupt)
        if job.kind == "attribute":
            a = attribute(model, clean, corrupt, t, where=job.site, qk_fix=job.qk_fix)
            return fractions(a.values, a.clean, a.corrupt)
        scores, clean_tape, corrupt_tape = edge_scores(model, clean, corrupt, t, job.steps)
        return {"scores": scores, "clean": np.float64(t.metric(clean_tape.logits(t.position))),
                "corrupt": np.float64(t.metric(corrupt_tape.logits(t.position)))}
    except BadInput as exc:
        raise _at(pair, exc) from None
    except RuntimeFailure as exc:  # a damaged model: the pair it showed in
        raise RuntimeFailure(f"--pairs line {pair.line}: {exc}") from None


def pair_values(model: Any, job: PairsJob, pairs: Sequence[Pair]) -> Iterator[dict[str, np.ndarray]]:
    """``one_pair`` of each pair, in order. attribute runs each stretch of consecutive pairs of as
    many tokens (up to BATCH_ROWS tokens) side by side (attribution.attribute_together), equal to
    one pair at a time to float rounding; a batch that fails (bad input or a damaged model) runs
    again pair by pair, so the error names its pair's line."""
    if job.kind != "attribute":
        yield from (one_pair(model, job, pair) for pair in pairs)
        return
    batch: list[tuple[Pair, tuple[list[int], list[int], Target]]] = []

    def flush() -> Iterator[dict[str, np.ndarray]]:
        try:
            done = attribute_together(model, [item for _, item in batch], where=job.site, qk_fix=job.qk_fix)
        except (BadInput, RuntimeFailure):
            done = None
        if done is None:
            yield from (one_pair(model, job, pair) for pair, _ in batch)
        else:
            yield from (fractions(a.values, a.clean, a.corrupt) for a in done)
        batch.clear()

    for pair in pairs:
        item = encoded(model, pair, job)
        if batch and (len(item[0]) != len(batch[0][1][0]) or (len(batch) + 1) * len(item[0]) > BATCH_ROWS):
            yield from flush()
        batch.append((pair, item))
    if batch:
        yield from flush()


@dataclass
class PairSums:
    """Sums and sums of squares of each value over ``count`` pairs."""
    count: int = 0
    sums: dict[str, np.ndarray] = field(default_factory=dict)
    squares: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, values: dict[str, np.ndarray]) -> None:
        for name, v in values.items():
            v = np.asarray(v, dtype=np.float64)
            if name in self.sums and self.sums[name].shape != v.shape:
                raise BadInput(f"a pair's {name} is {v.shape}, the others' {self.sums[name].shape}")
            self.sums[name] = self.sums.get(name, 0.0) + v
            self.squares[name] = self.squares.get(name, 0.0) + v * v
        self.count += 1

    def merge(self, other: "PairSums") -> None:
        if self.count and other.count and set(self.sums) != set(other.sums):
            raise BadInput("the shards hold different values: they are of other commands")
        for name in other.sums:
            if name in self.sums and self.sums[name].shape != other.sums[name].shape:
                raise BadInput(f"the shards' {name} have other shapes ({self.sums[name].shape} and "
                               f"{other.sums[name].shape})")
            self.sums[name] = self.sums.get(name, 0.0) + other.sums[name]
            self.squares[name] = self.squares.get(name, 0.0) + other.squares[name]
        self.count += other.count

    def mean(self, name: str) -> np.ndarray:
        return self.sums[name] / self.count

    def stderr(self, name: str) -> Optional[np.ndarray]:
        """The standard error of the mean (the sample's spread / sqrt(n)); None for one pair."""
        n = self.count
        if n < 2:
            return None
        m = self.mean(name)
        var = np.maximum(self.squares[name] / n - m * m, 0.0) * n / (n - 1)
        return np.sqrt(var / n)
