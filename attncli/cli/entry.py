"""The ``attn`` entry point: signals first, then the CLI, and one line for whatever stops it.

Kept free of heavy imports so the handlers are in place before Typer, rich and NumPy load: a
Ctrl-C (or SIGTERM, SIGHUP) during start-up ends with "interrupted" and exit 130, never a
traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    from attncli.cli import signals
    from attncli.errors import Stopped

    try:
        signals.install()
        from attncli.faultpoints import pause_at

        pause_at("start-up")  # (tests only: a signal delivered during start-up, on cue)
        from attncli.cli.main import main as run

        run()
    except (Stopped, KeyboardInterrupt) as exc:
        stopped = exc if isinstance(exc, Stopped) else Stopped(2)
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
