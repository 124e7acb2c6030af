"""The one rule for every integer a user gives attn: it lies in a range, or it is refused.

An option's value (``--threads 4``, ``--top-k 8``, ``--pool 32``) and the environment variables
attn reads as numbers (THREAD_VARIABLES) each have a range. A value outside it, at any magnitude
(``0``, ``1025``, ``10**20``, ``2**63``, five thousand digits), is refused before any work: exit 2
and one line naming the option or variable, its range and the value. Nothing is clamped.

The range is the option's own where it declares one (Typer's ``min``/``max``, or a request's
check: ``--top-k`` 1 to 64), and never wider than RANGES: a number that reaches C must fit the
C ``int`` the libraries take (threadpoolctl, BLAS, NumPy's seeds), so every integer option is held
to MACHINE_INT unless RANGES names a narrower or a wider range for it. The command line applies
``option_range`` to every integer option of every command as the command is built
(attncli/cli/commands.py), so a new option is held to it without a line of its own.

An environment variable that is unset or empty is not given; any other value must be a whole
number in its range (``OMP_NUM_THREADS=abc`` is refused as ``--threads abc`` would be). OpenMP's
nested form ``OMP_NUM_THREADS=4,2`` is a list of such numbers, one per nesting level; its first is
the threads attn runs (every element held to the range).
"""

from __future__ import annotations

import os
import re
from typing import Optional

from attncli.errors import BadInput

MACHINE_INT = 2**31 - 1  # a C int: what threadpoolctl, BLAS and most C libraries take
MAX_THREADS = 1024  # BLAS threads (--threads, THREAD_VARIABLES): more than any machine attn runs on
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
# an option's range where the default [-MACHINE_INT, MACHINE_INT] is not it (its own check may be narrower)
RANGES: dict[str, tuple[int, int]] = {
    "--threads": (1, MAX_THREADS),
    "--seed": (-MACHINE_INT, 2**32 - 1),  # NumPy's and gensim's seeds take 32 bits
    "--max-tokens": (-MACHINE_INT, 2**53),  # a corpus's token count may pass a C int; a float64 holds it exactly
    "--max-texts": (-MACHINE_INT, 2**53),
}
_DIGITS = re.compile(r"\s*[+-]?\d+\s*")
_SHOWN_DIGITS = 24  # a longer number is shown by its length


def option_range(name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> tuple[int, int]:
    """The range of option ``name``: its own ``lo``/``hi`` (None: not declared) inside RANGES' or the machine's."""
    own_lo, own_hi = RANGES.get(name, (-MACHINE_INT, MACHINE_INT))
    return (own_lo if lo is None else max(lo, own_lo)), (own_hi if hi is None else min(hi, own_hi))


def shown(value: object) -> str:
    """A number as a message shows it: a very long one by its length, not its digits."""
    text = str(value).strip()
    if _DIGITS.fullmatch(text) and len(text) > _SHOWN_DIGITS:
        return f"a number of {len(text.lstrip('+-'))} digits"
    return repr(value) if isinstance(value, str) else str(value)


def refusal(name: str, value: object, lo: int, hi: int) -> BadInput:
    return BadInput(f"{name} must be a whole number from {lo:,} to {hi:,}, not {shown(value)}")


def whole_number(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` (an int, or its text) as an int in [lo, hi], or BadInput naming ``name``. A text
    is read only when it is short enough to be in range (no five-thousand-digit conversion)."""
    if isinstance(value, str):
        if not _DIGITS.fullmatch(value) or len(value.strip().lstrip("+-")) > max(len(str(abs(lo))), len(str(abs(hi)))):
            raise refusal(name, value, lo, hi)
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise refusal(name, value, lo, hi)
    return value


NESTED = ("OMP_NUM_THREADS",)  # OpenMP reads a comma-separated list, one number per nesting level


def environment_number(name: str, lo: int, hi: int) -> Optional[int]:
    """The environment variable ``name`` as a whole number in [lo, hi]; None if unset or empty. A
    NESTED variable's list gives its first number (each one checked)."""
    value = os.environ.get(name, "")
    if not value.strip():
        return None
    parts = value.split(",") if name in NESTED else [value]
    return [whole_number(f"the environment variable {name}", part, lo, hi) for part in parts][0]


def environment_threads() -> Optional[int]:
    """The BLAS threads the environment asks for: the first of THREAD_VARIABLES that is set (each
    one set is checked, so a bad one is refused even when an earlier one is good)."""
    chosen = None
    for name in THREAD_VARIABLES:
        n = environment_number(name, 1, MAX_THREADS)
        if chosen is None:
            chosen = n
    return chosen
