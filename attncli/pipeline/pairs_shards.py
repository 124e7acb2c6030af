"""Shards of a ``--pairs`` run: one chunk of pairs' sums in a JSON file, written and checked with
``attn stats``'s machinery (attncli.stats.shards: the atomic write, the bounded checked read, the
checksum, the identity of the model and the settings; attncli.stats.runner: which shards a
folder already holds).

    shard-000000000000-000000000064.json
    {"format": "attn-pairs-shard", "format_version": 1, "attn_version", "stats_version": 1,
     "model": {"name", "fingerprint", "model_type", "layers", "heads", "causal"},
     "settings": {"kind", "site", "qk_fix", "steps", "tokens"},
     "start": 0, "end": 64, "texts_sha256": "...", "texts": 64, "tokens": 0,
     "count": 64, "sums": {name: nested lists or a number}, "squares": {...}, "checksum": "..."}

Sums, never means: any split of the pairs adds up to the same sums (to rounding), and JSON keeps
every double exactly. ``stats_version`` is :data:`PAIRS_VERSION`, the definitions of the values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from attncli import __version__
from attncli.causal.pair_sums import PairSums
from attncli.stats.shards import Damaged, Identity, checksum, read_document, usable_shards

FORMAT, FORMAT_VERSION = "attn-pairs-shard", 1
PAIRS_VERSION = 2  # what each value means (attncli.causal.pair_sums); a change refuses older shards
NAMES = frozenset({"grid", "effect", "scores", "clean", "corrupt"})
MAX_CELLS = 50_000_000  # the most numbers a shard's value may hold


def to_document(sums: PairSums, ident: Identity, start: int, end: int, digest: str) -> dict[str, Any]:
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "attn_version": __version__,
           "stats_version": PAIRS_VERSION, "model": ident.model, "settings": ident.settings,
           "start": start, "end": end, "texts_sha256": digest, "texts": end - start, "tokens": 0,
           "count": sums.count, "sums": {n: np.asarray(v).tolist() for n, v in sums.sums.items()},
           "squares": {n: np.asarray(v).tolist() for n, v in sums.squares.items()}}
    doc["checksum"] = checksum(doc)
    return doc


def _array(value: Any, what: str) -> np.ndarray:
    """A nested list of numbers (or a number) as a finite float64 array; ValueError otherwise."""
    depth, probe = 0, value
    while isinstance(probe, list):  # the declared shape, bounded before numpy reads it
        if not probe or depth > 3:
            raise ValueError(f"{what} is not a grid of at most 4 axes")
        depth, probe = depth + 1, probe[0]
    arr = np.asarray(value, dtype=np.float64) if not isinstance(value, bool) else None
    if arr is None or arr.ndim != depth or arr.size > MAX_CELLS or not np.isfinite(arr).all():
        raise ValueError(f"{what} is not a finite number or a rectangular grid of them")
    return arr


def from_document(doc: dict[str, Any]) -> PairSums:
    """The sums a checked shard holds (ValueError/TypeError/KeyError on a malformed one)."""
    count = doc["count"]
    if not isinstance(count, int) or isinstance(count, bool) or count != doc["end"] - doc["start"] or count < 1:
        raise ValueError("its count is not the number of pairs it covers")
    sums, squares = doc["sums"], doc["squares"]
    if not isinstance(sums, dict) or not isinstance(squares, dict) or set(sums) != set(squares) or not sums \
            or not set(sums) <= NAMES:
        raise ValueError(f"its sums and squares are not both of {', '.join(sorted(NAMES))}")
    out = PairSums(count)
    for name in sums:
        s, q = _array(sums[name], f"the sum of {name}"), _array(squares[name], f"the squares of {name}")
        if s.shape != q.shape or (q < 0).any():
            raise ValueError(f"the sum and squares of {name} do not match")
        out.sums[name], out.squares[name] = s, q
    return out


def read_pairs_shard(path: Path) -> dict[str, Any]:
    """A --pairs shard's document, checked; Damaged saying why otherwise."""
    doc = read_document(path, FORMAT, FORMAT_VERSION, "an attn --pairs shard")
    try:
        for key in ("start", "end", "texts"):
            if not isinstance(doc.get(key), int) or isinstance(doc.get(key), bool) or doc[key] < 0:
                raise ValueError(f"its {key!r} is not a count")
        if not doc["start"] < doc["end"] or not isinstance(doc.get("model"), dict) \
                or not isinstance(doc.get("settings"), dict) or not isinstance(doc.get("texts_sha256"), str) \
                or not isinstance(doc["model"].get("fingerprint"), str):
            raise ValueError("its range, model, settings or digest are not what a shard holds")
        from_document(doc)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise Damaged(f"it is malformed ({str(exc)[:80]})") from None
    return doc


@dataclass
class MergedPairs:
    sums: PairSums
    ident: Identity
    ranges: list[tuple[int, int]]
    skipped: list[str] = field(default_factory=list)
    damaged: int = 0  # of the skipped, the damaged shards left out (skip_damaged)


def merge_pair_shards(paths: Iterable[Path], ident: Optional[Identity] = None, *,
                      skip_damaged: bool = False) -> MergedPairs:
    """The --pairs shards of the folders (or files) given, added up in the order of their pairs: of
    one model, attn version and settings (``ident``'s when given; else the first shard's), BadInput
    otherwise; a damaged shard stops the merge (RuntimeFailure naming it) unless ``skip_damaged``,
    then it is named and skipped; one that repeats a range is counted once
    (attncli.stats.shards.usable_shards, the same for attn stats)."""
    found = usable_shards(paths, read_pairs_shard, version=PAIRS_VERSION, written_by="--pairs FILE --out DIR",
                          ident=ident, skip_damaged=skip_damaged)
    return MergedPairs(added(found.docs), found.ident, found.ranges, found.skipped, found.damaged)


def added(docs: Iterable[dict[str, Any]]) -> PairSums:
    """Shard documents' sums added in the order of their pairs (so a run and a merge of its folder
    add the same numbers in the same order: equal to the last bit)."""
    total = PairSums()
    for doc in sorted(docs, key=lambda d: d["start"]):
        total.merge(from_document(doc))
    return total
