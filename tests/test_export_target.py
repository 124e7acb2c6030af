"""Exports write into what the user names (attncli.io.export_target; docs/exports.md, "Where an
export goes"), each kind run as its own attn process, as root and as a plain user ('nobody').

- /dev/stdout (a pipe, a file the shell opened, a link to /proc/self/fd/1) is written into, and
  the view is then not drawn on stdout: what stdout carries parses as SVG;
- a character device is written into and stays a device; a full one is exit 1, no traceback;
- a FIFO is written into when a reader has it, and without one the export ends (exit 1) after a
  bounded wait, the FIFO left a FIFO;
- a symlink keeps being a link, its target replaced whole;
- a directory, a block device, a socket, a /proc file, a path through a file: exit 2 before any work.
"""

from __future__ import annotations

import errno
import os
import pty
import shutil
import socket
import stat
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from _as_user import PIPE, plain_user, run_attn, warm
from _special_files import machine_device

REPO = Path(__file__).resolve().parent.parent
SENTENCE = "time flies"
USERS = ["self", "nobody"]
TABLE = b"time  flies"  # the heatmap's header as drawn on a terminal


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm()


@pytest.fixture
def shared():
    """A folder any user may write (a plain user cannot reach pytest's own tmp_path)."""
    path = Path(tempfile.mkdtemp(prefix="attn-exports-"))
    path.chmod(0o777)
    (path / "home").mkdir(mode=0o777)
    (path / "home").chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(who: str):
    if who == "self":
        return None
    user = plain_user()
    if user is None:
        pytest.skip("running as a plain user needs root and a 'nobody' account")
    return user


def attn(args, shared: Path, who: str, **kw):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "ATTN_HOME": str(shared / "home"),
           "HOME": str(shared), "COLUMNS": "200", "LANG": "C.UTF-8"}
    return run_attn(args, cwd=str(shared), env=env, user=as_user(who), **kw)


def assert_svg(data: bytes) -> None:
    root = ET.fromstring(data.decode("utf-8"))  # the whole of it parses: no table around it
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


def clean(result, code: int) -> str:
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == code, (result.returncode, err[-800:])
    assert "Traceback" not in err and "internal error" not in err, err[-800:]
    return " ".join(err.split())


def char_device(shared: Path, name: str, minor: int) -> Path:
    """A character device node of our own (mknod as root: 1,3 is null, 1,7 full), else the
    system's own /dev/``name`` if it is one (machine_device); skip otherwise."""
    node = shared / name
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        node.chmod(0o666)
        return node
    except (PermissionError, OSError):
        pass
    return Path(machine_device(f"/dev/{name}"))


# --- stdout -------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", USERS)
def test_svg_into_stdout_a_pipe_holds_the_svg_alone(shared, who):
    before = os.lstat("/dev/stdout")
    result = attn(["matrix", SENTENCE, "--svg", "/dev/stdout"], shared, who)
    clean(result, 0)
    assert_svg(result.stdout)
    assert TABLE not in result.stdout
    after = os.lstat("/dev/stdout")
    assert stat.S_ISLNK(after.st_mode) and (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)


@pytest.mark.parametrize("who", USERS)
def test_svg_into_stdout_a_file_the_shell_opened(shared, who):
    out = shared / "shell.svg"
    with open(out, "wb") as fh:
        os.chmod(out, 0o666)
        result = attn(["matrix", SENTENCE, "--svg", "/dev/stdout"], shared, who, stdout=fh)
    clean(result, 0)
    assert_svg(out.read_bytes())
    assert stat.S_ISLNK(os.lstat("/dev/stdout").st_mode)


@pytest.mark.parametrize("who", USERS)
def test_a_link_to_proc_self_fd_1_is_stdout(shared, who):
    link = shared / "out.svg"
    link.symlink_to("/proc/self/fd/1")
    result = attn(["matrix", SENTENCE, "--svg", str(link)], shared, who)
    clean(result, 0)
    assert_svg(result.stdout)
    assert os.readlink(link) == "/proc/self/fd/1"


@pytest.mark.parametrize("who", USERS)
def test_json_beside_an_export_into_stdout_is_bad_input(shared, who):
    result = attn(["matrix", SENTENCE, "--json", "--svg", "/dev/stdout"], shared, who)
    assert "--json and an export into stdout" in clean(result, 2)
    assert result.stdout == b""


