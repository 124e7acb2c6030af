"""A file of prompt pairs for ``--pairs FILE``: JSON Lines, one object a line.

    {"clean": "When Mary and John went to the store, John gave a drink to",
     "corrupt": "When Mary and John went to the store, Mary gave a drink to",
     "target": " Mary", "contrast": " John"}

``clean``, ``corrupt`` and ``target`` are required, ``contrast`` is optional; each is a string
(``clean`` and ``corrupt`` not blank, ``target`` and ``contrast`` not empty). A token the tokenizer
writes as several pieces is named by its vocabulary id instead: ``"target_id": 1234`` for
``target``, ``"contrast_id": 98`` for ``contrast`` (a whole number; one of the two forms each). A blank line is
skipped; anything else that is not such an object is refused with its line number (BadInput,
exit 2): the file is read a line at a time, bounded (MAX_BYTES, MAX_LINE_BYTES, MAX_PAIRS), before
any model runs; a UTF-8 byte-order mark at its start is dropped. Either every pair has a contrast or none does: a mean over pairs must average one
kind of metric (log p, or a logit difference).

    >>> import json, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.jsonl")
    >>> fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    >>> _ = os.write(fd, (json.dumps({"clean": "a b", "corrupt": "a c", "target": "d"}) + "\\n\\n").encode())
    >>> os.close(fd)
    >>> [(p.line, p.clean, p.contrast) for p in read_pairs(path)]
    [(1, 'a b', None)]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from attncli.rules import limits
from attncli.errors import BadInput
from attncli.io.fileio import FileProblem, open_regular
from attncli.io.textio import read_lines, visible

MAX_BYTES = 256 * 2**20  # the largest file read
MAX_LINE_BYTES = 64 * 1024  # the longest line
MAX_PAIRS = 1_000_000
KEYS = ("clean", "corrupt", "target", "contrast", "target_id", "contrast_id")
REQUIRED = ("clean", "corrupt")
IDS = {"target": "target_id", "contrast": "contrast_id"}  # a token given by its vocabulary id instead


@dataclass(frozen=True)
class Pair:
    line: int  # 1-based line of the file
    clean: str
    corrupt: str
    target: Optional[str]  # None when target_id names it
    contrast: Optional[str] = None
    target_id: Optional[int] = None
    contrast_id: Optional[int] = None

    @property
    def has_contrast(self) -> bool:
        return self.contrast is not None or self.contrast_id is not None

    def ids(self) -> list:
        """The ids the pair gives ([] when none: the pair's key and digest stay those of a file without them)."""
        return [] if self.target_id is None and self.contrast_id is None else [self.target_id, self.contrast_id]

    def key(self) -> str:
        """The pair as one string (what a shard's digest covers)."""
        return json.dumps([self.clean, self.corrupt, self.target, self.contrast, *self.ids()], ensure_ascii=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_line(text: str, line: int, where: str = "--pairs") -> Pair:
    """The pair on one line; BadInput naming the line and what is wrong."""
    at = f"{where} line {line}"
    if len(text.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
        raise BadInput(f"{at} is longer than {MAX_LINE_BYTES:,} bytes")
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        why = "nested too deep" if isinstance(exc, RecursionError) else visible(str(exc)[:80])
        raise BadInput(f"{at} is not a JSON object ({why})") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{at} is not a JSON object with clean, corrupt and target")
    unknown = sorted(set(obj) - set(KEYS))
    if unknown:
        raise BadInput(f"{at} has the key {visible(unknown[0][:40])!r}: a pair has {', '.join(KEYS)} (contrast optional)")
    for key in (*REQUIRED, "target"):
        if key not in obj and not (key == "target" and "target_id" in obj):
            raise BadInput(f"{at} has no {key!r}: a pair has clean, corrupt and target (and optionally contrast)")
    fields: dict[str, Any] = {}
    for word, by_id in IDS.items():
        if word in obj and by_id in obj:
            raise BadInput(f"{at} has both {word!r} and {by_id!r}: give the token one way")
        if by_id in obj:
            if isinstance(obj[by_id], bool) or not isinstance(obj[by_id], int):
                raise BadInput(f"{at}: {by_id!r} is {type(obj[by_id]).__name__}, not a whole number (a token's id)")
            fields[by_id] = limits.whole_number(f"{at}: {by_id!r}", obj[by_id], 0, limits.MACHINE_INT)
    for key in ("clean", "corrupt", "target", "contrast"):
        value = obj.get(key)
        if key in ("target", "contrast") and value is None and (key == "contrast" or "target_id" in fields):
            fields[key] = None
            continue
        if not isinstance(value, str):
            raise BadInput(f"{at}: {key!r} is {type(value).__name__}, not a string")
        if (key in ("clean", "corrupt") and not value.strip()) or not value:
            raise BadInput(f"{at}: {key!r} is blank")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{at}: {key!r} holds a lone surrogate escape, not text") from None
        fields[key] = value
    return Pair(line, **fields)


def read_pairs(path: Union[str, Path], where: str = "--pairs") -> list[Pair]:
    """Every pair of a JSONL file (see the module docstring); BadInput on the first bad line. The
    file is read a line at a time and no line is parsed before the count is known: a file of more
    than MAX_PAIRS pairs is refused as soon as its next pair is read, the rest never read. A UTF-8
    byte-order mark at its start is dropped (textio.read_lines)."""
    named = f"{where} {visible(str(path))!r}"
    try:
        stream = open(open_regular(path), "rb")
    except FileProblem as exc:
        raise BadInput(f"{named}: {exc}") from None
    lines: list[tuple[int, str]] = []
    with stream:
        size = os.fstat(stream.fileno()).st_size
        if size > MAX_BYTES:
            raise BadInput(f"{named}: it is {size:,} bytes, more than the {MAX_BYTES:,} it can be")
        for n, raw in read_lines(stream, named):
            if not raw.strip():
                continue
            if len(lines) >= MAX_PAIRS:
                raise BadInput(f"{where} holds more than {MAX_PAIRS:,} pairs (line {n})")
            lines.append((n, raw.removesuffix("\n").removesuffix("\r")))
    pairs = [parse_line(raw, n, where) for n, raw in lines]
    if not pairs:
        raise BadInput(f"{where} {visible(str(path))!r} holds no pair: one JSON object a line, with clean, corrupt, "
                       "target (and optionally contrast)")
    kinds = {p.has_contrast for p in pairs}
    if len(kinds) > 1:
        first = next(p for p in pairs if p.has_contrast != pairs[0].has_contrast)
        raise BadInput(f"{where} line {first.line}: {'a' if first.has_contrast else 'no'} contrast, where line "
                       f"{pairs[0].line} has {'one' if pairs[0].has_contrast else 'none'}: every pair or none "
                       "has a contrast (a mean over pairs averages one metric)")
    return pairs
