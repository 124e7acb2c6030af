"""Progress on stderr for work that takes more than a second, as ``attn train`` shows it: a line
saying what is being done once it has taken a second (with a spinner on a terminal), then a bar
where the work has steps. Under ``--json`` nothing, unless stderr is a terminal (a person watching, the JSON piped
on): a program reading stdout and stderr gets the JSON and nothing else."""

from __future__ import annotations


import contextlib

from attncli.cli.common import err_console, escape, info, warn


def wanted(json_out: bool) -> bool:
    """Whether to show progress: always without --json; with it only on a terminal's stderr."""
    return not json_out or err_console().is_terminal


DELAY = 1.0  # seconds of work before a Stage or a Bar says anything: a quick run (or refusal) stays silent; 0: at once


class Delayed:
    """What Stage and Bar share: ``_show`` runs once the work has run for ``DELAY`` seconds (in a
    timer thread, under the lock), unless :meth:`stop` came first; :meth:`stop` cancels the timer
    and ``_hide`` takes down what was shown. Nothing runs when progress is not ``wanted``."""

    def __init__(self, json_out: bool) -> None:
        import threading

        self.lock, self.timer = threading.Lock(), None
        if wanted(json_out):
            self.timer = threading.Timer(DELAY, self._start)
            self.timer.daemon = True
            if DELAY <= 0:
                self._start()
            else:
                self.timer.start()

    def _start(self) -> None:
        with self.lock:
            if self.timer is not None:  # not stopped meanwhile
                self._show()

    def _show(self) -> None:
        raise NotImplementedError

    def _hide(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self._hide()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class Stage(Delayed):
    """One message for a stretch of work without steps (loading a model, preparing data), said
    once the work has run for ``DELAY`` seconds, so that a quick run prints nothing and a refusal
    is still the first line on stderr; on a terminal a spinner runs beside it until :meth:`stop`
    (or the end of the ``with``)."""

    def __init__(self, message: str, *, json_out: bool) -> None:
        self.message, self.status = message, None
        super().__init__(json_out)

    def _show(self) -> None:
        console = err_console()
        console.print(escape(self.message), highlight=False)
        if console.is_terminal:
            self.status = console.status("working", spinner="dots")
            self.status.start()

    def _hide(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


class Bar(Delayed):
    """A bar of ``total`` steps (``label``: what a step is) on stderr, with ``message`` above it;
    both appear once the work has run for ``DELAY`` seconds, the bar at the steps done by then.
    :meth:`advance` after each step."""

    def __init__(self, message: str, label: str, total: int, *, json_out: bool) -> None:
        self.message, self.label, self.total, self.done = message, label, total, 0
        self.progress, self.task = None, None
        super().__init__(json_out)

    def _show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = err_console()
        console.print(escape(self.message), highlight=False)
        self.progress = Progress(TextColumn(escape(self.label)), MofNCompleteColumn(), BarColumn(),
                                 TimeElapsedColumn(), console=console, transient=False)
        self.task = self.progress.add_task(self.label, total=self.total, completed=self.done)
        self.progress.start()

    def advance(self) -> None:
        with self.lock:
            self.done += 1
            if self.progress is not None:
                self.progress.update(self.task, completed=self.done)

    def _hide(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class Progress:
    """What a compute says while it works (``stage``, ``bar``, ``info``: e.g.
    attncli.pipeline.heads_compute.compute's ``progress``), shown on stderr as a line, a bar or a
    message, unless ``json_out`` keeps stderr quiet where it must (see :func:`wanted`)."""

    def __init__(self, json_out: bool = False, on_layer=None) -> None:
        self.json_out = json_out
        self.on_layer = on_layer  # (l, L): a traced pass's layers as they are done (attncli.pipeline.running)

    def stage(self, what: str) -> Stage:
        return Stage(what, json_out=self.json_out)

    @contextlib.contextmanager
    def bar(self, what: str, unit: str, total: int):
        with Bar(what, unit, total, json_out=self.json_out) as bar:
            yield bar.advance

    def info(self, message: str) -> None:
        info(message)

    def warn(self, message: str) -> None:
        warn(message)
