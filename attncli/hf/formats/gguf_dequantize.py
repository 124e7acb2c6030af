"""GGUF's quantized blocks widened to float32, and the check that a tensor's blocks hold no NaN.

A quantized row is a run of blocks (ggml-common.h); each block holds float16 scales and small
integer quants, and a weight is scale x quant (+ min): Q4_0 d, 16 bytes of 4-bit q, w = d (q - 8);
Q4_1 d, m, 16 bytes of q, w = d q + m; Q5_0 d, 4 bytes of fifth bits, 16 bytes of q, w = d (q - 16);
Q8_0 d, 32 int8 q, w = d q. The K-quants (super-blocks of 256: Q4_K, Q5_K, Q6_K) and Q5_1 go
through gguf's own code (gguf.quants), many rows at a time. The four above are written out here as
the same float32 operations in the same order as gguf.quants (so bitwise equal to it:
tests/hf/test_gguf_dequantize.py), with fewer temporaries: three times as fast, the most of a
quantized model's load.

Since the quants are integers, a block's weights are finite exactly when its float16 scales are
(the largest, 65504 x 127 x 32, is far inside float32): ``nonfinite`` reads only the scales, a
twentieth of the file for Q4_1, instead of widening every tensor to look for NaN.
"""

from __future__ import annotations

import numpy as np

from attncli.hf.formats.gguf_file import TYPES

CHUNK_BYTES = 8 * 2**20  # float32 bytes widened at once (the temporaries are a few times that)
# ggml type name -> the byte offsets of each block's float16 scale fields (d, and m or dmin)
SCALES = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2),
          "Q5_K": (0, 2), "Q6_K": (208,)}
HALF_EXPONENT, BF16_EXPONENT, F32_EXPONENT = 0x7C00, 0x7F80, 0x7F800000  # all set: infinity or NaN


def _halves(blocks: np.ndarray, at: int) -> np.ndarray:
    """(n, 1) float32: the float16 field at byte ``at`` of each block (n, block_bytes)."""
    return blocks[:, at: at + 2].copy().view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray, out: np.ndarray) -> None:
    """Weights 0..15 of a block from the low halves of its 16 bytes, 16..31 from the high halves."""
    np.bitwise_and(qs, 15, out=out[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")


def _q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    _nibbles(blocks[:, 2:], out)
    out -= 8
    out *= _halves(blocks, 0)


def _q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    _nibbles(blocks[:, 4:], out)
    out *= _halves(blocks, 0)
    out += _halves(blocks, 2)


def _q5_0(blocks: np.ndarray, out: np.ndarray) -> None:
    _nibbles(blocks[:, 6:], out)
    out += np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little") * np.float32(16)  # weight j's fifth bit: bit j
    out -= 16
    out *= _halves(blocks, 0)


def _q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    out[:] = blocks[:, 2:].view(np.int8)
    out *= _halves(blocks, 0)


OWN = {"Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q8_0": _q8_0}


def dequantize(raw: np.ndarray, kind: int, width: int) -> np.ndarray:
    """(rows, row_bytes) uint8 blocks of ggml type ``kind``, rows of ``width`` weights -> (rows, width) float32."""
    name, per_block, block_bytes = TYPES[kind]
    if name == "F32":
        return raw.view("<f4").astype(np.float32)
    if name == "F16":
        return raw.view("<f2").astype(np.float32)
    if name == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    out = np.empty((raw.shape[0], width), np.float32)  # (rows, width)
    step = max(1, CHUNK_BYTES // (4 * width))
    if name in OWN:
        for s in range(0, raw.shape[0], step):
            part = out[s: s + step].reshape(-1, per_block)  # (blocks, 32), a view of out
            OWN[name](raw[s: s + step].reshape(-1, block_bytes), part)
        return out
    import gguf.quants

    rows_of = getattr(gguf.quants, name).dequantize_rows  # the K-quants, Q5_1: gguf's, vectorized over the rows
    for s in range(0, raw.shape[0], step):
        out[s: s + step] = rows_of(np.ascontiguousarray(raw[s: s + step]))
    return out


def nonfinite(raw: np.ndarray, kind: int) -> str | None:
    """"NaN" or "infinity" when a tensor's bytes (..., row_bytes) uint8 of ggml type ``kind`` widen
    to a weight that is not finite, else None: a float tensor's own exponent bits, a quantized
    one's scale fields only (the module's docstring says why that suffices)."""
    name, _, block_bytes = TYPES[kind]
    if name in ("F32", "F16", "BF16"):
        bits, mask = {"F32": ("<u4", F32_EXPONENT), "F16": ("<u2", HALF_EXPONENT), "BF16": ("<u2", BF16_EXPONENT)}[name]
        fields = [raw.reshape(-1).view(bits)]
    else:
        blocks = raw.reshape(-1, block_bytes)  # (blocks, block_bytes)
        fields, bits, mask = [blocks[:, at: at + 2].copy().view("<u2") for at in SCALES[name]], "<u2", HALF_EXPONENT
    for field in fields:
        bad = (field & mask) == mask  # every exponent bit set: infinity, or NaN when the mantissa is not 0
        if bad.any():
            mantissa = field[bad] & ~np.array(mask | (mask << 1), dtype=bits)  # exponent and sign bits cleared
            return "NaN" if mantissa.any() else "infinity"
    return None
