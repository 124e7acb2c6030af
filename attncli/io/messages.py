"""Messages for a person on stderr (progress notes, warnings) from any wing.

The core wings never import rich or the CLI: they call :func:`warn` and :func:`info` here. Plain
text goes to stderr until a front end installs its own way of showing them (the CLI does, in
``attncli/cli/common.py``, so a message looks the same whichever wing sent it).
"""

from __future__ import annotations

import sys
from typing import Callable

from attncli.io.textio import visible

_sinks: dict[str, Callable[[str], None]] = {}


def install(*, warn: Callable[[str], None], info: Callable[[str], None]) -> None:
    """Route every later message through a front end's own functions."""
    _sinks["warn"], _sinks["info"] = warn, info


def warn(message: str) -> None:
    sink = _sinks.get("warn")
    if sink is not None:
        sink(message)
    else:
        print(f"warning: {visible(message)}", file=sys.stderr)


def info(message: str) -> None:
    sink = _sinks.get("info")
    if sink is not None:
        sink(message)
    else:
        print(visible(message), file=sys.stderr)
