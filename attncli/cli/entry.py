"""The ``attn`` entry point: signals first, then the CLI, and one line for whatever stops it.

The first lines of this module, before any other import, put a handler on SIGINT, SIGTERM and
SIGHUP through the built-in ``_signal`` module (``signal`` itself imports ``enum``, some
milliseconds): from then on a Ctrl-C during start-up (the imports below it included) ends with
"interrupted" and exit 130, never a traceback. That early handler exits at once (nothing has
been written yet); ``main`` then installs attncli.cli.signals' handlers, which raise so that
every clean-up runs.
"""

import _signal

EARLY_LINES = {2: "interrupted", 15: "terminated by SIGTERM", 1: "terminated by SIGHUP"}  # Stopped.message's


def _stop_now(signum, frame) -> None:  # noqa: ARG001 - the signal handler's signature
    """Start-up's handler: the signal's one line on stderr and 128 + its number, at once."""
    import os

    try:
        os.write(2, (EARLY_LINES.get(signum, "interrupted") + "\n").encode("ascii"))
    except OSError:
        pass
    os._exit(128 + signum)


def _install_early() -> None:
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(_signal, name, None)
        if signum is None:
            continue
        try:
            if name != "SIGINT" and _signal.getsignal(signum) == _signal.SIG_IGN:
                continue  # nohup: a hang-up the user chose to ignore stays ignored
            _signal.signal(signum, _stop_now)
        except (ValueError, OSError):  # not the main thread (imported by a library user's thread)
            pass


_install_early()

import sys  # noqa: E402 - after the handlers, on purpose

from attncli.cli import signals  # noqa: E402
from attncli.cli.main import main as run  # noqa: E402
from attncli.errors import Stopped  # noqa: E402
from attncli.io.faultpoints import pause_at  # noqa: E402


def main() -> None:
    try:
        signals.install()
        pause_at("start-up")  # (tests only: a signal delivered during start-up, on cue)
        run()
    except (Stopped, KeyboardInterrupt) as exc:
        stopped = Stopped.of(exc)
        _say(stopped.message)
        sys.exit(stopped.exit_code)


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    main()
