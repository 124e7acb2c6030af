"""The store's versions (attncli/vectors/versions.py): what counts as a version, loads that race a
retrain (run again on the new version, give up after the documented swaps), a damaged model read
once, and the sweep of stale partial versions and temporary links, which never signals a live
writer; faults (a busy file, a link moved away mid-scan) injected only at the OS calls."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _lookup_fixtures import WORDS, save_plain

from attncli.env import paths
from attncli.vectors import store, versions
from attncli.vectors.model import load_vectors


# ---------------------------------------------------------------- versions


def test_store_version_is_only_a_real_version_directory_inside_versions(tmp_path):
    save_plain("m")
    version = (paths.models_dir() / "m").resolve()
    assert versions.store_version(paths.models_dir() / "m") == version
    lookalike = tmp_path / "elsewhere" / version.name  # the right name, the wrong place
    lookalike.mkdir(parents=True)
    assert versions.store_version(lookalike) is None
    handmade = paths.models_dir() / ".versions" / "handmade"  # the right place, not a version's name
    handmade.mkdir()
    assert versions.store_version(handmade) is None
    a_file = paths.models_dir() / ".versions" / "x-0123456789ab"  # a version's name, but a file
    a_file.write_text("", encoding="utf-8")
    assert versions.store_version(a_file) is None


def test_a_version_that_cannot_be_removed_does_not_fail_the_delete(monkeypatch):
    save_plain("m")
    version = (paths.models_dir() / "m").resolve()

    def busy(*args, **kwargs):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(os, "rmdir", busy)
    store.delete_model("m")  # the name is gone; what is left of the version is swept later
    assert not (paths.models_dir() / "m").is_symlink() and version.is_dir()


def test_the_sweep_never_signals_a_live_writer_nor_removes_its_partial_version():
    save_plain("m")
    # a stand-in writer that reports any signal it is sent (every catchable one, whatever the
    # dispositions it inherited, e.g. SIGHUP ignored under nohup) by exiting
    code = ("import signal, sys, time\n"
            "for s in signal.valid_signals():\n"
            "    try:\n        signal.signal(s, lambda n, f: sys.exit(100 + n))\n"
            "    except (OSError, ValueError, RuntimeError):\n        pass\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "ready\n"
        partial = paths.models_dir() / ".versions" / f"m-0123456789ab.{writer.pid}.partial"
        unknowable = paths.models_dir() / ".versions" / f"m-0123456789ac.{10**20}.partial"  # no such pid can be asked
        partial.mkdir()
        unknowable.mkdir()
        versions.sweep_stale()
        assert partial.is_dir() and unknowable.is_dir()
        with pytest.raises(subprocess.TimeoutExpired):  # still running: asked with signal 0, never sent a signal
            writer.wait(timeout=1)
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    versions.sweep_stale()
    assert not partial.exists() and unknowable.is_dir()


def test_a_symlink_inside_a_model_is_damage_not_followed_when_copied(tmp_path):
    save_plain("m")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the model's", encoding="utf-8")
    (store.model_dir("m") / "notes.txt").symlink_to(secret)
    with pytest.raises(store.CorruptModel, match="notes.txt is not a regular file"):
        store.update_meta("m", note="x")


def test_a_damaged_model_is_read_once_when_no_retrain_swapped_it():
    save_plain("m")
    seen = []

    def load(directory):
        seen.append(directory)
        raise store.CorruptModel("vectors.npy is truncated")

    with pytest.raises(store.CorruptModel, match="^vectors.npy is truncated$"):
        store.read_one_version("m", load)
    assert seen == [(paths.models_dir() / "m").resolve()]  # the same version twice would be damage, not a race


def test_a_retrain_during_a_load_makes_the_load_run_again_on_the_new_version():
    save_plain("m")
    old = (paths.models_dir() / "m").resolve()
    bigger = list(WORDS) + ["extra"]
    seen = []

    def load(directory):
        seen.append(directory)
        if len(seen) == 1:
            save_plain("m", seed=5, words=bigger)  # swaps the link and removes the version being read
        return load_vectors("m", directory=directory)

    vectors = store.read_one_version("m", load)
    assert vectors.words == bigger
    assert seen == [old, (paths.models_dir() / "m").resolve()] and not old.exists()


def test_a_name_swapped_on_every_load_gives_up_with_the_load_error_after_the_documented_swaps():
    save_plain("m")
    calls = []

    def load(directory):
        calls.append(directory)
        save_plain("m", seed=len(calls))  # a new version on every attempt
        raise store.CorruptModel(f"vanished {len(calls)}")

    with pytest.raises(store.CorruptModel, match=f"^vanished {store.SWAPS_FOLLOWED}$"):
        store.read_one_version("m", load)
    assert len(calls) == store.SWAPS_FOLLOWED and len(set(calls)) == store.SWAPS_FOLLOWED


def aged(path: Path, seconds: float = 2 * 3600) -> None:
    """Set ``path``'s own mtime (a link's, not its target's) ``seconds`` in the past."""
    import time

    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def dead_pid() -> int:
    """The pid of a process that has exited (a writer killed mid-write)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_file_that_cannot_be_removed_keeps_only_itself_when_the_sweep_clears_a_killed_write(monkeypatch):
    """The sweep removes what it can: one busy file neither stops the rest of a dead writer's partial
    version nor of a stale unreferenced version from being reclaimed (the first file removed in
    each directory fails, whichever the listing gives first)."""
    save_plain("m")
    root = paths.models_dir() / ".versions"
    partial = root / f"gone-0123456789ab.{dead_pid()}.partial"
    stale = root / "gone-0123456789cd"  # a finished version no name refers to, older than an hour
    for top in (partial, stale):
        top.mkdir()
        for f in ("a.npy", "b.npy", "c.npy"):
            (top / f).write_bytes(b"x")
    aged(stale)
    real_unlink = os.unlink
    failed_in: set = set()

    def busy_once_per_directory(path, *, dir_fd=None):
        where = os.fstat(dir_fd).st_ino if dir_fd is not None else os.path.dirname(os.path.abspath(path))
        if where not in failed_in:
            failed_in.add(where)
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", busy_once_per_directory)
    versions.sweep_stale()
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert len(failed_in) == 2
    assert len(list(partial.iterdir())) == 1 and len(list(stale.iterdir())) == 1
    assert load_vectors("m").words == list(WORDS)  # the model in use is never touched


def test_stale_temporary_links_are_swept_and_a_fresh_one_is_kept():
    """A killed write leaves ``models/.NAME.link-ID``: swept once older than an hour; a younger one
    may be a live writer's, about to be swapped in."""
    save_plain("m")
    root = paths.models_dir()
    target = os.readlink(root / "m")
    old_link, young_link = root / ".m.link-0123456789ab", root / ".m.link-0123456789cd"
    old_link.symlink_to(target)
    young_link.symlink_to(target)
    aged(old_link)
    not_a_link = root / ".m.link-0123456789ef"  # not the store's: left alone
    not_a_link.write_text("", encoding="utf-8")
    aged(not_a_link)
    versions.sweep_stale()
    assert not old_link.is_symlink() and young_link.is_symlink() and not_a_link.is_file()
    assert load_vectors("m").words == list(WORDS)


