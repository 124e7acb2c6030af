"""The one door of every export (``--svg``, ``--html``, ``--png``, the interactive page, ``attn
explore``'s ``x``): :func:`check_export` says, before any work, what a named path is and whether
attn can write it (BadInput, exit 2, when not); :func:`write_export` writes the data into it
(RuntimeFailure, exit 1, naming the path, when the write fails).

What the path names decides how it is written (docs/exports.md, "Where an export goes"):

- a new path or a regular file: atomically (:func:`attncli.io.fileio.atomic_writer`): a temporary
  file beside it, renamed over it, so an old file is the old one or the new one, never a mix;
- a symbolic link: the same, onto the file the link leads to; the link stays a link;
- one of attn's own descriptors (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
  ``/proc/self/fd/N``): written into that descriptor, whatever it is (a pipe, a terminal, a file
  the shell opened), as a shell's ``>`` would;
- a character device (``/dev/null``, ``/dev/full``, a terminal): written into, never replaced;
- a FIFO: written into once a reader has it open, waiting at most :data:`FIFO_WAIT` seconds for
  one (a FIFO is never opened for reading, and an open never blocks);
- a directory, a block device, a socket, a file under /proc or /sys: refused.
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import atomic_writer
from attncli.io.messages import info

FILE, DESCRIPTOR, DEVICE, FIFO = "file", "descriptor", "device", "fifo"
FIFO_WAIT = 10.0  # seconds an export waits for a FIFO's reader before it gives up
_POLL = 0.05  # seconds between two tries to open a FIFO no process reads yet
# names of a descriptor of this process: /dev/stdout, /dev/fd/3, /proc/self/fd/1, /proc/<pid>/fd/1
_DESCRIPTOR = re.compile(r"/dev/(?P<std>stdin|stdout|stderr)|/dev/fd/(?P<dev>\d+)"
                         r"|/proc/(?P<pid>self|thread-self|\d+)/fd/(?P<proc>\d+)")
_STD = {"stdin": 0, "stdout": 1, "stderr": 2}
_KERNEL = ("/proc", "/sys")  # the kernel's own files: regular by stat, but no place for an export


@dataclass(frozen=True)
class ExportTarget:
    """Where an export goes: ``kind`` (FILE, DESCRIPTOR, DEVICE or FIFO), the ``path`` to write
    (a symlink's target for FILE) or the descriptor ``fd`` (DESCRIPTOR)."""

    given: str
    kind: str
    path: Path | None = None
    fd: int | None = None

    @property
    def is_stdout(self) -> bool:
        return self.kind == DESCRIPTOR and self.fd == 1

    def key(self) -> tuple:
        """Two targets with the same key are the same file or stream."""
        if self.kind == DESCRIPTOR:
            st = os.fstat(self.fd)
            return ("fd", self.fd) if not stat.S_ISREG(st.st_mode) else (st.st_dev, st.st_ino)
        try:
            st = os.stat(self.path)
            return st.st_dev, st.st_ino
        except OSError:
            return ("path", str(self.path))


def _named(given: str, option: str) -> str:
    return f"{option} {given!r}" if option else repr(given)


def _descriptor(given: str) -> int | None:
    """The descriptor ``given`` names (itself or through symbolic links), or None."""
    path = os.path.abspath(given)
    for _ in range(40):  # the kernel's own limit on links followed
        found = _DESCRIPTOR.fullmatch(path)
        if found is not None:
            pid = found.group("pid")
            if pid is not None and pid not in ("self", "thread-self") and int(pid) != os.getpid():
                return None  # another process's descriptor: /proc, refused below
            std = found.group("std")
            return _STD[std] if std else int(found.group("dev") or found.group("proc"))
        try:
            link = os.readlink(path)
        except OSError:
            return None
        path = os.path.normpath(os.path.join(os.path.dirname(path), link))
    return None


def _check_descriptor(given: str, option: str, fd: int, binary: bool) -> ExportTarget:
    import fcntl

    try:
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        raise BadInput(f"{_named(given, option)}: descriptor {fd} is not open") from None
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise BadInput(f"{_named(given, option)}: descriptor {fd} is open for reading only")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)
            or stat.S_ISSOCK(st.st_mode)):
        raise BadInput(f"{_named(given, option)}: descriptor {fd} is not a file, a pipe or a terminal")
    if binary and os.isatty(fd):
        raise BadInput(f"{_named(given, option)} is a terminal: a PNG is binary, send it to a file or a pipe")
    return ExportTarget(given, DESCRIPTOR, fd=fd)


def _missing_folder(given: str, option: str, real: Path) -> BadInput:
    """Why the folder of a new file ``real`` is not there: a missing folder, or a file on its way."""
    for folder in reversed(real.parents):
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            return BadInput(f"{_named(given, option)}: the folder {str(folder)!r} does not exist")
        except OSError as exc:
            return BadInput(f"{_named(given, option)}: the folder {str(folder)!r} cannot be reached: "
                            f"{exc.strerror or exc}")
        if not stat.S_ISDIR(st.st_mode):
            return BadInput(f"{_named(given, option)}: {str(folder)!r} is a file, not a folder")
    return BadInput(f"{_named(given, option)}: the folder {str(real.parent)!r} cannot be reached")


