"""The safetensors reader's memory map (issue 22's lens speed): a float32 tensor in a float32 pass
is a read-only view of the file, never a copy; every view's data_offsets are checked against its
shape and the mapped size before NumPy sees them; bfloat16 weights are scanned for NaN and
infinity on their exponent bits; ``fileio.map_regular`` maps regular files only, bounded."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

safetensors_numpy = needed("safetensors.numpy")

from attncli.errors import RuntimeFailure  # noqa: E402
from attncli.io.fileio import FileProblem, map_regular  # noqa: E402
from attncli.hf.formats import weights as weights_mod  # noqa: E402
from attncli.hf.formats.weights import Weights  # noqa: E402

ANCHORS = ("embed.weight",)


def write(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    safetensors_numpy.save_file(tensors, str(path))
    return path


def test_a_float32_tensor_is_a_read_only_view_of_the_file_with_the_files_values(tmp_path):
    rng = np.random.default_rng(0)
    embed = rng.standard_normal((7, 4)).astype(np.float32)
    half = rng.standard_normal((3,)).astype(np.float16)
    w = Weights(write(tmp_path / "m.safetensors", {"embed.weight": embed, "norm.weight": half}), ANCHORS, np.float32)
    got = w.get("embed.weight")
    np.testing.assert_array_equal(got, embed)
    assert not got.flags.owndata and not got.flags.writeable  # the map's bytes, not a copy
    with pytest.raises(ValueError):
        got[0, 0] = 1.0  # nothing writes into a stranger's file through the view
    np.testing.assert_array_equal(w.get("norm.weight"), half.astype(np.float32))  # float16: widened, a copy
    np.testing.assert_array_equal(w.get("embed.weight", np.float64), embed.astype(np.float64))
    np.testing.assert_array_equal(w.rows("embed.weight", np.array([[6, 0, 6]])), embed[[[6, 0, 6]]])
    with pytest.raises(IndexError):
        w.rows("embed.weight", np.array([7]))
    with pytest.raises(IndexError):
        w.rows("embed.weight", np.array([-1]))  # never wraps round to the last row


@pytest.mark.parametrize("offsets", [
    lambda begin, end, size: [begin - 4, end],  # more bytes than the shape holds (inside the file)
    lambda begin, end, size: [begin + 4, end + 4],  # the right length, past the end of the file
    lambda begin, end, size: [end, begin],  # backwards
    lambda begin, end, size: [begin, "end"],  # not a number
    lambda begin, end, size: [begin - 4 * 2**40, end - 4 * 2**40],  # before the data
])
def test_offsets_that_do_not_hold_the_tensor_are_damage_naming_it(tmp_path, monkeypatch, offsets):
    """safe_open checks the file's own header; the view checks the header it is handed too (a file
    swapped between the two reads, or a safetensors that checks less): damage, never a view of
    other bytes or a NumPy error."""
    path = write(tmp_path / "m.safetensors", {"embed.weight": np.ones((2, 3), np.float32),
                                              "zz.weight": np.ones((2,), np.float32)})
    real = weights_mod.read_header

    def shifted(p):
        header, start = real(p)
        begin, end = header["zz.weight"]["data_offsets"]
        header["zz.weight"]["data_offsets"] = offsets(begin, end, os.path.getsize(p))
        return header, start

    monkeypatch.setattr(weights_mod, "read_header", shifted)
    w = Weights(path, ANCHORS, np.float32)
    np.testing.assert_array_equal(w.get("embed.weight"), np.ones((2, 3)))
    with pytest.raises(RuntimeFailure, match=r"damaged model: m\.safetensors: tensor \"zz\.weight\".*data_offsets"):
        w.get("zz.weight")


def bfloat16_file(path: Path, poison: float | None, rows: int = 3) -> Path:
    """A bfloat16 checkpoint (its bits written by hand: NumPy has no bfloat16) with ``poison`` in
    the last entry of norm.weight, or none; embed.weight (rows, 4)."""
    values = np.linspace(-3, 3, rows * 4, dtype=np.float32).reshape(rows, 4)
    norm = np.array([1.5, -2.0, 0.25], np.float32)
    if poison is not None:
        norm[-1] = poison
    bits = {name: (a.view(np.uint32) >> 16).astype("<u2") for name, a in (("embed.weight", values), ("norm.weight", norm))}
    header, data, at = {}, b"", 0
    for name, b in bits.items():
        header[name] = {"dtype": "BF16", "shape": list(b.shape), "data_offsets": [at, at + b.nbytes]}
        data += b.tobytes()
        at += b.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.mark.parametrize("poison, word", [(None, None), (float("nan"), "NaN"), (float("inf"), "infinity"),
                                          (float("-inf"), "infinity"), (3.0e38, None)])
def test_bfloat16_weights_are_scanned_on_their_exponent_bits(tmp_path, poison, word):
    w = Weights(bfloat16_file(tmp_path / "m.safetensors", poison), ANCHORS, np.float32)
    if word is None:
        w.check_finite(["embed.weight", "norm.weight"])  # the largest finite bfloat16s pass
        values = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
        truncated = (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)  # bfloat16's bits, widened
        np.testing.assert_array_equal(w.get("embed.weight"), truncated)
        return
    w.check_finite(["embed.weight"])
    with pytest.raises(RuntimeFailure, match=f"damaged model: {word} in the weight norm.weight"):
        w.check_finite(["embed.weight", "norm.weight"])


def test_map_regular_maps_regular_files_only_and_bounded(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    mapped = map_regular(path, 10)
    assert mapped[2:5] == b"234" and len(mapped) == 10
    with pytest.raises(TypeError):
        mapped[0] = 1  # read-only
    with pytest.raises(FileProblem, match="more than the 9"):
        map_regular(path, 9)
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(FileProblem, match="empty"):
        map_regular(tmp_path / "empty", 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(FileProblem, match="FIFO"):
        map_regular(tmp_path / "fifo", 10)  # never blocks: open_regular opens it O_NONBLOCK and refuses it
    with pytest.raises(FileProblem, match="directory"):
        map_regular(tmp_path, 10)
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(FileProblem, match="symbolic link"):
        map_regular(tmp_path / "link", 10)
    assert map_regular(tmp_path / "link", 10, follow_symlinks=True)[:3] == b"012"


def mapped_kib(path: Path) -> int:
    """Resident KiB of this process's shared mappings of ``path`` (Linux's /proc/self/smaps): attn's
    own map (map_regular's, MAP_SHARED), not the private one safetensors' safe_open keeps."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isalnum() and "-" in line.split(" ", 1)[0] and ":" not in line.split(" ", 1)[0]:
            inside = line.endswith(str(path)) and line.split()[1] == "r--s"
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_a_scanned_or_widened_tensor_leaves_no_pages_of_the_file_resident(tmp_path):
    """The NaN scan and the widening of a bfloat16 tensor read its pages of the map; they are then
    given back, so a widened checkpoint is not held twice (the file's pages and the float32 copy)."""
    path = bfloat16_file(tmp_path / "m.safetensors", None, rows=2**18)  # embed.weight: 2 MiB of bfloat16
    w = Weights(path, ANCHORS, np.float32)
    w.check_finite(["embed.weight", "norm.weight"])
    assert mapped_kib(path) < 64
    embed = w.get("embed.weight")  # (2**18, 4) float32, widened
    assert embed.shape == (2**18, 4) and mapped_kib(path) < 64
    np.asarray(w._view("embed.weight")).sum()  # the control: reading the view does make pages resident
    assert mapped_kib(path) > 1024
