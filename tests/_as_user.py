"""Run ``attn`` as its own process, as the current user or as a plain one ('nobody').

As root, a plain user's run is a fork of this process that drops to nobody's uid and gid (as
``subprocess``'s ``user=`` does) and runs attn's entry point with fds 0, 1, 2 set as asked. It does
not exec a new interpreter: the interpreter may live where a plain user cannot read (a pyenv under
/root), so the modules the command needs are imported before the fork (:func:`warm`).
"""

from __future__ import annotations

import os
import pwd
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

ATTN = [sys.executable, "-m", "attncli"]
PIPE = subprocess.PIPE


@dataclass
class Ran:
    returncode: int
    stdout: bytes
    stderr: bytes


def plain_user() -> Optional[tuple[int, int]]:
    """(uid, gid) of 'nobody' when this process is root and can become it; None otherwise."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def warm() -> None:
    """Import what an export command reads lazily, so that a child without the right to read the
    interpreter's own files still has it."""
    import unicodedata  # noqa: F401
    import xml.etree.ElementTree  # noqa: F401

    import typer.rich_utils  # noqa: F401 - Typer's usage errors

    import numpy  # noqa: F401
    import rich.console  # noqa: F401
    import rich.table  # noqa: F401
    from typer.testing import CliRunner

    from attncli.cli.main import app

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for option, suffix in (("--svg", "svg"), ("--html", "html"), ("--png", "png")):
            CliRunner().invoke(app, ["matrix", "time flies", option, os.path.join(tmp, f"w.{suffix}")])
        CliRunner().invoke(app, ["lens", "time flies", "--svg", "/proc/version"])


def run_attn(args: list[str], *, cwd: str, env: dict[str, str], user: Optional[tuple[int, int]] = None,
             stdout=PIPE, timeout: float = 120, before: Optional[Callable[[], None]] = None) -> Ran:
    """attn ``args`` in ``cwd`` with ``env``; ``stdout`` PIPE (captured) or an open descriptor / file.
    ``user`` (uid, gid): run as that user (a fork that drops its rights); ``before``: called in
    the forked child before the command (to patch a module), only with ``user``."""
    if user is None:
        out = subprocess.run(ATTN + args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                             stderr=PIPE, timeout=timeout)
        return Ran(out.returncode, out.stdout or b"", out.stderr)
    return _forked(args, cwd=cwd, env=env, user=user, stdout=stdout, timeout=timeout, before=before)


def _forked(args, *, cwd, env, user, stdout, timeout, before) -> Ran:
    err_r, err_w = os.pipe()
    out_r = None
    if stdout is PIPE:
        out_r, out_w = os.pipe()
    else:
        out_w = stdout if isinstance(stdout, int) else stdout.fileno()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 97
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (err_r, out_r):
                if fd is not None:
                    os.close(fd)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
            sys.stdin = open(0, "r", closefd=False)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
            import attncli.cli.common as cli_app

            cli_app._consoles.clear()
            if before is not None:
                before()
            sys.argv = ["attn", *args]
            from attncli.cli.entry import main

            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - reported to the parent through stderr
            traceback.print_exc()
            code = 98
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001
                    pass
            os._exit(code)
    os.close(err_w)
    if out_r is not None:
        os.close(out_w)
    chunks: dict[int, list[bytes]] = {fd: [] for fd in (err_r, out_r) if fd is not None}
    deadline = time.monotonic() + timeout
    open_fds = list(chunks)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"attn {args} did not end within {timeout} s")
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
                os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return Ran(code, b"".join(chunks.get(out_r, [])) if out_r is not None else b"", b"".join(chunks[err_r]))
