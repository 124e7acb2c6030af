"""Hostile GGUF files: each is exit 1 naming the file, found from the header with every count and
length checked against the bytes left (no 2^40-element array is allocated, no offset trusted)."""

from __future__ import annotations

import struct

import numpy as np
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


def test_arrays_each_within_bounds_but_too_many_together(tmp_path):
    """Two byte arrays of 2^21 + 1 elements (4 MB of file): each under MAX_ARRAY, together over
    MAX_ELEMENTS (each element a Python object once read): damage naming the file, before the second is read."""
    from attncli.hf.formats.gguf_file import MAX_ARRAY, MAX_ELEMENTS

    n = MAX_ELEMENTS // 2 + 1
    assert n < MAX_ARRAY
    array = struct.pack("<IIQ", 9, 0, n) + b"\0" * n  # an array (9) of uint8 (0)
    path = tmp_path / "many.gguf"
    path.write_bytes(header(n_meta=2) + string("a") + array + string("b") + array)
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "many.gguf" in said and "elements together (at" in said, result.output
    path.write_bytes(header(n_meta=1) + string("a") + array)  # one of them alone: read, refused for what it lacks
    said = " ".join(CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)]).output.split())
    assert "elements together" not in said and "many.gguf" in said, said


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


NAN16, INF16, NAN32 = b"\x00\x7e", b"\x00\x7c", np.float32(np.nan).tobytes()
NONFINITE = {  # case -> (arch, qtype, tied, the tensor, its byte spoiled, the bytes, what the refusal says)
    "f32_norm": ("llama", "F32", False, "blk.1.ffn_norm.weight", 8, NAN32, "NaN in tensor 'blk.1.ffn_norm.weight'"),
    "f32_infinity": ("llama", "F32", False, "blk.0.attn_k.weight", 4 * 70, np.float32(-np.inf).tobytes(),
                     "infinity in tensor 'blk.0.attn_k.weight'"),
    "f16_matrix": ("qwen2", "F16", False, "blk.0.ffn_up.weight", 2 * 33, NAN16, "NaN in tensor 'blk.0.ffn_up.weight'"),
    "q8_0_scale": ("llama", "Q8_0", False, "blk.1.attn_v.weight", 34 * 3, NAN16,
                   "NaN in the Q8_0 block scales of tensor 'blk.1.attn_v.weight'"),
    "q4_1_min": ("llama", "Q4_1", False, "blk.0.attn_q.weight", 20 * 5 + 2, INF16,
                 "infinity in the Q4_1 block scales of tensor 'blk.0.attn_q.weight'"),
    "q4_k_dmin": ("llama", "Q4_K", False, "blk.0.ffn_gate.weight", 144 + 2, NAN16,
                  "NaN in the Q4_K block scales of tensor 'blk.0.ffn_gate.weight'"),
    "q6_k_scale": ("llama", "Q6_K", False, "blk.1.ffn_down.weight", 210 * 2 + 208, NAN16,
                   "NaN in the Q6_K block scales of tensor 'blk.1.ffn_down.weight'"),
    # used only late, or only in part: the LM head (a matrix view never computes logits) and the last
    # rows of a tied embedding (tokens the text does not hold)
    "lm_head": ("llama", "Q8_0", False, "output.weight", 34 * 50, NAN16,
                "NaN in the Q8_0 block scales of tensor 'output.weight'"),
    "tied_embedding_row": ("llama", "Q4_0", True, "token_embd.weight", -18, NAN16,
                           "NaN in the Q4_0 block scales of tensor 'token_embd.weight'"),
}


@pytest.mark.parametrize("case", sorted(NONFINITE))
def test_nonfinite_weight_refused_naming_file_and_tensor(tmp_path, case):
    """A NaN or infinity a weight would hold is damage found at load, before any output, naming the
    file and the tensor as the file names it: a float tensor's own values, a quantized tensor's
    block scales (gguf_dequantize.nonfinite; its quants are integers), a tensor read late or in part."""
    needed("gguf")
    from attncli.hf.formats.gguf_file import GGUFFile

    arch, qtype, tied, tensor, at, spoiled, says = NONFINITE[case]
    d = 256 if qtype.endswith("_K") else 64
    path = write_gguf(tmp_path / f"{case}.gguf", arch, qtype, d=d, inner=d, tied=tied)
    info = GGUFFile(path).tensors[tensor]
    start = info.start + (at if at >= 0 else info.nbytes + at)
    data = bytearray(path.read_bytes())
    data[start: start + len(spoiled)] = spoiled
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path), "--layer", "0", "--head", "0"])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and f"damaged model: {case}.gguf: {says}" in said, result.output


