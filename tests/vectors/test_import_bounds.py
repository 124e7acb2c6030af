"""``attn import`` reads in bounded memory whatever the file holds (issue 20).

A text vectors file is read in blocks of ``word2vec_format.CHUNK`` bytes cut at their last newline; a line
longer than ``textio.MAX_LINE_BYTES`` (1 MiB) is refused with exit 2 naming the line. Before, one
100 MB line cost 1.8 GB (``readlines`` kept it whole, then split and copied it). The hostile
files run in a child process under a 512 MiB address-space limit, where the old reader ran out
of memory (exit 1) and the new one refuses the line (exit 2); a legitimate import runs under the
same limit. The file must also be a regular file: a FIFO or a device is refused unread.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from _special_files import machine_device
from attncli.cli.main import app
from attncli.io.textio import MAX_LINE_BYTES
from attncli.vectors import imports, word2vec_format

REPO = Path(__file__).resolve().parents[2]
MEMORY = 512 << 20
runner = CliRunner()


def attn_limited(*argv: str, home: Path) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    env = dict(os.environ, ATTN_HOME=str(home), PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "attncli", *argv], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit, env=env, cwd=str(REPO))


def one_huge_line(path: Path, header: bytes = b"") -> Path:
    """A 100 MB line: a word and 25 million numbers, then a newline."""
    with open(path, "wb") as fh:
        fh.write(header + b"w")
        block = b" 0.5" * 250_000
        for _ in range(100):
            fh.write(block)
        fh.write(b"\n")
    return path


def no_newline(path: Path) -> Path:
    """100 MiB without a newline: a word, 8,192 numbers, then a sparse run of zero bytes."""
    with open(path, "wb") as fh:
        fh.write(b"w" + b" 0.5" * 8192)
        fh.truncate(100 << 20)
    return path


@pytest.mark.parametrize("make, fmt, line", [
    (one_huge_line, "glove", 1),
    (lambda p: one_huge_line(p, b"2 3\ncat 1 2 3\n"), "word2vec", 3),
    (no_newline, "glove", 1),
    (lambda p: _write(p, ["cat 1 2", "dog 3 4", "w" + " 0.5" * (MAX_LINE_BYTES // 4 + 1), "eel 5 6"]), "glove", 3),
], ids=["100MB-line", "100MB-line-after-header", "no-newline", "a-line-within-one-block"])
def test_a_huge_line_is_refused_in_bounded_memory(tmp_path, attn_home, make, fmt, line):
    path = make(tmp_path / "vectors.txt")
    proc = attn_limited("import", str(path), "--name", "big", "--format", fmt, home=attn_home)
    path.unlink()
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2, err
    assert f"line {line} is longer than {MAX_LINE_BYTES // 2**20} MiB" in err, err
    assert "Traceback" not in proc.stderr
    assert not (attn_home / "models" / "big").exists()


def test_a_good_import_runs_under_the_same_limit(tmp_path, attn_home):
    path = tmp_path / "ok.txt"
    path.write_text("cat 0.1 0.2 0.3\ndog 0.4 0.5 0.6\n", encoding="utf-8")
    proc = attn_limited("import", str(path), "--name", "ok", "--format", "glove", home=attn_home)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.timeout(60)  # a FIFO opened for reading waits for ever: fail instead
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "dev-zero-link"])
def test_devices_and_fifos_are_refused_unread(tmp_path, kind):
    if kind == "dev-zero":
        path = Path(machine_device("/dev/zero"))
    elif kind == "fifo":
        path = tmp_path / "vectors.txt"
        os.mkfifo(path)  # opening it for reading would wait for a writer for ever
    else:
        path = tmp_path / "vectors.txt"
        path.symlink_to(machine_device("/dev/zero"))
    result = runner.invoke(app, ["import", str(path), "--name", "z", "--format", "glove"])
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.stderr, result.stderr


def test_the_longest_legitimate_lines_still_import(tmp_path):
    """10,000 dimensions (the most attn takes) of 90-character numbers: lines of about 900 KB."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((2, word2vec_format.MAX_DIM))
    lines = [w + "".join(" " + f"{v:.80e}" for v in row) for w, row in zip(("cat", "dog"), values)]
    assert max(len(line) for line in lines) < MAX_LINE_BYTES < 2 * min(len(line) for line in lines)
    path = tmp_path / "wide.txt"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    data = imports.import_file(path, "glove")
    assert data.words == ["cat", "dog"]
    np.testing.assert_array_equal(data.vectors, values.astype(np.float32))  # 80 digits hold the float64 exactly: one rounding


def test_lines_are_numbered_across_block_boundaries(tmp_path, monkeypatch):
    """With a block of 7 bytes every line crosses a block boundary: the words, the vectors and the
    line named by an error are still those of the file."""
    monkeypatch.setattr(word2vec_format, "CHUNK", 7)
    path = tmp_path / "v.txt"
    rows = [f"w{i} {i}.5 -{i}.25" for i in range(12)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = imports.import_file(path, "glove")
    assert data.words == [f"w{i}" for i in range(12)]
    np.testing.assert_array_equal(data.vectors, [[i + 0.5, -i - 0.25] for i in range(12)])
    path.write_text("\n".join(rows[:8] + ["w8 1.0 oops"] + rows[9:]), encoding="utf-8")  # no final newline
    with pytest.raises(Exception, match=r"line 9: 'oops' is not a number"):
        imports.import_file(path, "glove")
    data = imports.import_file(_write(tmp_path / "v2.txt", rows), "glove", limit=5)  # --limit, no final newline
    assert data.words == [f"w{i}" for i in range(5)]


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows), encoding="utf-8")
    return path
