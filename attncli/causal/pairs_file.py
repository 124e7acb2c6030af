"""A file of prompt pairs for ``--pairs FILE``: JSON Lines, one object a line.

    {"clean": "When Mary and John went to the store, John gave a drink to",
     "corrupt": "When Mary and John went to the store, Mary gave a drink to",
     "target": " Mary", "contrast": " John"}

``clean``, ``corrupt`` and ``target`` are required, ``contrast`` is optional; each is a string
(``clean`` and ``corrupt`` not blank, ``target`` and ``contrast`` not empty). A blank line is
skipped; anything else that is not such an object is refused with its line number (BadInput,
exit 2): the file is read whole, bounded (MAX_BYTES, MAX_LINE_BYTES, MAX_PAIRS), before any
model runs. Either every pair has a contrast or none does: a mean over pairs must average one
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from attncli.errors import BadInput
from attncli.fileio import FileProblem, read_text
from attncli.textio import visible

MAX_BYTES = 256 * 2**20  # the largest file read
MAX_LINE_BYTES = 64 * 1024  # the longest line
MAX_PAIRS = 1_000_000
KEYS = ("clean", "corrupt", "target", "contrast")
REQUIRED = ("clean", "corrupt", "target")


@dataclass(frozen=True)
class Pair:
    line: int  # 1-based line of the file
    clean: str
    corrupt: str
    target: str
    contrast: Optional[str] = None

    def key(self) -> str:
        """The pair as one string (what a shard's digest covers)."""
        return json.dumps([self.clean, self.corrupt, self.target, self.contrast], ensure_ascii=False)


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
    for key in REQUIRED:
        if key not in obj:
            raise BadInput(f"{at} has no {key!r}: a pair has clean, corrupt and target (and optionally contrast)")
    fields = {}
    for key in KEYS:
        value = obj.get(key)
        if key == "contrast" and value is None:
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
    """Every pair of a JSONL file (see the module docstring); BadInput on the first bad line."""
    try:
        text = read_text(path, MAX_BYTES)
    except FileProblem as exc:
        raise BadInput(f"{where} {visible(str(path))!r}: {exc}") from None
    pairs: list[Pair] = []
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        if len(pairs) >= MAX_PAIRS:
            raise BadInput(f"{where} holds more than {MAX_PAIRS:,} pairs (line {n})")
        pairs.append(parse_line(raw, n, where))
    if not pairs:
        raise BadInput(f"{where} {visible(str(path))!r} holds no pair: one JSON object a line, with clean, corrupt, "
                       "target (and optionally contrast)")
    kinds = {p.contrast is None for p in pairs}
    if len(kinds) > 1:
        first = next(p for p in pairs if (p.contrast is None) != (pairs[0].contrast is None))
        raise BadInput(f"{where} line {first.line}: {'no' if first.contrast is None else 'a'} contrast, where line "
                       f"{pairs[0].line} has {'none' if pairs[0].contrast is None else 'one'}: every pair or none "
                       "has a contrast (a mean over pairs averages one metric)")
    return pairs
