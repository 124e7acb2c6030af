"""Progress on stderr for work that takes more than a second, as ``attn train`` shows it: a line
saying what is being done once it has taken a second (with a spinner on a terminal), then a bar
where the work has steps. Under ``--json`` nothing, unless stderr is a terminal (a person watching, the JSON piped
on): a program reading stdout and stderr gets the JSON and nothing else."""

from __future__ import annotations


from attncli.cli.app import err_console, escape


def wanted(json_out: bool) -> bool:
    """Whether to show progress: always without --json; with it only on a terminal's stderr."""
    return not json_out or err_console().is_terminal


DELAY = 1.0  # seconds of work before a Stage or a Bar says anything: a quick run (or refusal) stays silent; 0: at once


class Stage:
    """One message for a stretch of work without steps (loading a model, preparing data), said
    once the work has run for ``DELAY`` seconds, so that a quick run prints nothing and a refusal
    is still the first line on stderr; on a terminal a spinner runs beside it until :meth:`stop`
    (or the end of the ``with``)."""

    def __init__(self, message: str, *, json_out: bool) -> None:
        import threading

        self.message, self.status, self.lock = message, None, threading.Lock()
        self.timer = None
        if wanted(json_out):
            self.timer = threading.Timer(DELAY, self._say)
            self.timer.daemon = True
            if DELAY <= 0:
                self._say()
            else:
                self.timer.start()

    def _say(self) -> None:
        with self.lock:
            if self.timer is None:
                return
            console = err_console()
            console.print(escape(self.message), highlight=False)
            if console.is_terminal:
                self.status = console.status("working", spinner="dots")
                self.status.start()

    def stop(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.status is not None:
                self.status.stop()
                self.status = None

    def __enter__(self) -> "Stage":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class Bar:
    """A bar of ``total`` steps (``label``: what a step is) on stderr, with ``message`` above it;
    both appear once the work has run for ``DELAY`` seconds, the bar at the steps done by then.
    :meth:`advance` after each step."""

    def __init__(self, message: str, label: str, total: int, *, json_out: bool) -> None:
        import threading

        self.message, self.label, self.total, self.done = message, label, total, 0
        self.progress, self.task, self.lock, self.timer = None, None, threading.Lock(), None
        if wanted(json_out):
            self.timer = threading.Timer(DELAY, self._start)
            self.timer.daemon = True
            if DELAY <= 0:
                self._start()
            else:
                self.timer.start()

    def _start(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.timer is None:
                return
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

    def stop(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.progress is not None:
                self.progress.stop()
                self.progress = None

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
