"""A child ``attn`` (or Python) process stopped on cue at a named stage (attncli/io/faultpoints.py):
the test knows where the process is when it sends a signal, and the child is killed whatever
happens (a failed assertion, a timeout), so nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def child_env(home: Path, stage: str, flag: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, ATTN_HOME=str(home), ATTN_TEST_PAUSE_AT=stage, ATTN_TEST_PAUSED=str(flag),
               PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env.pop("FORCE_COLOR", None)
    env.update(extra)
    return env


def _default_signals() -> None:
    # a child inherits ignored signals (nohup, a CI runner's SIGHUP): attn keeps an ignored
    # SIGHUP ignored on purpose, so the test gives its child the default dispositions
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@contextmanager
def paused(argv: list[str], home: Path, stage: str, *, timeout: float = 120, **env: str) -> Iterator[subprocess.Popen]:
    """Start ``argv`` paused at ``stage``; yield the process once it is there (its stderr and
    stdout are pipes). Killed on the way out if still running."""
    flag = home.parent / f"paused-{stage}-{os.getpid()}"
    if flag.exists():
        flag.unlink()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(home, stage, flag, **env), preexec_fn=_default_signals)
    try:
        deadline = time.monotonic() + timeout
        while not flag.exists():
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"the child ended (exit {proc.returncode}) before {stage}: {err[-2000:]}")
            assert time.monotonic() < deadline, f"the child did not reach {stage}"
            time.sleep(0.02)
        assert flag.read_text(encoding="utf-8") == stage
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


PYTHON = sys.executable
