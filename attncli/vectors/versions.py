"""Versions of stored models: how a write becomes a model atomically, and what may be removed.

``models/<name>`` is a symlink to ``models/.versions/<name>-<12 hex digits>``. ``new_version``
fills ``<name>-<id>.<pid>.partial``, fsyncs every file and directory in it, renames it to its
final name, fsyncs ``.versions``, and swaps the name link with one ``os.replace`` (then fsyncs
``models/``). Only then is the old version released: removed if, and only if, the store
created it (``store_version``: a real directory of that pattern directly inside ``.versions``,
resolved, so no link leads elsewhere) and no name refers to it any more; anything else is left
alone with a warning. ``sweep_stale`` removes what killed writes left behind.

Power loss: a version is complete on disk before the link points at it, and the link swap is
one rename, so after a crash a name points at its old version or its new one, whole. A crash
mid-write leaves a partial directory, swept by a later write.

Tests stop a write on cue between these steps (``pause_at``, attncli/io/faultpoints.py; inert
unless ATTN_TEST_PAUSE_AT names the stage) to check each of these claims under SIGKILL.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from attncli.io import messages
from attncli.env import paths
from attncli.errors import RuntimeFailure
from attncli.io.faultpoints import pause_at
from attncli.io.fileio import fsync_dir as _fsync_dir  # one helper for every folder fsync
from attncli.vectors.safeio import FileProblem




def _fsync_tree(top: Path) -> None:
    """fsync every file and directory under ``top`` (``top`` included), deepest first."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        for f in filenames:
            path = os.path.join(dirpath, f)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


VERSION_RE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,63})-(?P<vid>[0-9a-f]{12})")
_PARTIAL_RE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,63})-(?P<vid>[0-9a-f]{12})\.(?P<pid>[0-9]+)\.partial")
STALE_VERSION_SECONDS = 3600  # an unreferenced finished version older than this is swept


def _versions_dir() -> Path:
    return paths.models_dir() / ".versions"


def make_versions_dir() -> Path:
    """The store's ``.versions`` directory, created if need be (RuntimeFailure if it cannot be)."""
    versions = _versions_dir()
    try:
        versions.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeFailure(f"cannot create the model store at {versions.parent}: {exc.strerror or exc}") from None
    return versions


def store_version(target: Path) -> Path | None:
    """``target`` resolved, if it is a version directory the store itself created (a real
    directory named ``<name>-<12 hex digits>`` directly inside ``models/.versions``), else None."""
    try:
        real = Path(os.path.realpath(target))
        versions = Path(os.path.realpath(_versions_dir()))
    except (OSError, ValueError):
        return None
    if real.parent != versions or not VERSION_RE.fullmatch(real.name):
        return None
    if real.is_symlink() or not real.is_dir():
        return None
    return real


def _referenced_versions() -> set[Path]:
    """The resolved targets of every name link under ``models/`` (hidden temporary links included)."""
    root = paths.models_dir()
    out: set[Path] = set()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return out
    for entry in entries:
        if entry.name == ".versions" or not entry.is_symlink():
            continue
        try:
            out.add(Path(os.path.realpath(entry.path)))
        except (OSError, ValueError):
            continue
    return out


def release_version(target: Path | None, *, name: str) -> None:
    """Remove the old version ``target`` of model ``name`` if, and only if, the store created it
    and no name refers to it any more; anything else is left alone with a warning."""
    if target is None:
        return
    version = store_version(target)
    if version is None:
        messages.warn(f"model '{name}' pointed at {target}, which attn did not create: it was left as it was")
        return
    if version in _referenced_versions():
        return  # another name still uses it (its own retrain or delete removes it later)
    shutil.rmtree(version, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def sweep_stale() -> None:
    """Remove what an interrupted or killed write left in ``models/.versions``: partial versions of a
    process that is gone, stale temporary links, and finished versions no name refers to (older
    than an hour, so a concurrent writer's version about to be linked is never touched)."""
    import time

    root = paths.models_dir()
    versions = _versions_dir()
    try:
        entries = list(os.scandir(versions))
    except OSError:
        return
    referenced = None
    now = time.time()
    for entry in entries:
        try:
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                continue
            m = _PARTIAL_RE.fullmatch(entry.name)
            if m is not None:
                if not _pid_alive(int(m["pid"])):
                    shutil.rmtree(entry.path, ignore_errors=True)
                continue
            if VERSION_RE.fullmatch(entry.name) and now - entry.stat(follow_symlinks=False).st_mtime > STALE_VERSION_SECONDS:
                if referenced is None:
                    referenced = _referenced_versions()
                real = Path(os.path.realpath(entry.path))
                if real not in referenced:
                    shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue
    try:
        links = [e for e in os.scandir(root) if e.name.startswith(".") and ".link-" in e.name and e.is_symlink()]
    except OSError:
        links = []
    for entry in links:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > STALE_VERSION_SECONDS:
                os.unlink(entry.path)
        except OSError:
            continue


def copy_version(src: Path, dst: Path) -> None:
    """Copy a model directory: regular files and directories only (a FIFO, device or symlink in
    it is damage, never followed)."""
    import stat

    os.mkdir(dst)
    for entry in os.scandir(src):
        st = entry.stat(follow_symlinks=False)
        target = dst / entry.name
        if stat.S_ISDIR(st.st_mode):
            copy_version(Path(entry.path), target)
        elif stat.S_ISREG(st.st_mode):
            shutil.copyfile(entry.path, target, follow_symlinks=False)
        else:
            raise FileProblem(f"{entry.name} is not a regular file")


@contextmanager
def new_version(name: str, *, start_from: Path | None = None) -> Iterator[Path]:
    """Yield an empty (or ``start_from``-copied) directory; on a clean exit it becomes model ``name``.

    On any exception, KeyboardInterrupt included, the new directory is removed and the model that
    was there before stays untouched. Everything written is fsynced, directories included, before
    the link is swapped. The old version is removed only if the store created it and no other
    name refers to it (``release_version``).
    """
    versions = make_versions_dir()
    root = versions.parent
    sweep_stale()
    link = root / name
    if link.exists() and not link.is_symlink():
        raise RuntimeFailure(f"{link} is not managed by attn (not a symlink): move it away first")
    vid = uuid.uuid4().hex[:12]
    tmp = versions / f"{name}-{vid}.{os.getpid()}.partial"
    final = versions / f"{name}-{vid}"
    tmp_link = root / f".{name}.link-{vid}"
    try:
        if start_from is not None:
            copy_version(start_from, tmp)
        else:
            tmp.mkdir()
        yield tmp
        pause_at("version-written")  # (tests only: attncli/io/faultpoints.py)
        _fsync_tree(tmp)
        pause_at("version-fsynced")
        os.rename(tmp, final)
        _fsync_dir(versions)
        pause_at("version-renamed")
        old_target = Path(os.path.join(root, os.readlink(link))) if link.is_symlink() else None
        os.symlink(os.path.join(".versions", final.name), tmp_link)
        pause_at("link-made")
        os.replace(tmp_link, link)  # the commit point
        pause_at("link-replaced")
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not link.is_symlink() or os.path.realpath(link) != os.path.realpath(final):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.unlink(tmp_link)
        except OSError:
            pass
        raise
    if old_target is not None and os.path.realpath(old_target) != os.path.realpath(final):
        release_version(old_target, name=name)


