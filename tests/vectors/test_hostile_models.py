"""Hostile model files are damage, not hangs (issue 15, class 4).

A model file that is a FIFO, a device or a symlink to /dev/zero; an .npy or an .npz entry whose
header declares a huge shape; a config or meta field of the wrong type or an absurd size; NaN
rows in a table too big for the load-time scan: each is "error: ... damaged ..." (exit 1),
quickly and with bounded memory. The memory-hungry cases run attn in a child process under a
1 GiB address-space limit and a time limit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from _attention_fixtures import make_random_attention
from _lookup_fixtures import save_fasttext_like, save_plain
from _special_files import machine_device
from attncli.env import paths
from attncli.cli.main import app
from attncli.vectors import model as vmodel

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
MEMORY = 1 << 30


def version(name: str) -> Path:
    return (paths.models_dir() / name).resolve()


def assert_damaged(result_code: int, stderr: str, model: str) -> None:
    err = " ".join(stderr.split())
    assert result_code == 1, stderr
    assert err.startswith("error: ") and "damaged" in err and f"'{model}'" in err, err
    assert "internal error" not in err and "Traceback" not in stderr


def attn_bounded(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """attn in a child process with at most 1 GiB of address space."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "attncli", *argv], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, env=env)


def replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def replace_with_link(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


def replace_with_zero_device(path: Path) -> None:
    import stat

    path.unlink()
    try:
        os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # what /dev/zero is
    except PermissionError:
        pytest.skip("creating a device node needs privileges")


SPECIALS = {"fifo": replace_with_fifo, "dev_zero_link": lambda p: replace_with_link(p, machine_device("/dev/zero")),
            "device": replace_with_zero_device, "directory": lambda p: (p.unlink(), p.mkdir())}


@pytest.mark.timeout(60)  # a blocking open of a FIFO or an endless read: fail, not hang
@pytest.mark.parametrize("kind", SPECIALS)
@pytest.mark.parametrize("file", ["meta.json", "vocab.txt", "vectors.npy", "ngrams.npy"])
def test_special_vector_files_are_damage_at_once(kind, file):
    save_fasttext_like("tiny")
    SPECIALS[kind](version("tiny") / file)
    result = runner.invoke(app, ["similar", "car", "--model", "tiny"])  # a hang fails by the timeout marker
    assert_damaged(result.exit_code, result.stderr, "tiny")


@pytest.mark.timeout(60)  # a blocking open of a FIFO or an endless read: fail, not hang
@pytest.mark.parametrize("kind", ["fifo", "dev_zero_link", "directory"])
@pytest.mark.parametrize("file", ["config.json", "weights.npz", "output_vocab.txt"])
def test_special_attention_files_are_damage_at_once(kind, file):
    make_random_attention("rand", layers=1, heads=2)
    SPECIALS[kind](version("rand") / "attention" / file)
    argv = ["heads", "--model", "rand"] if file != "output_vocab.txt" else ["matrix", "the cat", "--proj", "trained", "--head", "0", "--model", "rand"]
    result = runner.invoke(app, argv)  # a hang fails by the timeout marker
    if file == "output_vocab.txt":  # not read by these views: must not be needed
        assert result.exit_code == 0, result.output
    else:
        assert_damaged(result.exit_code, result.stderr, "rand")


def write_npy_header(path: Path, shape: tuple[int, ...], dtype: str = "<f4", data: bytes = b"\0" * 64) -> None:
    from numpy.lib import format as npformat

    with open(path, "wb") as fh:
        npformat.write_array_header_1_0(fh, {"descr": dtype, "fortran_order": False, "shape": shape})
        fh.write(data)


def test_an_npy_declaring_a_huge_shape_is_refused_before_reading():
    save_plain("huge")
    meta_path = version("huge") / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta.update(vocab_size=2**31, dim=65_536)  # in range for meta, and what the header declares
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    write_npy_header(version("huge") / "vectors.npy", (2**31, 65_536))
    proc = attn_bounded("similar", "car", "--model", "huge")
    assert_damaged(proc.returncode, proc.stderr, "huge")
    assert "declares" in proc.stderr


def test_an_npz_entry_declaring_a_huge_shape_is_refused_before_reading():
    make_random_attention("rand", layers=1, heads=2)
    path = version("rand") / "attention" / "weights.npz"
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    import io

    from numpy.lib import format as npformat

    bomb = io.BytesIO()
    npformat.write_array_header_1_0(bomb, {"descr": "<f4", "fortran_order": False, "shape": (1 << 20, 1 << 20)})
    bomb.write(b"\0" * (1 << 20))  # compresses to almost nothing
    entries["head.weight.npy"] = bomb.getvalue()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for n, data in entries.items():
            zf.writestr(n, data)
    proc = attn_bounded("heads", "--model", "rand")
    assert_damaged(proc.returncode, proc.stderr, "rand")
    assert "head.weight" in proc.stderr


@pytest.mark.parametrize("field, value", [
    ("layers", 10**12), ("layers", "2"), ("heads", 2**40), ("d_model", 10**9), ("d_ff", 10**15),
    ("output_vocab_size", 10**15), ("layer_norm_eps", [1]), ("d_model", None),
])
def test_absurd_config_fields_are_damage_quickly(field, value):
    make_random_attention("rand", layers=1, heads=2)
    path = version("rand") / "attention" / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config[field] = value
    path.write_text(json.dumps(config), encoding="utf-8")
    proc = attn_bounded("heads", "--model", "rand", timeout=30)
    assert_damaged(proc.returncode, proc.stderr, "rand")
    assert field in proc.stderr


@pytest.mark.parametrize("fields", [{"dim": 10**12}, {"vocab_size": 10**15}, {"subword": {"min_n": 3, "max_n": 10**9, "bucket": 10}},
                                    {"subword": {"min_n": 3, "max_n": 6, "bucket": 10**13}}])
def test_absurd_meta_fields_are_damage_quickly(fields):
    save_fasttext_like("tiny")
    path = version("tiny") / "meta.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    meta.update(fields)
    path.write_text(json.dumps(meta), encoding="utf-8")
    proc = attn_bounded("similar", "car", "--model", "tiny", timeout=30)
    assert_damaged(proc.returncode, proc.stderr, "tiny")


def test_a_huge_meta_json_is_refused_by_its_size():
    save_plain("big")
    path = version("big") / "meta.json"
    with open(path, "a", encoding="utf-8") as fh:
        fh.truncate(64 * 2**20)  # sparse: 64 MB of NUL after the JSON
    proc = attn_bounded("similar", "car", "--model", "big", timeout=30)
    assert_damaged(proc.returncode, proc.stderr, "big")


@pytest.mark.parametrize("argv", [["similar", "speed"], ["similar", "carz"], ["lookup", "colour"],
                                  ["matrix", "the speed is top"]])
def test_nan_rows_beyond_the_scan_limit_are_damage_when_used(monkeypatch, argv):
    save_fasttext_like("tiny")
    d = version("tiny")
    vocab = (d / "vocab.txt").read_text(encoding="utf-8").split()
    vectors = np.load(d / "vectors.npy")
    ngrams = np.load(d / "ngrams.npy")
    vectors[vocab.index("speed")] = np.nan
    ngrams[:] = np.nan
    np.save(d / "vectors.npy", vectors)
    np.save(d / "ngrams.npy", ngrams)
    monkeypatch.setattr(vmodel, "FINITE_CHECK_BYTES", 0)  # as if the tables were too big to scan at load
    result = runner.invoke(app, [*argv, "--model", "tiny"])
    assert_damaged(result.exit_code, result.stderr, "tiny")
    assert "NaN" in result.stderr


@pytest.mark.timeout(60)  # a blocking open of a FIFO or an endless read: fail, not hang
@pytest.mark.parametrize("kind", ["fifo", "dev_zero_link"])
def test_a_special_file_as_the_corpus_cache_is_ignored_not_read(tmp_path, kind):
    from attncli.vectors import corpus

    cache = tmp_path / "brown-all-tok1.txt"
    cache.write_text("the cat\n", encoding="utf-8")
    SPECIALS[kind](cache)
    assert corpus._read_cache(cache) is None  # a hang fails by the timeout marker