# metadata a stranger's file may hold: key -> (value, GGUF value type), and what the refusal names
A = "llama."
BAD_METADATA = {
    "head_count_0": ({A + "attention.head_count": (0, "UINT32")}, "llama.attention.head_count: 0 is outside"),
    "head_count_negative": ({A + "attention.head_count": (-4, "INT32")}, "llama.attention.head_count: -4 is outside"),
    "head_count_nan": ({A + "attention.head_count": (float("nan"), "FLOAT32")}, "nan is not a whole number"),
    "head_count_string": ({A + "attention.head_count": ("4", "STRING")}, "'4' is not a whole number"),
    "head_count_bool": ({A + "attention.head_count": (True, "BOOL")}, "True is not a whole number"),
    "head_count_array": ({A + "attention.head_count": ([4, 4], "ARRAY")}, "[4, 4] is not a whole number"),
    "head_count_missing": ({A + "attention.head_count": None}, "llama.attention.head_count: the key is missing"),
    "head_count_kv_0": ({A + "attention.head_count_kv": (0, "UINT32")}, "head_count_kv: 0 is outside"),
    "head_count_kv_3": ({A + "attention.head_count_kv": (3, "UINT32")}, "3 key-value heads do not divide"),
    "block_count_huge": ({A + "block_count": (10**9, "UINT32")}, "block_count: 1,000,000,000 is outside 1..1,024"),
    "block_count_3": ({A + "block_count": (3, "UINT32")}, "it says 3 blocks but the file's tensors hold blk.0 .. blk.1"),
    "block_count_1": ({A + "block_count": (1, "UINT32")}, "it says 1 blocks but the file's tensors hold blk.0 .. blk.1"),
    "block_count_missing": ({A + "block_count": None}, "llama.block_count: the key is missing"),
    "context_length_0": ({A + "context_length": (0, "UINT32")}, "llama.context_length: 0 is outside"),
    "context_length_huge": ({A + "context_length": (2**40, "UINT64")}, "llama.context_length: 1,099,511,627,776"),
    "embedding_length_0": ({A + "embedding_length": (0, "UINT32")}, "llama.embedding_length: 0 is outside"),
    "embedding_length_huge": ({A + "embedding_length": (2**30, "UINT32")}, "embedding_length: 1,073,741,824 is"),
    "feed_forward_length_0": ({A + "feed_forward_length": (0, "UINT32")}, "llama.feed_forward_length: 0 is outside"),
    "rope_dimension_count_0": ({A + "rope.dimension_count": (0, "UINT32")}, "rope.dimension_count: 0 is outside"),
    "rope_freq_base_nan": ({A + "rope.freq_base": (float("nan"), "FLOAT32")}, "rope.freq_base: nan is not a number"),
    "rope_freq_base_inf": ({A + "rope.freq_base": (float("inf"), "FLOAT32")}, "rope.freq_base: inf is not a number"),
    "rope_freq_base_0": ({A + "rope.freq_base": (0.0, "FLOAT32")}, "rope.freq_base: 0.0 is not a number above 1"),
    "rope_freq_base_string": ({A + "rope.freq_base": ("abc", "STRING")}, "rope.freq_base: 'abc' is not a number"),
    "epsilon_nan": ({A + "attention.layer_norm_rms_epsilon": (float("nan"), "FLOAT32")}, "epsilon: nan is not a small"),
    "epsilon_negative": ({A + "attention.layer_norm_rms_epsilon": (-1.0, "FLOAT32")}, "epsilon: -1.0 is not a small"),
    "vocab_size_0": ({A + "vocab_size": (0, "UINT32")}, "llama.vocab_size: 0 is outside"),
    "vocab_size_nan": ({A + "vocab_size": (float("nan"), "FLOAT32")}, "llama.vocab_size: nan is not a whole number"),
    "bos_token_id_huge": ({"tokenizer.ggml.bos_token_id": (2**32 - 1, "UINT32")}, "bos_token_id: 4294967295 is not a"),
    "bos_token_id_negative": ({"tokenizer.ggml.bos_token_id": (-5, "INT32")}, "bos_token_id: -5 is not a token id"),
    "eos_token_id_nan": ({"tokenizer.ggml.eos_token_id": (float("nan"), "FLOAT32")}, "eos_token_id: nan is not"),
    "tokens_numbers": ({"tokenizer.ggml.tokens": ([1, 2, 3], "ARRAY")}, "tokenizer.ggml.tokens: it is not a list of"),
    "tokens_a_string": ({"tokenizer.ggml.tokens": ("abc", "STRING")}, "tokenizer.ggml.tokens: it is not a list of"),
    "token_types_strings": ({"tokenizer.ggml.token_type": (["a"], "ARRAY")}, "token_type: it is not a list of whole"),
    "token_types_short": ({"tokenizer.ggml.token_type": ([1], "ARRAY")}, "token_type: it has 1 entries for 262 tokens"),
    "scores_nan": ({"tokenizer.ggml.scores": ([float("nan")] * 262, "ARRAY")}, "scores: it is not a list of finite"),
    "merges_numbers": ({"tokenizer.ggml.merges": ([1, 2], "ARRAY")}, "tokenizer.ggml.merges: it is not a list of"),
    "bos_token_id_past_vocab": ({"tokenizer.ggml.bos_token_id": (262, "UINT32")}, "bos_token_id: 262 is past the"),
    "add_bos_token_a_string": ({"tokenizer.ggml.add_bos_token": ("false", "STRING")}, "add_bos_token: 'false' is not"),
    "add_eos_token_a_number": ({"tokenizer.ggml.add_eos_token": (1, "UINT8")}, "add_eos_token: 1 is not true or"),
    "tokenizer_model_a_number": ({"tokenizer.ggml.model": (2, "UINT32")}, "tokenizer.ggml.model: 2 is not a name"),
}


