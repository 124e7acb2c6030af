"""The words of attncli.rules.option_conflicts' table: an option's flag (:func:`flag`), the conditions a
row is made of (:class:`On`, :class:`Off`, :class:`Given`, :class:`Is`, :class:`Not`, :class:`Below`,
:class:`Outside`, :class:`Blank`) and the :class:`Row` itself. The table re-exports them.

    >>> Row((Outside("steps", 1, 256),), ("circuit",), "--steps {steps}: give 1 to 256").holds({"steps": 0}, set())
    True

A helper below every wing (attncli/rules/): every wing may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

_FLAGS = {"text_b": "TEXT_B", "json_out": "--json",
          "text": "TEXT", "corrupt": "CORRUPT", "verify_cells": "--verify"}  # the causal tests' texts are arguments


def flag(name: str) -> str:
    """'hide_special' -> '--hide-special' (json_out -> --json; a command's texts are arguments)."""
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


# --- conditions ---------------------------------------------------------------------------------


def _on(value: Any) -> bool:
    return value is not None and value is not False


@dataclass(frozen=True)
class On:
    """The option is given (not absent, None or False)."""
    name: str

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        return _on(options.get(self.name))

    def text(self) -> str:
        return flag(self.name)


@dataclass(frozen=True)
class Given(On):
    """The option was typed on the command line, whatever its value (even its default)."""

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        return self.name in given


@dataclass(frozen=True)
class Off(On):
    """The option is not given."""

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        return not _on(options.get(self.name))

    def text(self) -> str:
        return f"no {flag(self.name)}"


@dataclass(frozen=True)
class Is:
    """The option's value is one of ``values`` (None: not given)."""
    name: str
    values: tuple

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        return options.get(self.name) in self.values

    def text(self) -> str:
        shown = [f"{flag(self.name)} {v}" if v is not None else f"no {flag(self.name)}" for v in self.values]
        return " or ".join(shown)


@dataclass(frozen=True)
class Not(Is):
    """The option is given, with a value outside ``values``."""

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        value = options.get(self.name)
        return value is not None and value not in self.values

    def text(self) -> str:
        return f"{flag(self.name)} other than {' or '.join(map(str, self.values))}"


@dataclass(frozen=True)
class Below(On):
    """A number below 0."""

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        value = options.get(self.name)
        return isinstance(value, int) and not isinstance(value, bool) and value < 0

    def text(self) -> str:
        return f"{flag(self.name)} below 0"


@dataclass(frozen=True)
class Outside(On):
    """A number given outside [low, high] (``above``: outside (low, high], low itself refused); NaN
    is outside every range."""
    low: float = 0
    high: float = 0
    above: bool = False

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        value = options.get(self.name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        inside = (self.low < value if self.above else self.low <= value) and value <= self.high
        return not inside  # NaN: both comparisons False, so outside

    def text(self) -> str:
        return f"{flag(self.name)} outside {'(' if self.above else '['}{self.low}, {self.high}]"


@dataclass(frozen=True)
class Blank(On):
    """A text given, but empty or only blanks."""

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        value = options.get(self.name)
        return isinstance(value, str) and not value.strip()

    def text(self) -> str:
        return f"an empty {flag(self.name)}"


@dataclass(frozen=True)
class Row:
    """One refusal: when every condition of ``when`` holds on one of ``paths``, ``message``
    (formatted with the options' values) is the error. ``when[0]`` is the option refused, the rest
    what it is refused with."""
    when: tuple
    paths: tuple[str, ...]
    message: str

    def holds(self, options: Mapping[str, Any], given: set[str]) -> bool:
        return all(c.holds(options, given) for c in self.when)

    def text(self, options: Mapping[str, Any]) -> str:
        return self.message.format_map({k: v for k, v in options.items()})
