"""The two doors of every file attn touches: a checked read and an atomic write.

Reading: a file a user or a stranger handed us (a model directory from anywhere, a stored
model, a config) may be anything: a FIFO (opening it would block), a device or a symlink to
``/dev/zero`` (reading it never ends), a huge file. :func:`open_regular`, :func:`read_bytes` and
:func:`read_text` open regular files only, without blocking, and read at most a stated number
of bytes (:func:`map_regular` maps one, for a reader that checks each span it reads); each failure is a :class:`FileProblem` whose message says what is wrong with the file
(no path: the caller names the file in its own message).

Writing: :func:`atomic_write` (and :func:`atomic_writer` for a stream) writes a temporary file
beside the target, fsyncs it, gives it the mode ``open()`` would have given (or the old file's),
renames it over the target with one ``os.replace`` and fsyncs the directory: the target is the
old file or the new one, whole, never a cut-off mix, even on a full disk or a crash.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterator

from attncli.errors import RuntimeFailure

if TYPE_CHECKING:
    import mmap


class FileProblem(Exception):
    """A file cannot be used; ``str()`` says why (no path: the caller names the file)."""


def open_regular(path: str | Path, *, follow_symlinks: bool = False) -> int:
    """A read-only descriptor of ``path`` if it is a regular file; FileProblem otherwise.

    The open never blocks (a FIFO) and, unless ``follow_symlinks``, a symlink is refused; with
    it, the link is followed but what it reaches must still be a regular file (a link to
    ``/dev/zero`` is refused), so nothing here waits or reads without end.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileProblem("it is missing") from None
    except IsADirectoryError:
        raise FileProblem("it is a directory, not a regular file") from None
    except OSError as exc:
        if not follow_symlinks and os.path.islink(path):
            raise FileProblem("it is a symbolic link, not a regular file") from None
        _environment(exc)
        raise FileProblem(f"it cannot be opened: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket or other special file"
        raise FileProblem(f"it is {kind}, not a regular file")
    try:
        os.set_blocking(fd, True)
    except OSError:
        pass
    return fd


def _environment(exc: OSError) -> None:
    """Too many open files or no memory is the environment's problem, not damage: re-raise it."""
    import errno

    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        raise exc


def read_bytes(path: str | Path, limit: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (checked before and while reading)."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise FileProblem(f"it is {size:,} bytes, more than the {limit:,} it can be")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            _environment(exc)
            raise FileProblem(f"it cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileProblem(f"it is more than {limit:,} bytes")
    return data


def read_text(path: str | Path, limit: int, *, follow_symlinks: bool = False) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes."""
    data = read_bytes(path, limit, follow_symlinks=follow_symlinks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"it is not UTF-8 text (byte {exc.start})") from None


def map_regular(path: str | Path, limit: int, *, follow_symlinks: bool = False) -> "mmap.mmap":
    """A read-only memory map of the whole of a regular file of 1 to ``limit`` bytes (opened by
    :func:`open_regular`: never a FIFO or a device). Mapping reads nothing; the caller reads only
    the spans it has checked against ``len()`` of the map (pages are read as they are touched)."""
    import mmap

    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileProblem(f"it is {size:,} bytes, more than the {limit:,} it can be")
        if size == 0:
            raise FileProblem("it is empty")
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError):
                _environment(exc)
            raise FileProblem(f"it cannot be mapped: {getattr(exc, 'strerror', None) or exc}") from None
    finally:
        os.close(fd)


def _new_file_mode(path: Path) -> int:
    """The mode the written file gets: the old file's if there is one, else what ``open()``
    would give a new file (0666 less the umask), not mkstemp's 0600."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def fsync_dir(path: str | Path) -> None:
    """fsync a directory, so that a rename inside it survives a power loss (where the OS allows)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into; on a clean exit it is fsynced and
    renamed over ``path`` (the commit point), on any exception it is removed and ``path`` is
    left as it was. OSError (a full disk, a read-only folder) is raised as it is: the caller's
    message names the file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _new_file_mode(path))
        os.replace(tmp, path)  # the commit point
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` (str as UTF-8) to ``path`` whole or not at all (see :func:`atomic_writer`);
    an OSError becomes a RuntimeFailure that names the file (exit 1)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        with atomic_writer(path) as fh:
            fh.write(data)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
