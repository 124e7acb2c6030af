"""The rows and columns every view of ``attn matrix`` takes: ``--rows`` / ``--cols START:END``.
A pretrained model's one stack of tokens takes more forms of ``--rows`` (attncli.attention.long_view).
"""

from __future__ import annotations

import re
from typing import Optional

from attncli.rules import limits
from attncli.errors import BadInput


def span(text: Optional[str], option: str) -> Optional[tuple[int, int]]:
    """'START:END' (0-based, END excluded; either may be empty; a lone N is row N) -> (start, end):
    the rows or columns every view of ``attn matrix`` takes (None: not given)."""
    if text is None:
        return None
    start, sep, end = text.partition(":")
    if not all(re.fullmatch(r"\s*([+-]?\d+)?\s*", part) for part in (start, end)):
        raise BadInput(f"{option} {text!r}: expected START:END, e.g. {option} 0:20")
    lo = limits.whole_number(option, start, -limits.MACHINE_INT, limits.MACHINE_INT) if start.strip() else 0
    hi = limits.whole_number(option, end, -limits.MACHINE_INT, limits.MACHINE_INT) if end.strip() \
        else max(lo + 1, 1 << 30)  # open end: to the last row or column
    if not sep:
        hi = lo + 1
    if lo < 0 or hi <= lo:
        raise BadInput(f"{option} {text!r}: expected 0 <= START < END")
    return lo, hi


def start_end(rows: Optional[str]) -> Optional[tuple[int, int]]:
    """--rows as START:END (the form every view takes, an encoder-decoder's too), None for the forms
    only one stack of tokens takes (A-B, last:N, word:TEXT)."""
    try:
        return span(rows, "--rows")
    except BadInput:
        return None