def test_a_link_that_vanishes_while_the_sweep_lists_names_does_not_hide_the_other_names(monkeypatch):
    """A concurrent writer's ``os.replace`` moves its temporary link away between realpath's lstat
    and readlink (FileNotFoundError): the names listed after it still protect their versions, old
    as they are, from the sweep."""
    save_plain("m1")
    save_plain("m2", seed=1)
    root = paths.models_dir()
    for name in ("m1", "m2"):
        aged(root / os.readlink(root / name))
    (root / ".w.link-0123456789ab").symlink_to(os.path.join(".versions", "w-0123456789ab"))
    real_scandir, real_realpath = os.scandir, os.path.realpath

    def listed_hidden_first(path="."):  # a listing order the file system may give: sorted, "." first
        if not isinstance(path, int) and os.fspath(path) == os.fspath(root):  # (rmtree lists by fd)
            return sorted(real_scandir(path), key=lambda e: e.name)
        return real_scandir(path)

    def vanishing(path, *args, **kwargs):
        if os.path.basename(os.fspath(path)).startswith(".w.link-"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
        return real_realpath(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", listed_hidden_first)
    monkeypatch.setattr(os.path, "realpath", vanishing)
    versions.sweep_stale()
    monkeypatch.setattr(os, "scandir", real_scandir)
    monkeypatch.setattr(os.path, "realpath", real_realpath)
    assert load_vectors("m1").words == list(WORDS) and load_vectors("m2").words == list(WORDS)


def test_a_finished_version_no_name_uses_is_swept_only_once_an_hour_old():
    """sweep_stale's promise: an unreferenced version younger than an hour may be a concurrent
    writer's, about to be linked, and is kept; an older one is what a killed write left: removed."""
    import shutil

    save_plain("m")
    in_use = Path(os.path.realpath(paths.models_dir() / "m"))
    young, old = in_use.parent / "m-0123456789ab", in_use.parent / "m-0123456789cd"
    for copy in (young, old):
        shutil.copytree(in_use, copy)
    aged(old)
    versions.sweep_stale()
    assert young.is_dir() and not old.exists() and in_use.is_dir()
    assert load_vectors("m").words == list(WORDS)
