"""What every compute of the pipeline takes besides its request: the one signature

    compute(request, model=None, *, progress=None) -> result

``request`` is the command's request (a TableRequest: its options by name, checked by the table of
attncli.rules.option_conflicts); ``model`` the model it runs on: None (the compute loads the one the request
names), a model already loaded (explore's, a test's), or :class:`Later` (a loader the compute calls
once its own checks passed: the command line's, which says "loading ..." on stderr); ``progress`` what
it says while it works (:class:`Progress`; None: :class:`Quiet`). The result speaks
attncli.views.result's protocol.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional, Protocol

OnLayer = Callable[[int, int], None]  # (layer done, layers): a traced pass's progress


class Progress(Protocol):
    """What a compute says while it works; the command line shows it on stderr (attncli.cli.progress)."""

    on_layer: Optional[OnLayer]  # called as each layer of a traced pass is done, where the model reports it

    def stage(self, what: str) -> ContextManager[Any]:
        """A context around a stretch of work; its value, when not None, may count the work done
        (``advance(n)``: attn stats' texts)."""

    def bar(self, what: str, unit: str, total: int) -> ContextManager[Callable[[], None]]:
        """A context around ``total`` steps of ``unit``; its value is called after each step."""

    def info(self, message: str) -> None:
        """A remark on the way."""

    def warn(self, message: str) -> None:
        """A warning on the way."""


class Quiet:
    """A :class:`Progress` that says nothing (the Python API's default)."""

    on_layer: Optional[OnLayer] = None

    def stage(self, what: str) -> ContextManager[None]:
        return contextlib.nullcontext()

    def bar(self, what: str, unit: str, total: int) -> ContextManager[Callable[[], None]]:
        return contextlib.nullcontext(lambda: None)

    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


@dataclass(frozen=True)
class Later:
    """A model a compute loads when it needs it, after the checks that need none: ``load(name)``."""

    load: Callable[[str], Any]


def model_for(model: Any, name: Optional[str], default: Callable[[], Any]) -> Any:
    """The model named ``name`` to run: ``model`` when loaded, ``model.load(name)`` when :class:`Later`,
    else ``default()`` (the compute's own loader, from the request)."""
    if model is None:
        return default()
    if isinstance(model, Later):
        return model.load(name)
    return model


def quiet(progress: Optional[Progress]) -> Progress:
    return progress if progress is not None else Quiet()
