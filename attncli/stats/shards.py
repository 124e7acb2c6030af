"""Shards: one chunk of a corpus's statistics in a JSON file, written atomically, checked on read.

A shard holds the accumulators' sums, counts and top examples of the texts [start, end) of a
corpus (text indices, 0-based), and names what they depend on: the model (a fingerprint), the
attn version, the statistics' definitions version (``STATS_VERSION``) and the settings. A
SHA-256 over the rest of the document makes a damaged shard known as damaged. JSON keeps every
float exactly (Python writes the shortest text that reads back the same double), and nothing
loaded back is a pickle.

    shard-000000000000-000000000064.json
    {"format": "attn-stats-shard", "format_version": 1, "attn_version": "0.1.0", "stats_version": 1,
     "model": {"name", "fingerprint", "model_type", "layers", "heads", "causal"},
     "settings": {"top_k", "probe_every", "probe_length", "seed", "precision"},
     "start": 0, "end": 64, "texts_sha256": "...", "texts": 64, "scored": 63, "tokens": 900, "probes": 16,
     "sums": {stat: [[...] per head] per layer}, "counts": {stat: n},
     "top": {stat: [[[[score, text, position, context], ...] per head] per layer]},
     "checksum": "sha256 of the document without this key"}
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

from attncli import __version__
from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem, atomic_write, open_regular, read_text
from attncli.io.messages import warn
from attncli.stats.accumulate import MAX_TOP_K, STATS, STATS_VERSION, TOP_STATS, Accumulator

FORMAT, FORMAT_VERSION = "attn-stats-shard", 1
SHARD_NAME = re.compile(r"shard-(\d{12})-(\d{12})\.json")
SHARD_BYTES = 256 * 2**20  # the largest shard read
SAMPLES, SAMPLE_BYTES, MAX_WEIGHT_FILES = 16, 1 << 16, 256
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.h5", "*.msgpack")
_MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def shard_name(start: int, end: int) -> str:
    return f"shard-{start:012d}-{end:012d}.json"


def texts_digest(texts: Iterable[str]) -> str:
    """SHA-256 of a chunk's texts (each UTF-8, NUL-separated): which texts a shard covers."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\x00")
    return h.hexdigest()


