"""A GGUF file (llama.cpp's format) parsed with bounds: its metadata and where each tensor lies.

The layout (little-endian): b"GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count;
then each metadata entry (a string key, a u32 value type, the value), each tensor's info (a string
name, u32 n_dims, n_dims u64 sizes innermost first, u32 ggml type, u64 offset from the data
start); then padding to ``general.alignment`` (32 unless given) and the tensor data. A string is
a u64 length and its UTF-8 bytes; an array a u32 element type, a u64 count and the elements.

A stranger's file may claim anything, so nothing here trusts a count: every length is checked
against the bytes left before it is read, counts and sizes have ceilings, a tensor's bytes must
match its type and shape, lie inside the file, be aligned and not overlap another's. Any breach is
``damaged`` naming the file (exit 1), found in time and memory bounded by the file's header.
gguf's own GGUFReader is not used for the header: it reads every array into memory as it parses.
The file is mapped once through ``fileio.map_regular`` (a regular file: never a FIFO or device).
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attncli.io.fileio import FileProblem, map_regular
from attncli.hf.checks.config_check import damaged

MAGIC = b"GGUF"
VERSIONS = (2, 3)
GGUF_BYTES = 2**42  # a mapped file at most (4 TiB; the mapping costs address space, not memory)
MAX_TENSORS = 65_536
MAX_METADATA = 65_536
MAX_STRING = 16 * 2**20  # one string's bytes (a chat template is the longest)
MAX_ARRAY = 2**24  # elements of one array (a vocabulary of 128k tokens and its merges fit)
MAX_ELEMENTS = 2**22  # elements of every array together (each one a Python object once read: about 200 MB at
# most; Llama 3's 128,256 tokens with their scores, types and 280,147 merges are about 0.7 million)
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32
CONVERT_HINT = ("where transformers reads it, convert it to a folder attn runs: python -c \"import sys, transformers as t; "
                "t.AutoModelForCausalLM.from_pretrained(sys.argv[1], gguf_file=sys.argv[2]).save_pretrained(sys.argv[3])\" "
                "DIR FILE.gguf OUT_DIR")
SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
           12: "<f8"}  # value type -> its NumPy dtype (7: bool, one byte)
STRING, ARRAY, BOOL = 8, 9, 7
# ggml type -> (name, elements per block, bytes per block): the types attn dequantizes
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 8: ("Q8_0", 32, 34), 2: ("Q4_0", 32, 18),
         3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 12: ("Q4_K", 256, 144),
         13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210)}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # NumPy's order: outermost first (GGUF's sizes reversed), e.g. (out, in)
    kind: int  # the ggml type, a key of TYPES
    start: int  # absolute offset of its first byte in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return TYPES[self.kind][0]


class _Cursor:
    """Reads from the mapped header, every read bounded by the file's size."""

    def __init__(self, data: Any, name: str):
        self.data, self.pos, self.name, self.size = data, 0, name, len(data)
        self.elements = 0  # array elements read so far (MAX_ELEMENTS)

    def fail(self, why: str) -> Exception:
        return damaged(self.name, why)

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"it ends inside {what} (it is truncated or a length is wrong)")
        out = self.data[self.pos: self.pos + n]
        self.pos += n
        return bytes(out)

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]

    def string(self, what: str) -> str:
        n = self.u64(what)
        if n > MAX_STRING or n > self.size - self.pos:
            raise self.fail(f"{what} claims a string of {n:,} bytes (the file has {self.size - self.pos:,} left)")
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def value(self, kind: int, what: str, nested: bool = False) -> Any:
        if kind in SCALARS:
            dtype = np.dtype(SCALARS[kind])
            v = np.frombuffer(self.take(dtype.itemsize, what), dtype=dtype)[0]
            return bool(v) if kind == BOOL else v.item()
        if kind == STRING:
            return self.string(what)
        if kind == ARRAY and not nested:
            inner, count = self.u32(what), self.u64(what)
            least = np.dtype(SCALARS[inner]).itemsize if inner in SCALARS else 8 if inner == STRING else 0
            if least == 0:
                raise self.fail(f"{what} is an array of value type {inner}, which GGUF does not define here")
            if count > MAX_ARRAY or count * least > self.size - self.pos:
                raise self.fail(f"{what} claims an array of {count:,} elements (the file has {self.size - self.pos:,} "
                                "bytes left)")
            self.elements += count
            if self.elements > MAX_ELEMENTS:
                raise self.fail(f"its metadata arrays hold over {MAX_ELEMENTS:,} elements together (at {what}): no "
                                "model's vocabulary needs as many")
            if inner == STRING:
                return [self.string(what) for _ in range(count)]
            dtype = np.dtype(SCALARS[inner])
            values = np.frombuffer(self.take(count * dtype.itemsize, what), dtype=dtype)  # (count,)
            return [bool(v) for v in values] if inner == BOOL else values.tolist()
        raise self.fail(f"{what} has value type {kind}, which GGUF does not define")