@pytest.mark.parametrize("case", sorted(BAD_METADATA))
def test_bad_metadata_is_damage_naming_file_and_key(tmp_path, case):
    """Each key config_of and tokenizer_of read is checked (gguf_check): exit 1, the file and the
    key named, no internal error and no hang (block_count 10^9 is refused before any layer)."""
    needed("gguf")
    meta, expected = BAD_METADATA[case]
    path = write_gguf(tmp_path / f"{case}.gguf", "llama", meta=meta)
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"damaged model: {case}.gguf: " in said and expected in said, said
    assert "internal error" not in said and "Traceback" not in said


@pytest.mark.parametrize("arch", ["gpt2", "qwen2", "phi3", "mistral"])
def test_block_count_mismatch_in_every_architecture(tmp_path, arch):
    needed("gguf")
    path = write_gguf(tmp_path / "m.gguf", arch, meta={f"{arch}.block_count": (5, "UINT32")})
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{arch}.block_count: it says 5 blocks" in " ".join(result.output.split()), result.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_special_file_named_model_gguf_is_damage_at_once(tmp_path, kind, given):
    """A FIFO (or /dev/zero) named model.gguf, passed itself or as the one .gguf of a folder, is
    refused without being opened for reading (no wait on the FIFO, no endless read)."""
    import os

    from _special_files import machine_device

    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / "model.gguf"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(machine_device("/dev/zero"))
    target = path if given == "file" else tmp_path
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(target)])
    what = "a FIFO" if kind == "fifo" else "a device"
    assert result.exit_code == 1, result.output
    assert f"damaged model: model.gguf: it is {what}, not a regular file" in " ".join(result.output.split())


@pytest.mark.parametrize("number, said", [
    ("9" * 5000, "(5,030 characters)"),  # no block number: an unused tensor, its name cut in the message
    ("99999999", "it says 2 blocks but the file's tensors hold blk.0 .. blk.99999999 (3 numbers)"),
], ids=["5000-digits", "99999999"])
def test_a_tensor_with_an_absurd_block_number(tmp_path, number, said):
    """blk.<5,000 digits>: once an internal error (int() refuses 4,300+ digits); now an unused
    tensor whose name is cut in the one-line message. blk.99999999: a block_count mismatch."""
    needed("gguf")
    import numpy as np

    path = write_gguf(tmp_path / "m.gguf", "llama", extra={f"blk.{number}.attn_norm.weight": np.ones(4)})
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(path)])
    said_out = " ".join(result.output.split())
    assert result.exit_code == 1 and said in said_out and len(result.output) < 2000, result.output[-400:]
    assert "internal error" not in said_out