def model_fingerprint(path: Path) -> str:
    """A model directory's identity, the same on any machine that holds the same files: SHA-256
    over config.json and the tokenizer's files, and each weights file's name, size and 16
    samples of 64 KiB spread through it (a retrained model with the same shapes differs there)."""
    h = hashlib.sha256()
    path = Path(path)
    for name in _MODEL_FILES:
        if (path / name).is_file():
            h.update(name.encode() + b"\x00" + read_text(path / name, 64 * 2**20, follow_symlinks=True).encode())
    weights = sorted({p for g in WEIGHT_GLOBS for p in path.glob(g)})[:MAX_WEIGHT_FILES]
    for file in weights:
        with open(open_regular(file, follow_symlinks=True), "rb") as fh:  # a regular file; SAMPLES reads of SAMPLE_BYTES
            size = fh.seek(0, 2)
            h.update(f"{file.name}\x00{size}\x00".encode())
            for k in range(SAMPLES):
                fh.seek(max(0, size - SAMPLE_BYTES) * k // max(SAMPLES - 1, 1))
                h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()


@dataclass(frozen=True)
class Identity:
    """What every shard of one run shares: the model and the settings."""
    model: dict[str, Any]  # name, fingerprint, model_type, layers, heads, causal
    settings: dict[str, Any]


def checksum(doc: dict[str, Any]) -> str:
    """SHA-256 of a shard document without its "checksum" key (canonical JSON)."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False, ensure_ascii=True).encode()).hexdigest()


def to_document(acc: Accumulator, ident: Identity, start: int, end: int, digest: str) -> dict[str, Any]:
    top = {}
    for i, stat in enumerate(TOP_STATS):
        top[stat] = [[[[float(acc.top_score[i, l, h, k]), int(acc.top_text[i, l, h, k]), int(acc.top_pos[i, l, h, k]),
                        str(acc.top_context[i, l, h, k])] for k in range(acc.top_k) if acc.top_text[i, l, h, k] >= 0]
                      for h in range(acc.heads)] for l in range(acc.layers)]
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "attn_version": __version__,
           "stats_version": STATS_VERSION, "model": ident.model, "settings": ident.settings,
           "start": start, "end": end, "texts_sha256": digest, "texts": acc.texts, "scored": acc.scored,
           "tokens": acc.tokens, "probes": acc.probes,
           "sums": {n: acc.sums[n].tolist() for n in STATS}, "counts": dict(acc.counts), "top": top}
    doc["checksum"] = checksum(doc)
    return doc


def from_document(doc: dict[str, Any]) -> Accumulator:
    """The accumulator a checked shard holds (ValueError/KeyError/TypeError on a malformed one).
    The sizes come from the document and are checked against its own sums before anything of
    that size is made."""
    L, H, K = doc["model"]["layers"], doc["model"]["heads"], doc["settings"]["top_k"]
    if not all(_count(x) and x >= 1 for x in (L, H, K)) or K > MAX_TOP_K:
        raise ValueError(f"its layers, heads and top_k are not counts (top_k at most {MAX_TOP_K})")
    if any(not isinstance(doc["sums"][n], list) or len(doc["sums"][n]) != L
           or any(not isinstance(r, list) or len(r) != H for r in doc["sums"][n]) for n in STATS):
        raise ValueError(f"its sums are not {L} x {H}, as its layers and heads say")
    acc = Accumulator(L, H, K)
    for n in STATS:
        s = np.asarray(doc["sums"][n], dtype=np.float64)
        if s.shape != (L, H) or not np.isfinite(s).all():
            raise ValueError(f"the sums of {n} are not {L} x {H} finite numbers")
        acc.sums[n] = s
        c = doc["counts"][n]
        if not isinstance(c, int) or c < 0:
            raise ValueError(f"the count of {n} is not a count")
        acc.counts[n] = c
    for i, stat in enumerate(TOP_STATS):
        rows = doc["top"][stat]
        if len(rows) != L or any(len(r) != H for r in rows):
            raise ValueError(f"the top examples of {stat} are not {L} x {H}")
        for l in range(L):
            for h in range(H):
                entries = rows[l][h][:K]
                for k, (score, text, pos, ctx) in enumerate(entries):
                    acc.top_score[i, l, h, k], acc.top_text[i, l, h, k] = float(score), int(text)
                    acc.top_pos[i, l, h, k], acc.top_context[i, l, h, k] = int(pos), str(ctx)
    for key in ("texts", "scored", "tokens", "probes"):
        setattr(acc, key, int(doc[key]))
    return acc


def write_shard(directory: Path, doc: dict[str, Any]) -> Path:
    path = Path(directory) / shard_name(doc["start"], doc["end"])
    atomic_write(path, json.dumps(doc, allow_nan=False, ensure_ascii=False) + "\n")
    return path


class Damaged(Exception):
    """A shard that cannot be used; ``str()`` says why."""


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _finite(text: str) -> float:
    x = float(text)
    if not np.isfinite(x):
        raise ValueError(f"the number {text[:20]} is out of a double's range")
    return x


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a shard holds")


_FIELDS = {"attn_version": str, "stats_version": int, "model": dict, "settings": dict, "texts_sha256": str,
           "sums": dict, "counts": dict, "top": dict}


def _check_fields(doc: dict[str, Any]) -> None:
    """The fields every reader of a shard indexes, of the types it uses them as (ValueError)."""
    for key, kind in _FIELDS.items():
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"its {key!r} is not a {kind.__name__}")
    for key in ("start", "end", "texts", "scored", "tokens", "probes"):
        if not _count(doc.get(key)):
            raise ValueError(f"its {key!r} is not a count")
    if not doc["start"] < doc["end"]:
        raise ValueError("its text range is not 0 <= start < end")
    if not isinstance(doc["model"].get("fingerprint"), str):
        raise ValueError("its model has no fingerprint")


def read_document(path: Path, fmt: str, version: int, what: str) -> dict[str, Any]:
    """A shard file's JSON document whose "format" is ``fmt`` (``what`` names it in the refusal),
    of ``version``, its checksum matching; Damaged saying why otherwise. Bounded: the file's size,
    a double's range (1e999, NaN and Infinity are refused, not read as infinities) and nesting
    (a deep one is refused, not a RecursionError). The fields are the caller's to check."""
    try:
        doc = json.loads(read_text(path, SHARD_BYTES), parse_float=_finite, parse_constant=_no_constant)
    except FileProblem as exc:
        raise Damaged(str(exc)) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        why = "it is nested too deep" if isinstance(exc, RecursionError) else str(exc)[:80]
        raise Damaged(f"it is not JSON ({why})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise Damaged(f"it is not {what}")
    if doc.get("format_version") != version:
        raise Damaged(f"its format version {doc.get('format_version')!r} is not {version}")
    if doc.get("checksum") != checksum(doc):
        raise Damaged("its checksum does not match its contents")
    return doc


def read_shard(path: Path) -> dict[str, Any]:
    """A statistics shard's document, checked (``read_document``, then every field's type and
    shape); Damaged saying why otherwise."""
    doc = read_document(path, FORMAT, FORMAT_VERSION, "an attn statistics shard")
    try:
        _check_fields(doc)
        from_document(doc)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise Damaged(f"it is malformed ({str(exc)[:80]})") from None
    return doc


def inconsistent(doc: dict[str, Any], ident: Identity) -> Optional[str]:
    """Why a checked shard of the same model (its fingerprint) cannot be of it: its layers, heads
    or kind say another model's. Damage (or a forged checksum), not another run: such a shard is
    skipped by a merge and computed again by a resume."""
    if doc["model"].get("fingerprint") != ident.model.get("fingerprint"):
        return None
    for key in ("layers", "heads", "causal"):
        if doc["model"].get(key) != ident.model.get(key):
            return (f"its model's {key} ({str(doc['model'].get(key))[:20]}) are not those of the model it names "
                    f"({ident.model.get(key)})")
    return None


def mismatch(doc: dict[str, Any], ident: Identity, version: int = STATS_VERSION) -> Optional[str]:
    """Why a checked shard does not belong with ``ident`` (another model, attn version,
    definitions ``version`` (its "stats_version") or settings), or None."""
    if doc["model"].get("fingerprint") != ident.model["fingerprint"]:
        return f"it is of another model ({doc['model'].get('name')!r}, fingerprint {str(doc['model'].get('fingerprint'))[:12]})"
    if doc["attn_version"] != __version__:
        return f"it was written by attn {doc['attn_version']}, this is attn {__version__}"
    if doc["stats_version"] != version:
        return f"its values are definitions version {doc['stats_version']!r}, these are {version}"
    if doc["settings"] != ident.settings:
        return f"it was made with other settings ({doc['settings']} instead of {ident.settings})"
    return None


@dataclass
class Usable:
    """The shards a merge adds: their documents (one per range of texts), the identity they share,
    their ranges, the ones skipped ("path: why") and how many of those were damaged."""
    docs: list[dict[str, Any]]
    ident: Identity
    ranges: list[tuple[int, int]]
    skipped: list[str]
    damaged: int = 0


def usable_shards(paths: Iterable[Path], read: Callable[[Path], dict[str, Any]], *, version: int, written_by: str,
                  ident: Optional[Identity] = None, skip_damaged: bool = False) -> Usable:
    """The shards of the folders (or files) ``paths`` that a merge adds, for attn stats and --pairs
    alike (``read``: a file's checked document or Damaged; ``version``: their definitions): a
    damaged one (or one whose model's sizes contradict its fingerprint) stops the merge
    (RuntimeFailure naming it: the result would cover fewer texts than the shards hold) unless the
    user asked to ``skip_damaged`` (--skip-damaged), then it is named and skipped; all must be of
    one model, attn version, definitions and settings (``ident``'s, else the first usable one's),
    BadInput naming the file otherwise; one that repeats a range of the same texts is named and
    counted once. BadInput when none is given or none is usable."""
    files = shard_files(paths)
    if not files:
        raise BadInput(f"no shard to merge: give folders written by {written_by} (shard-*.json files)")
    docs: list[dict[str, Any]] = []
    skipped: list[str] = []
    damaged = 0
    seen: set[tuple[int, int, str]] = set()
    first: Optional[Path] = None
    for path in files:
        try:
            doc = read(path)
            why = inconsistent(doc, ident) if ident is not None else None
            if why is not None:
                raise Damaged(why)
        except Damaged as exc:
            if not skip_damaged:
                raise RuntimeFailure(f"the shard {path} is damaged: {exc}; the merge would leave its texts out: "
                                     "compute it again (the run that wrote it resumes it), or pass --skip-damaged "
                                     "to merge the others without it") from None
            warn(f"skipping the damaged shard {path}: {exc}")
            skipped.append(f"{path}: {exc}")
            damaged += 1
            continue
        if ident is None:
            ident, first = identity_of(doc), path
        why = mismatch(doc, ident, version)
        if why is not None:
            raise BadInput(f"cannot merge {path}{'' if path == first or first is None else f' with {first}'}: {why}")
        key = (doc["start"], doc["end"], doc["texts_sha256"])
        if key in seen:
            warn(f"the shard {path} repeats texts {doc['start']}-{doc['end'] - 1} already merged: counted once")
            skipped.append(f"{path}: a repeat")
            continue
        seen.add(key)
        docs.append(doc)
    if ident is None or not docs:
        raise BadInput("no shard could be merged: every one given is damaged")
    return Usable(docs, ident, sorted((d["start"], d["end"]) for d in docs), skipped, damaged)


def identity_of(doc: dict[str, Any]) -> Identity:
    return Identity(doc["model"], doc["settings"])


def shard_folder(out: Path) -> Path:
    """The folder ``--out`` names, made when it is new. A symbolic link is followed, as an export's
    file is (attncli.io.export_target): one that dangles has its target made as the folder, and stays
    a link; attn never replaces what the user named. BadInput (exit 2) when it cannot be a folder."""
    named = f"--out {str(out)!r}"
    real = Path(os.path.realpath(out))  # a symlink's target, a new one if it dangles
    try:
        try:
            os.stat(out)  # a loop of links: ELOOP here, where realpath would quietly stop
        except FileNotFoundError:
            pass  # new, or a link that dangles
        if real.exists() and not real.is_dir():
            raise BadInput(f"{named} is not a folder")
        if not real.parent.is_dir():
            raise BadInput(f"{named}: its parent folder does not exist" + (f" ({str(real.parent)!r}, where its "
                                                                          "symbolic link leads)" if real != out.absolute() else ""))
        real.mkdir(exist_ok=True)
    except OSError as exc:
        what = "is a loop of symbolic links" if exc.errno == errno.ELOOP else f"cannot be made: {exc.strerror or exc}"
        raise BadInput(f"{named} {what}") from None
    return out


def shard_files(paths: Iterable[Path]) -> list[Path]:
    """The shard files of the folders (and files) given, each folder's in name order."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found += sorted(q for q in p.iterdir() if SHARD_NAME.fullmatch(q.name))
        elif p.is_file():
            found.append(p)
        else:
            raise BadInput(f"{str(p)!r} is neither a folder of shards nor a shard file")
    return found
