"""attncli.io.fileio, the one door for reading a file we were handed and for writing any output."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from _special_files import machine_device
from attncli.io import fileio
from attncli.errors import RuntimeFailure


def test_read_refuses_fifo_device_link_and_oversize(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(fileio.FileProblem, match="FIFO"):
        fileio.read_text(fifo, 100)  # returns at once: the open does not block
    link = tmp_path / "zero"
    link.symlink_to(machine_device("/dev/zero"))
    with pytest.raises(fileio.FileProblem, match="symbolic link"):
        fileio.read_bytes(link, 100)
    with pytest.raises(fileio.FileProblem, match="device"):
        fileio.read_bytes(link, 100, follow_symlinks=True)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(fileio.FileProblem, match="101 bytes, more than the 100"):
        fileio.read_bytes(big, 100)
    assert fileio.read_bytes(big, 101) == b"x" * 101
    with pytest.raises(fileio.FileProblem, match="directory"):
        fileio.read_bytes(tmp_path, 100, follow_symlinks=True)
    (tmp_path / "bad").write_bytes(b"\xff")
    with pytest.raises(fileio.FileProblem, match="not UTF-8"):
        fileio.read_text(tmp_path / "bad", 10)


def test_atomic_write_new_file_gets_open_mode_and_old_file_keeps_its_mode(tmp_path):
    target = tmp_path / "out.svg"
    old = os.umask(0o022)
    try:
        fileio.atomic_write(target, "new")
    finally:
        os.umask(old)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # what open() gives, not mkstemp's 0600
    target.chmod(0o600)
    fileio.atomic_write(target, b"again")
    assert target.read_bytes() == b"again" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.svg"]  # no temporary left behind


def test_atomic_write_on_a_full_disk_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "out.html"
    target.write_text("the good old file")
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", full)
    with pytest.raises(RuntimeFailure, match="No space left"):
        fileio.atomic_write(target, "x" * 10_000)
    monkeypatch.setattr(fileio.os, "fsync", real_fsync)
    assert target.read_text() == "the good old file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.html"]


def test_atomic_write_fsyncs_the_data_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def replace(a, b):
        calls.append("replace")
        real_replace(a, b)

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    monkeypatch.setattr(fileio.os, "replace", replace)
    fileio.atomic_write(tmp_path / "a.json", "{}")
    assert calls == ["fsync-file", "replace", "fsync-dir"]
