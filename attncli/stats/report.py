"""Shards merged into one result, and the result as a JSON-ready document.

A merge is exact: the sums and counts are added and the top examples chosen again, never a mean
of means. Every shard must be of the same model (fingerprint), attn version, definitions version
and settings (BadInput otherwise); a damaged shard stops the merge (RuntimeFailure, exit 1) unless
the user asks to skip it (--skip-damaged: named and skipped, and counted); a shard that repeats
another (the same texts, the same range) is named and counted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from attncli import __version__
from attncli.stats.accumulate import STATS, STATS_VERSION, TOP_STATS, Accumulator
from attncli.stats.shards import Identity, from_document, read_shard, usable_shards


@dataclass
class Merged:
    acc: Accumulator
    ident: Identity
    ranges: list[tuple[int, int]]
    skipped: list[str] = field(default_factory=list)  # "path: why"
    damaged: int = 0  # of the skipped, the damaged shards left out (--skip-damaged)


def merge_shards(paths: Iterable[Path], *, skip_damaged: bool = False) -> Merged:
    """The shards of the folders (or files) given, merged (see the module docstring; which shards:
    attncli.stats.shards.usable_shards, the same for --pairs)."""
    found = usable_shards(paths, read_shard, version=STATS_VERSION, written_by="'attn stats --out'",
                          skip_damaged=skip_damaged)
    first = found.docs[0]
    acc = Accumulator(int(first["model"]["layers"]), int(first["model"]["heads"]), int(first["settings"]["top_k"]))
    for doc in found.docs:
        acc.merge(from_document(doc))
    return Merged(acc, found.ident, found.ranges, found.skipped, found.damaged)


def spans(ranges: list[tuple[int, int]]) -> list[list[int]]:
    """Sorted [start, end) ranges with touching ones joined: [[0, 128], [256, 300]]."""
    out: list[list[int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def document(acc: Accumulator, ident: Identity, ranges: list[tuple[int, int]], **extra: Any) -> dict[str, Any]:
    """The result as JSON: each statistic's (L, h) mean (null when nothing was scored) and count,
    and each head's top examples."""
    means = acc.means()
    stats = {n: {"mean": None if means[n] is None else means[n].tolist(), "count": acc.counts[n]} for n in STATS}
    top = {s: [{"layer": l, "head": h, "examples": acc.top(s, l, h)} for l in range(acc.layers)
               for h in range(acc.heads)] for s in TOP_STATS}
    return {"model": ident.model, "attn_version": __version__, "stats_version": STATS_VERSION,
            "settings": ident.settings, "layers": acc.layers, "heads": acc.heads, "texts": acc.texts,
            "texts_scored": acc.scored, "tokens": acc.tokens, "probes": acc.probes, "ranges": spans(ranges),
            **extra, "stats": stats, "top": top}