class GGUFFile:
    """The metadata (key -> value) and tensors (name -> TensorInfo) of one GGUF file, mapped."""

    def __init__(self, path: Path):
        self.path = Path(path)
        name = self.path.name
        try:
            self.map = map_regular(self.path, GGUF_BYTES, follow_symlinks=True)
        except FileProblem as exc:
            raise damaged(name, str(exc)) from None
        cur = _Cursor(self.map, name)
        if cur.take(4, "its magic number") != MAGIC:
            raise cur.fail("it does not start with GGUF's magic number: it is not a GGUF file")
        self.version = cur.u32("its version")
        if self.version not in VERSIONS:
            raise cur.fail(f"it is GGUF version {self.version}; attn reads versions {' and '.join(map(str, VERSIONS))}")
        n_tensors, n_meta = cur.u64("its tensor count"), cur.u64("its metadata count")
        if n_tensors > MAX_TENSORS or n_meta > MAX_METADATA:
            raise cur.fail(f"it claims {n_tensors:,} tensors and {n_meta:,} metadata entries (at most "
                           f"{MAX_TENSORS:,} of each)")
        self.metadata: dict[str, Any] = {}
        for i in range(n_meta):
            key = cur.string(f"metadata key {i}")
            if key in self.metadata:
                raise cur.fail(f"metadata key {key[:80]!r} appears twice")
            self.metadata[key] = cur.value(cur.u32(f"metadata {key[:80]!r}"), f"metadata {key[:80]!r}")
        infos = [self._tensor_info(cur, i) for i in range(n_tensors)]
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 < alignment <= 2**16 \
                or alignment & (alignment - 1):
            raise cur.fail(f"its general.alignment {str(alignment)[:20]} is not a power of two up to 65536")
        data_start = -(-cur.pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for t_name, shape, kind, offset in infos:
            self.tensors[t_name] = self._place(cur, t_name, shape, kind, offset, data_start, alignment)
        spans = sorted((t.start, t.start + t.nbytes, t.name) for t in self.tensors.values())
        for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
            if begin < end:
                raise cur.fail(f"tensors {a[:60]!r} and {b[:60]!r} overlap")

    def _tensor_info(self, cur: _Cursor, i: int) -> tuple[str, tuple[int, ...], int, int]:
        name = cur.string(f"tensor {i}'s name")
        label = f"tensor {name[:60]!r}"
        n_dims = cur.u32(f"{label}'s dimension count")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"{label} has {n_dims} dimensions (1 to {MAX_DIMS})")
        dims = [cur.u64(f"{label}'s sizes") for _ in range(n_dims)]
        kind, offset = cur.u32(f"{label}'s type"), cur.u64(f"{label}'s offset")
        if any(d == 0 or d >= 2**40 for d in dims) or math.prod(dims) >= 2**50:
            raise cur.fail(f"{label} has sizes {dims}, which overflow or are empty")
        return name, tuple(reversed(dims)), kind, offset

    def _place(self, cur: _Cursor, name: str, shape: tuple[int, ...], kind: int, offset: int, data_start: int,
               alignment: int) -> TensorInfo:
        label = f"tensor {name[:60]!r}"
        if kind not in TYPES:
            raise cur.fail(f"{label} has ggml type {kind}, which attn does not read (it reads "
                           f"{', '.join(t[0] for t in TYPES.values())}): {CONVERT_HINT}")
        type_name, block, block_bytes = TYPES[kind]
        if shape[-1] % block:
            raise cur.fail(f"{label} is {type_name} with rows of {shape[-1]}, not a whole number of {block}-blocks")
        nbytes = math.prod(shape) // block * block_bytes
        start = data_start + offset
        if offset % alignment or start + nbytes > cur.size:
            raise cur.fail(f"{label} ({type_name}, shape {shape}, {nbytes:,} bytes at offset {offset:,}) does not lie "
                           f"aligned inside the file's {cur.size:,} bytes")
        return TensorInfo(name, shape, kind, start, nbytes)

    def raw(self, info: TensorInfo, rows: slice | None = None) -> np.ndarray:
        """The bytes of ``info`` as (..., row_bytes) uint8 (``rows``: a slice of its first axis), a view."""
        row_bytes = info.shape[-1] // TYPES[info.kind][1] * TYPES[info.kind][2]
        data = np.frombuffer(self.map, dtype=np.uint8, count=info.nbytes, offset=info.start)
        data = data.reshape(*info.shape[:-1], row_bytes)  # (..., row_bytes)
        return data if rows is None else data[rows]

    def release(self, info: TensorInfo) -> None:
        """Let the kernel take back the mapped pages of ``info`` once it is dequantized (MADV_DONTNEED:
        clean file pages, read again from the page cache if needed), so the file is not counted twice."""
        page = mmap.PAGESIZE
        first = info.start // page * page
        if info.nbytes and hasattr(mmap, "MADV_DONTNEED"):
            self.map.madvise(mmap.MADV_DONTNEED, first, info.start + info.nbytes - first)
