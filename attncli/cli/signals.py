"""Signals that stop attn: Ctrl-C (SIGINT), SIGTERM and SIGHUP all clean up the same way.

``install()`` makes each raise :class:`attncli.errors.Stopped` in the main thread: every
``finally`` and ``except BaseException`` runs (a model being written is removed, the old one
stays), then the CLI prints one line ("interrupted", "terminated by SIGTERM") and exits with
128 + the signal's number. Installed first thing by the entry point, before the heavy imports,
so a Ctrl-C during start-up is handled too.
"""

from __future__ import annotations

import signal
import sys

from attncli.errors import Stopped

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _raise(signum, frame) -> None:  # noqa: ARG001 - the signal handler's signature
    raise Stopped(signum)


def _deliver_again(unraisable) -> None:
    """sys.unraisablehook: a Stopped raised where Python cannot propagate it (the handler ran inside
    a weakref or __del__ callback, e.g. the import system's module-lock clean-up) would be printed
    as "Exception ignored in ..." with a traceback, and the signal lost (attn went on, exit 0). The
    signal is sent again instead, from another thread (``signal.raise_signal`` would run the
    handler at once, inside this hook): the main thread's handler raises at its next check, once
    the finalizer is done."""
    if isinstance(unraisable.exc_value, Stopped):
        import _thread
        import os

        _thread.start_new_thread(os.kill, (os.getpid(), unraisable.exc_value.signum))
        return
    _previous_hook(unraisable)


_previous_hook = sys.unraisablehook


def install() -> None:
    global _previous_hook
    if sys.unraisablehook is not _deliver_again:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _deliver_again
    for signum in SIGNALS:
        try:
            if signal.getsignal(signum) is signal.SIG_IGN and signum != signal.SIGINT:
                continue  # nohup: a hang-up the user chose to ignore stays ignored
            signal.signal(signum, _raise)
        except (ValueError, OSError):  # not the main thread, or a platform without it
            pass
