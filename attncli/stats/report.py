"""Shards merged into one result, and the result as a JSON-ready document.

A merge is exact: the sums and counts are added and the top examples chosen again, never a mean
of means. Every shard must be of the same model (fingerprint), attn version, definitions version
and settings (BadInput otherwise); a damaged shard is named and skipped; a shard that repeats
another (the same texts, the same range) is named and counted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from attncli import __version__
from attncli.errors import BadInput
from attncli.messages import warn
from attncli.stats.accumulate import STATS, STATS_VERSION, TOP_STATS, Accumulator
from attncli.stats.shards import (Damaged, Identity, from_document, identity_of, inconsistent, mismatch, read_shard,
                                  shard_files)


@dataclass
class Merged:
    acc: Accumulator
    ident: Identity
    ranges: list[tuple[int, int]]
    skipped: list[str] = field(default_factory=list)  # "path: why"


def merge_shards(paths: Iterable[Path]) -> Merged:
    """The shards of the folders (or files) given, merged (see the module docstring)."""
    files = shard_files(paths)
    if not files:
        raise BadInput("no shard to merge: give folders written by 'attn stats --out' (shard-*.json files)")
    acc: Optional[Accumulator] = None
    ident: Optional[Identity] = None
    first = ""
    seen: set[tuple[int, int, str]] = set()
    ranges: list[tuple[int, int]] = []
    skipped: list[str] = []
    for path in files:
        try:
            doc = read_shard(path)
            why = inconsistent(doc, ident) if ident is not None else None
            if why is not None:
                raise Damaged(why)
        except Damaged as exc:
            warn(f"skipping the damaged shard {path}: {exc}")
            skipped.append(f"{path}: {exc}")
            continue
        if ident is None:
            if doc["attn_version"] != __version__ or doc["stats_version"] != STATS_VERSION:
                raise BadInput(f"cannot merge {path}: it was written by attn {doc['attn_version']} (definitions "
                               f"version {doc['stats_version']}), this is attn {__version__} (version {STATS_VERSION})")
            ident, first = identity_of(doc), str(path)
            acc = Accumulator(int(doc["model"]["layers"]), int(doc["model"]["heads"]), int(doc["settings"]["top_k"]))
        else:
            why = mismatch(doc, ident)
            if why is not None:
                raise BadInput(f"cannot merge {path} with {first}: {why}")
        key = (doc["start"], doc["end"], doc["texts_sha256"])
        if key in seen:
            warn(f"the shard {path} repeats texts {doc['start']}-{doc['end'] - 1} already merged: counted once")
            skipped.append(f"{path}: a repeat")
            continue
        seen.add(key)
        acc.merge(from_document(doc))
        ranges.append((doc["start"], doc["end"]))
    if acc is None or ident is None:
        raise BadInput("no shard could be merged: every one given is damaged")
    return Merged(acc, ident, sorted(ranges), skipped)


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