@pytest.mark.parametrize("who", USERS)
def test_stdout_whose_reader_is_gone_is_exit_1(shared, who):
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = attn(["matrix", SENTENCE, "--svg", "/dev/stdout"], shared, who, stdout=write_end)
    finally:
        os.close(write_end)
    assert "reader closed it" in clean(result, 1)


@pytest.mark.parametrize("who", USERS)
def test_a_png_onto_a_terminal_is_refused(shared, who):
    master, slave = pty.openpty()
    try:
        os.chmod(os.ttyname(slave), 0o666)
        result = attn(["matrix", SENTENCE, "--png", "/dev/stdout"], shared, who, stdout=slave)
    finally:
        os.close(slave)
        os.close(master)
    assert "is a terminal: a PNG is binary" in clean(result, 2)


# --- devices and FIFOs ---------------------------------------------------------------------------


@pytest.mark.parametrize("who", USERS)
def test_a_character_device_is_written_into_and_stays_one(shared, who):
    node = char_device(shared, "null", 3)
    before = os.lstat(node)
    result = attn(["matrix", SENTENCE, "--svg", str(node), "--html", str(shared / "v.html")], shared, who)
    clean(result, 0)
    after = os.lstat(node)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert TABLE in result.stdout  # the view still drawn on stdout


@pytest.mark.parametrize("who", USERS)
def test_a_full_device_is_exit_1_and_stays_a_device(shared, who):
    node = char_device(shared, "full", 7)
    before = os.lstat(node)
    result = attn(["matrix", SENTENCE, "--svg", str(node)], shared, who)
    err = clean(result, 1)
    assert f"cannot write --svg '{node}'" in err and os.strerror(errno.ENOSPC) in err
    after = os.lstat(node)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def _reader(fifo: Path, got: list) -> threading.Thread:
    def read():
        with open(fifo, "rb") as fh:  # blocks until attn opens it for writing
            got.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("who", USERS)
def test_a_fifo_with_a_reader_is_written_into(shared, who):
    fifo = shared / "view.fifo"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    got: list = []
    thread = _reader(fifo, got)
    result = attn(["matrix", SENTENCE, "--svg", str(fifo)], shared, who)
    clean(result, 0)
    thread.join(10)
    assert got and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert_svg(got[0])


def _short_wait():
    import attncli.io.export_target as door

    door.FIFO_WAIT = 0.5


@pytest.mark.parametrize("who", USERS)
def test_a_fifo_nobody_reads_ends_after_a_bounded_wait(shared, who):
    fifo = shared / "view.fifo"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    if who == "self":  # its own process: the real wait
        result = attn(["matrix", SENTENCE, "--svg", str(fifo)], shared, who, timeout=60)
    else:
        result = attn(["matrix", SENTENCE, "--svg", str(fifo)], shared, who, before=_short_wait)
    err = clean(result, 1)
    assert "a FIFO that no process read" in err and "waiting up to" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# --- files and links ------------------------------------------------------------------------------


@pytest.mark.parametrize("who", USERS)
def test_a_symlink_keeps_being_a_link_and_its_target_is_replaced_whole(shared, who):
    real = shared / "real.svg"
    real.write_text("old")
    real.chmod(0o666)
    link = shared / "link.svg"
    link.symlink_to("real.svg")
    result = attn(["matrix", SENTENCE, "--svg", str(link)], shared, who)
    clean(result, 0)
    assert os.readlink(link) == "real.svg" and stat.S_ISLNK(os.lstat(link).st_mode)
    assert_svg(real.read_bytes())
    assert sorted(p.name for p in shared.iterdir()) == ["home", "link.svg", "real.svg"]


@pytest.mark.parametrize("who", USERS)
def test_a_regular_file_and_a_new_path_are_written_whole(shared, who):
    old = shared / "old.svg"
    old.write_text("old")
    old.chmod(0o666)
    result = attn(["matrix", SENTENCE, "--svg", str(old), "--html", str(shared / "new.html")], shared, who)
    clean(result, 0)
    assert_svg(old.read_bytes())
    assert (shared / "new.html").read_text().lstrip().startswith("<!DOCTYPE html>")
    assert stat.S_ISREG(os.lstat(old).st_mode)


