"""gguf_dequantize: its own dequantizers (Q4_0, Q4_1, Q5_0, Q8_0) bitwise equal to gguf's
(gguf.quants, what transformers' GGUF loader runs) on random blocks, across its chunks; every
type through ``dequantize`` equal to gguf's; ``nonfinite`` on each float kind's exponent bits."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

from attncli.hf.formats import gguf_dequantize
from attncli.hf.formats.gguf_dequantize import OWN, SCALES, dequantize, nonfinite
from attncli.hf.formats.gguf_file import TYPES

KIND = {name: kind for kind, (name, _, _) in TYPES.items()}


def random_blocks(name: str, rows: int, width: int, seed: int = 0) -> np.ndarray:
    """(rows, row_bytes) uint8: random quants, each float16 scale field a finite value of any size
    (negative, subnormal, up to 65504)."""
    _, per, size = TYPES[KIND[name]]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (rows * width // per, size), dtype=np.uint8)  # (blocks, size)
    for at in SCALES[name]:
        special = rng.choice([6e-8, -65504.0, 65504.0, 0.0, -1e-3], len(blocks))
        scales = np.where(rng.random(len(blocks)) < 0.5, rng.uniform(-2, 2, len(blocks)), special).astype("<f2")
        blocks[:, at: at + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("name", sorted(SCALES))
def test_dequantize_equals_gguf_bitwise(name, monkeypatch):
    needed("gguf")
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize_

    width = 512 if name.endswith("_K") else 96
    raw = random_blocks(name, 37, width)
    want = gguf_dequantize_(raw, GGMLQuantizationType(KIND[name]))  # (37, width)
    whole = dequantize(raw, KIND[name], width)  # one chunk
    np.testing.assert_array_equal(whole.view(np.uint32), want.view(np.uint32))
    monkeypatch.setattr(gguf_dequantize, "CHUNK_BYTES", 4 * width * 5)  # five rows a chunk: 8 chunks, the last short
    chunked = dequantize(raw, KIND[name], width)  # (whole kept: its memory is not the new array's)
    np.testing.assert_array_equal(chunked.view(np.uint32), want.view(np.uint32))


def test_own_dequantizers_are_the_ones_named():
    assert set(OWN) == {"Q4_0", "Q4_1", "Q5_0", "Q8_0"}


@pytest.mark.parametrize("kind,bits,nan,inf", [("F32", "<f4", np.float32(np.nan), np.float32(np.inf)),
                                               ("F16", "<f2", np.float16(np.nan), np.float16(-np.inf)),
                                               ("BF16", "<u2", 0x7FC1, 0xFF80)])
def test_nonfinite_reads_a_float_tensors_exponent_bits(kind, bits, nan, inf):
    values = np.array([1.0, -2.5, 0.0, 3e-5] * 8).astype(np.float32)  # (32,)
    raw = (values.view(np.uint32) >> 16).astype("<u2") if kind == "BF16" else values.astype(bits)
    assert nonfinite(raw.view(np.uint8).reshape(4, -1), KIND[kind]) is None
    for spoiled, says in ((nan, "NaN"), (inf, "infinity")):
        bad = raw.copy()
        bad[13] = spoiled
        assert nonfinite(bad.view(np.uint8).reshape(4, -1), KIND[kind]) == says


@pytest.mark.parametrize("name", sorted(SCALES))
def test_nonfinite_reads_each_scale_field_and_nothing_else(name):
    """Every scale field of any block is read; a quant byte with a NaN's bit pattern is only a quant."""
    raw = random_blocks(name, 4, 512 if name.endswith("_K") else 64)
    size = TYPES[KIND[name]][2]
    blocks = raw.reshape(-1, size)
    scales = {b for at in SCALES[name] for b in (at, at + 1)}
    quants = [b for b in range(size) if b not in scales]
    blocks[:, quants[0]], blocks[:, quants[1]] = 0x00, 0x7E  # a float16 NaN's bytes, in the quants
    assert nonfinite(raw, KIND[name]) is None
    for at in SCALES[name]:
        bad = raw.copy()
        bad.reshape(-1, size)[-1, at: at + 2] = np.array([np.nan], "<f2").view(np.uint8)
        assert nonfinite(bad, KIND[name]) == "NaN"
