"""Fuzzing exports onto special files (attncli.io.export_target): Hypothesis names, for --svg, --html
or --png, a path that is a new file, a regular file, a folder, a FIFO nobody reads, a character
device (null or full), a socket, a /proc file, a path through a file, or a chain of symbolic links
to one of these (a dangling one, a loop). Whatever it is, ``attn matrix`` ends with exit 0, 1 or
2 within a bounded time, never a traceback or "internal error"; a refusal (2) comes before any
work (nothing on stdout); no node changes kind, no link stops being a link, a regular file is its
old bytes or a whole export, and no temporary file is left behind.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from typer.testing import CliRunner

import attncli.io.export_target as door
from attncli.cli.main import app
from conftest import needed

KINDS = ["new", "regular", "folder", "fifo", "null", "full", "socket", "proc", "through a file", "missing folder"]
OLD = b"<svg>the old picture</svg>"
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _mknod_works() -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.mknod(os.path.join(tmp, "n"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            return True
        except OSError:
            return False


MKNOD = _mknod_works()


def make(folder: Path, kind: str, links: int, dangling: bool, loop: bool) -> Path:
    """A path of ``kind`` in ``folder``, reached through ``links`` symbolic links."""
    target = folder / "target"
    if kind == "regular":
        target.write_bytes(OLD)
    elif kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind in ("null", "full"):
        if not MKNOD:
            return make(folder, "new", links, dangling, loop)  # no device of our own here
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3 if kind == "null" else 7))
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    elif kind == "proc":
        target = Path("/proc/version")
    elif kind == "through a file":
        (folder / "plain").write_bytes(b"x")
        target = folder / "plain" / "x.svg"
    elif kind == "missing folder":
        target = folder / "nowhere" / "x.svg"
    if dangling:
        target = folder / "gone"
    path = target
    for n in range(links):
        link = folder / f"link{n}"
        link.symlink_to(path)
        path = link
    if loop:
        (folder / "loop-a").symlink_to(folder / "loop-b")
        (folder / "loop-b").symlink_to(folder / "loop-a")
        path = folder / "loop-a"
    return path


def snapshot(folder: Path) -> dict[str, tuple]:
    seen = {}
    for entry in folder.iterdir():
        st_ = os.lstat(entry)
        link = os.readlink(entry) if stat.S_ISLNK(st_.st_mode) else None
        seen[entry.name] = (stat.S_IFMT(st_.st_mode), link, None if not stat.S_ISCHR(st_.st_mode) else st_.st_rdev)
    return seen


@FUZZ
@given(kind=st.sampled_from(KINDS), option=st.sampled_from(["--svg", "--html", "--png"]),
       links=st.integers(0, 2), dangling=st.booleans(), loop=st.booleans())
def test_an_export_onto_anything_ends_cleanly_and_changes_no_kind(attn_home, kind, option, links, dangling, loop):
    export_onto(["matrix", "time flies"], kind, option, links, dangling, loop)


CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog sat on the mat and the cat"
MODEL_COMMANDS = {  # the newest views of a checkpoint ({model}: a tiny GPT-2)
    "attribute": ["attribute", CLEAN, CORRUPT, "--target", " the", "--transformer", "{model}"],
    "circuit": ["circuit", CLEAN, CORRUPT, "--target", " the", "--transformer", "{model}"],
    "qk": ["qk", CLEAN, "--transformer", "{model}"],
    "alti": ["matrix", CLEAN, "--show", "alti", "--transformer", "{model}"],
    "globenc": ["matrix", CLEAN, "--show", "globenc", "--transformer", "{model}"],
    "value-zeroing": ["matrix", CLEAN, "--show", "value-zeroing", "--transformer", "{model}"],
}


@pytest.mark.parametrize("command", sorted(MODEL_COMMANDS))
@settings(FUZZ, max_examples=6)
@given(kind=st.sampled_from(KINDS), option=st.sampled_from(["--svg", "--html", "--png"]), links=st.integers(0, 2),
       dangling=st.booleans(), loop=st.booleans())
@example(kind="fifo", option="--html", links=1, dangling=False, loop=False)
@example(kind="regular", option="--png", links=0, dangling=False, loop=False)
@example(kind="folder", option="--svg", links=2, dangling=True, loop=False)
def test_the_model_views_export_onto_anything_alike(attn_home, tiny_gpt2_dir, command, kind, option, links,
                                                    dangling, loop):
    """attn attribute, circuit, qk and the contribution views (--show alti, globenc, value-zeroing)
    write their exports through the same door as attn matrix, with the same guarantees (each
    command onto a FIFO nobody reads, a regular file and a dangling link, and 6 drawn cases)."""
    args = [str(tiny_gpt2_dir) if a == "{model}" else a for a in MODEL_COMMANDS[command]]
    export_onto(args, kind, option, links, dangling, loop)


def export_onto(args: list[str], kind: str, option: str, links: int, dangling: bool, loop: bool) -> None:
    """Run ``attn ARGS OPTION PATH`` onto a path of ``kind`` (make) and check the module's promises."""
    if option == "--png":
        needed("PIL")
    folder = Path(tempfile.mkdtemp(prefix="attn-export-fuzz-"))
    old_wait = door.FIFO_WAIT
    door.FIFO_WAIT = 0.1
    try:
        path = make(folder, kind, links, dangling and links > 0, loop)
        before = snapshot(folder)
        import attncli.cli.common as cli_app

        cli_app._consoles.clear()
        result = CliRunner().invoke(app, [*args, option, str(path)])  # (a hang: the test's timeout)
        err = result.stderr
        assert result.exit_code in (0, 1, 2), (result.exit_code, err[-600:], repr(result.exception))
        assert "Traceback" not in err and "internal error" not in err, err[-600:]
        if result.exit_code == 2:
            assert result.stdout == "", "a refusal came after the work"
        after = snapshot(folder)
        for name, (mode, link, rdev) in before.items():
            assert name in after, f"{name} was removed"
            assert after[name] == (mode, link, rdev), f"{name} changed: {before[name]} -> {after[name]}"
        assert not [n for n in after if n.endswith(".tmp")], after
        if kind == "regular" and not (dangling and links) and not loop:
            data = (folder / "target").read_bytes()
            assert data == OLD or (result.exit_code == 0 and len(data) > 1000), data[:80]
    finally:
        door.FIFO_WAIT = old_wait
        shutil.rmtree(folder, ignore_errors=True)