def check_export(given: str | Path, option: str = "", *, binary: bool = False) -> ExportTarget:
    """Where an export named ``given`` (by ``option``, for messages) goes, or BadInput saying why it
    cannot go there. ``binary``: the data is not text (a PNG), refused onto a terminal."""
    given = str(given)
    if given == "-":
        raise BadInput(f"{option or 'an export'} needs a file name ('-' is not stdout here: "
                       "/dev/stdout is, and the view then is not drawn on stdout)")
    fd = _descriptor(given)
    if fd is not None:
        return _check_descriptor(given, option, fd, binary)
    real = Path(os.path.realpath(given))  # a symlink's target (a new one if it dangles)
    if any(str(real) == top or str(real).startswith(top + "/") for top in _KERNEL):
        raise BadInput(f"{_named(given, option)} is a file of the kernel's ({str(real)!r}), not a file an export "
                       "can be written to: give a file name")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise _missing_folder(given, option, real) from None
    except OSError as exc:
        what = "is a loop of symbolic links" if exc.errno == errno.ELOOP else f"cannot be reached: {exc.strerror or exc}"
        raise BadInput(f"{_named(given, option)} {what}") from None
    if st is None or stat.S_ISREG(st.st_mode):
        try:
            folder = os.stat(real.parent)
        except OSError:
            raise _missing_folder(given, option, real) from None
        if not stat.S_ISDIR(folder.st_mode):
            raise _missing_folder(given, option, real)
        if st is not None and not os.access(real, os.W_OK):
            raise BadInput(f"{_named(given, option)} is not writable (permission denied)")
        if not os.access(real.parent, os.W_OK | os.X_OK):
            raise BadInput(f"{_named(given, option)}: the folder {str(real.parent)!r} is not writable (an export is "
                           "written beside its file, then renamed over it)")
        return ExportTarget(given, FILE, path=real)
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        suffix = Path(given).suffix or ("." + option.lstrip("-") if option.startswith("--") else ".svg")
        raise BadInput(f"{_named(given, option)} is a directory: give a file name, e.g. "
                       f"{option + ' ' if option else ''}view{suffix}")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        if not os.access(real, os.W_OK):
            raise BadInput(f"{_named(given, option)} is not writable (permission denied)")
        return ExportTarget(given, DEVICE if stat.S_ISCHR(mode) else FIFO, path=real)
    kind = "a block device (a disk)" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file"
    raise BadInput(f"{_named(given, option)} is {kind}: an export goes into a file, a terminal, a pipe or a "
                   "character device")


def write_export(given: str | Path, data: bytes | str, option: str = "", *, binary: bool = False) -> ExportTarget:
    """Write ``data`` (str as UTF-8) where ``given`` leads (checked again: it may have changed
    since :func:`check_export`); RuntimeFailure naming it when the write fails (a full device, a
    reader gone, no reader of a FIFO within FIFO_WAIT seconds). The target written."""
    target = check_export(given, option, binary=binary)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        if target.kind == FILE:
            with atomic_writer(target.path) as fh:
                fh.write(data)
        elif target.kind == DESCRIPTOR:
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                try:
                    if stream is not None:
                        stream.flush()
                except (OSError, ValueError):
                    pass
            _write_all(target.fd, data)
        else:
            fd = _open_fifo(target, option) if target.kind == FIFO else _open_device(target)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
    except OSError as exc:
        reason = ("its reader closed it before the export was written" if exc.errno == errno.EPIPE
                  else exc.strerror or str(exc))
        raise RuntimeFailure(f"cannot write {_named(str(given), option)}: {reason}") from None
    return target


_OPEN = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_device(target: ExportTarget) -> int:
    """A descriptor writing into the character device (no O_CREAT, no O_TRUNC: never replaced)."""
    fd = os.open(target.path, _OPEN)
    if not stat.S_ISCHR(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "it is no longer a character device")
    os.set_blocking(fd, True)
    return fd


def _open_fifo(target: ExportTarget, option: str) -> int:
    """A descriptor writing into the FIFO once a process reads it (O_NONBLOCK: an open with no
    reader fails with ENXIO at once instead of blocking), tried for FIFO_WAIT seconds."""
    deadline = time.monotonic() + FIFO_WAIT
    said = False
    while True:
        try:
            fd = os.open(target.path, _OPEN)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        if time.monotonic() >= deadline:
            raise RuntimeFailure(f"cannot write {_named(target.given, option)}: it is a FIFO that no process read "
                                 f"within {FIFO_WAIT:g} s: start its reader first (e.g. cat FIFO > out &)")
        if not said:
            info(f"{_named(target.given, option)} is a FIFO: waiting up to {FIFO_WAIT:g} s for a process to read it")
            said = True
        time.sleep(_POLL)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "it is no longer a FIFO")
    os.set_blocking(fd, True)  # this open's own flags: a slow reader is waited for
    return fd


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` into ``fd`` (waiting while a non-blocking pipe is full)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[n:]