def test_a_file_a_plain_user_may_not_write_is_refused_up_front(shared):
    as_user("nobody")
    locked = shared / "locked"
    locked.mkdir()
    (locked / "old.svg").write_text("old")
    os.chmod(locked, 0o755)
    for target, message in ((shared / "mine.svg", "is not writable (permission denied)"),
                            (locked / "new.svg", "is not writable (an export is written beside")):
        if target.name == "mine.svg":
            target.write_text("old")
            target.chmod(0o644)
        result = attn(["matrix", SENTENCE, "--svg", str(target)], shared, "nobody")
        assert message in clean(result, 2)
        assert TABLE not in result.stdout
    assert (shared / "mine.svg").read_text() == "old"


# --- refused before any work ---------------------------------------------------------------------


def _block_device(shared: Path) -> Path:
    node = shared / "disk"
    try:
        os.mknod(node, 0o666 | stat.S_IFBLK, os.makedev(7, 0))
    except (PermissionError, OSError):
        pytest.skip("cannot make a block device node here (mknod needs root)")
    return node


def _socket(shared: Path) -> Path:
    path = shared / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    path.chmod(0o777)
    return path


REFUSED = {
    "directory": (lambda shared: shared, "is a directory: give a file name"),
    "block device": (_block_device, "is a block device"),
    "socket": (_socket, "is a socket"),
    "proc": (lambda shared: Path("/proc/version"), "is a file of the kernel's"),
    "through a file": (lambda shared: (shared / "plain.txt", (shared / "plain.txt").write_text("x"))[0] / "x.svg",
                       "plain.txt' is a file, not a folder"),
    "missing folder": (lambda shared: shared / "nowhere" / "x.svg", "nowhere' does not exist"),
}


@pytest.mark.parametrize("who", USERS)
@pytest.mark.parametrize("kind", sorted(REFUSED))
@pytest.mark.parametrize("command", ["matrix", "lens"])
def test_what_an_export_cannot_go_into_is_bad_input_before_any_work(shared, who, kind, command):
    if not sys.platform.startswith("linux") and kind == "proc":
        pytest.skip("/proc is Linux's")
    make, message = REFUSED[kind]
    target = make(shared)
    before = os.lstat(target) if os.path.lexists(target) else None
    result = attn([command, SENTENCE, "--svg", str(target)], shared, who)
    assert message in clean(result, 2)
    assert result.stdout == b""  # nothing computed, nothing drawn
    if before is not None:
        after = os.lstat(target)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)


# --- one door -------------------------------------------------------------------------------------

# atomic writers that are not exports: the corpus cache in the user's data folder, a test-only flag, the
# shards attn stats --out writes into its folder (attn's own data, named by attn, read back on resume and
# by attn stats merge: a file there is replaced by a regular file, as the store replaces its own)
# modules whose atomic writes are not exports: the door itself, the store's and the shards' own
# files, and option_conflicts' --write (a contributor rewriting docs/pretrained.md in the repository); a GGUF's
# tokenizer kept in attn's cache and Gemma 3's joined file under $ATTN_HOME (attn's own files, named by attn)
NOT_EXPORTS = {"io/fileio.py", "io/export_target.py", "vectors/corpus.py", "io/faultpoints.py", "stats/shards.py",
               "rules/option_conflicts.py", "hf/formats/gguf_tokenizer_cache.py", "hf/packaged_models.py"}


def test_every_export_goes_through_the_export_door():
    """No module writes an export but through attncli.io.export_target.write_export: a direct
    atomic_write would replace /dev/stdout, a device or a FIFO with a regular file."""
    import re

    import attncli

    root = Path(attncli.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in NOT_EXPORTS:
            continue
        found += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if re.search(r"\batomic_write(r)?\b", line)]
    assert found == []


def test_explore_refuses_its_own_streams_and_uses_the_same_checks(tmp_path):
    from attncli.errors import BadInput
    from attncli.explore.state import export_path

    (tmp_path / "out.svg").symlink_to("/proc/self/fd/1")
    (tmp_path / "plain").write_text("x")
    for given, message in (("out.svg", "one of the app's own streams"), ("plain/x.svg", "is a file, not a folder"),
                           ("/proc/version.svg", "kernel's")):
        with pytest.raises(BadInput, match=message):
            export_path(given, tmp_path)
