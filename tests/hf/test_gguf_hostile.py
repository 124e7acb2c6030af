"""Hostile GGUF files: each is exit 1 naming the file, found from the header with every count and
length checked against the bytes left (no 2^40-element array is allocated, no offset trusted)."""

from __future__ import annotations

import struct

import pytest
from typer.testing import CliRunner

from _gguf_fixtures import write_gguf
from conftest import needed

from attncli.cli.main import app


def header(n_tensors: int = 0, n_meta: int = 0, magic: bytes = b"GGUF", version: int = 3) -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_meta)


def string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def tensor_info(name: str, dims: list[int], kind: int, offset: int) -> bytes:
    return string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", kind, offset)


def arch_llama() -> bytes:
    return string("general.architecture") + struct.pack("<I", 8) + string("llama")


HOSTILE = {
    "wrong_magic": header(magic=b"GGML"),
    "wrong_version": header(version=99),
    "truncated": header()[:10],
    "absurd_tensor_count": header(n_tensors=2**60),
    "absurd_metadata_count": header(n_meta=2**40),
    "huge_string": header(n_meta=1) + struct.pack("<Q", 2**40) + b"key",
    "huge_array": header(n_meta=1) + string("a") + struct.pack("<IIQ", 9, 4, 2**40) + b"\0" * 64,
    "huge_string_array": header(n_meta=1) + string("a") + struct.pack("<IIQ", 9, 8, 2**40) + b"\0" * 64,
    "offset_past_end": header(1, 1) + arch_llama() + tensor_info("token_embd.weight", [4, 4], 0, 2**30) + b"\0" * 96,
    "overlapping": header(2, 1) + arch_llama() + tensor_info("a.weight", [16], 0, 0)
    + tensor_info("b.weight", [8], 0, 32) + b"\0" * 128,  # a's 64 bytes run into b's at 32
    "overflowing_dims": header(1, 1) + arch_llama() + tensor_info("a.weight", [2**40, 2**40], 0, 0) + b"\0" * 64,
    "unknown_type": header(1, 1) + arch_llama() + tensor_info("a.weight", [32], 99, 0) + b"\0" * 256,
    "type_size_mismatch": header(1, 1) + arch_llama() + tensor_info("a.weight", [33], 8, 0) + b"\0" * 256,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_gguf_exit_1_names_file(tmp_path, case):
    path = tmp_path / f"{case}.gguf"
    path.write_bytes(HOSTILE[case])
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{case}.gguf" in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_cut_off_real_file(tmp_path):
    """A real model's file cut in its tensor data: damage (a tensor past the end), exit 1."""
    needed("gguf")
    whole = write_gguf(tmp_path / "whole.gguf", "llama", "Q8_0").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[: len(whole) - 1000])
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(tmp_path / "cut.gguf")])
    assert result.exit_code == 1 and "cut.gguf" in result.output, result.output


def test_other_architecture_refused_by_name(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(header(0, 1) + string("general.architecture") + struct.pack("<I", 8) + string("mamba"))
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    assert result.exit_code == 2 and "mamba" in result.output, result.output


def test_nan_weight_refused(tmp_path):
    """A NaN in a weight is damage found at load (the NaN scan dequantizes each tensor by blocks)."""
    needed("gguf")
    import numpy as np

    from attncli.hf.gguf_file import GGUFFile

    path = write_gguf(tmp_path / "nan.gguf", "llama", "F32")
    info = GGUFFile(path).tensors["blk.1.ffn_norm.weight"]
    data = bytearray(path.read_bytes())
    data[info.start + 8: info.start + 12] = np.float32(np.nan).tobytes()
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    assert result.exit_code == 1 and "NaN in the weight layers.1.post_attention_layernorm" in result.output, result.output
