"""``python -m attncli``: the ``attn`` command.

SIGINT, SIGTERM and SIGHUP are held (blocked) while the entry module is found and imported, and
released once its handlers are in place: a Ctrl-C at that moment is delivered to them
("interrupted", exit 130), never a traceback through this file.
"""

import _signal

_STOPS = {getattr(_signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(_signal, name)}
_held = _signal.pthread_sigmask(_signal.SIG_BLOCK, _STOPS) if hasattr(_signal, "pthread_sigmask") else None

from attncli.cli.entry import main  # noqa: E402 - the signals are held until its handlers are in place

if _held is not None:
    _signal.pthread_sigmask(_signal.SIG_SETMASK, _held)  # a signal that came meanwhile is delivered now
main()
