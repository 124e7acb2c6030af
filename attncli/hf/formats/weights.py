"""A ``model.safetensors`` (or a sharded checkpoint's ``model.safetensors.index.json`` and the shards
it names) read for the NumPy forward passes: tensors by transformers' names.

The file is a little-endian u64 header length, a JSON header, then the raw tensors. Each shard is
memory-mapped once (``fileio.map_regular``: a regular file) and a floating tensor is a read-only
NumPy view of its bytes, its offsets checked against the header's shape and the map's size: a
float32 tensor in a float32 pass is never copied (pages are read as the pass touches them);
bfloat16, which NumPy lacks, is widened to float32 (float16 converted) when a layer asks. A
half-precision checkpoint whose widened tensors fit the budget (weight_hold: 1 GiB, SmolLM2-135M's
540 MB, or ATTN_WEIGHTS_BUDGET) keeps each one once widened, so a loaded model widens once, not on
every call; a larger one stays mapped in its own dtype and a pass holds one layer in float32 at a
time, never the model.
``safetensors``' ``safe_open`` validates each header too and reads the rare non-float tensor.
Every floating tensor is returned in the compute dtype (a view of the file is read-only).
Checkpoints name their tensors with or without the head model's prefix ("bert.", "roberta.",
"distilbert.", "transformer.", "electra."): the prefix is found from an anchor tensor and then
left out of every name asked for.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import re
import struct
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem, map_regular, open_regular, read_text
from attncli.hf.checks.config_check import MAX_DEPTH, SAFETENSORS_BYTES, SAFETENSORS_HEADER_BYTES, damaged, depth
from attncli.hf.checks.weight_check import check_finite
from attncli.hf.formats.weight_hold import Hold

NUMPY_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
FLOAT_VIEWS = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}  # safetensors' floats are little-endian
RAW_VIEWS = {**FLOAT_VIEWS, "BF16": "<u2"}  # how each floating kind is viewed in the file (bfloat16: its bits)
LAYER = re.compile(r"(?:^|\.)(?:layers?|h|blocks?)\.\d+\.")  # a tensor's layer: "layers.3.", "h.3.", "layer.3."
BF16_EXPONENT = 0x7F80  # all eight set: infinity or NaN


INDEX_SUFFIX = ".safetensors.index.json"  # a sharded checkpoint: model.safetensors.index.json
INDEX_LIMIT = 64 * 2**20  # bytes of an index file read at most


def checkpoint_file(directory: Path) -> Path | None:
    """The model's weights in ``directory``: model.safetensors, else a sharded checkpoint's index."""
    for name in ("model.safetensors", "model" + INDEX_SUFFIX):
        if (directory / name).is_file():
            return directory / name
    return None


def shard_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint: ``path`` itself, or the shards its index names
    (plain file names in the same folder, each once; RuntimeFailure for anything else)."""
    if not path.name.endswith(INDEX_SUFFIX):
        return [path]

    try:
        index = json.loads(read_text(path, INDEX_LIMIT))
    except (FileProblem, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RuntimeFailure(f"cannot read {path}: {exc}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise RuntimeFailure(f"{path} has no weight_map: it is not a sharded checkpoint's index")
    names = sorted(set(weight_map.values()), key=str)
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..") \
                or not name.endswith(".safetensors"):
            raise RuntimeFailure(f"{path} names a shard {name!r}: shards must be .safetensors files beside it")
    return [path.parent / name for name in names]


class Weights:
    """The tensors of one safetensors checkpoint (one file, or the shards an index names), by name
    without the head model's prefix."""

    def __init__(self, path: Path, anchors: Sequence[str], dtype: type = np.float32):
        from safetensors import safe_open

        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self._where: dict[str, Path] = {}  # tensor name -> its shard
        self._handles: dict[Path, object] = {}
        # shard -> (its JSON header, where its data starts): read through the checked door first
        # (a regular file, a bounded header), before safetensors opens it
        self._headers: dict[Path, tuple[dict, int]] = {}
        self._maps: dict[Path, Any] = {}  # shard -> its read-only mmap.mmap
        for shard in shard_files(self.path):
            self._headers[shard] = read_header(shard)
            try:
                self._maps[shard] = map_regular(shard, SAFETENSORS_BYTES, follow_symlinks=True)
            except FileProblem as exc:
                raise damaged(shard.name, str(exc)) from None
            try:
                self._handles[shard] = handle = safe_open(str(shard), framework="numpy")
                names = list(handle.keys())
            except Exception as exc:  # a missing, truncated or foreign file: safetensors raises its own errors
                raise RuntimeFailure(f"cannot read {shard}: {exc}") from None
            for name in names:
                if name in self._where:
                    raise RuntimeFailure(f"tensor '{name}' is in two shards ({self._where[name].name}, {shard.name})")
                self._where[name] = shard
        self._names = set(self._where)
        self._cache: dict[tuple[str, np.dtype], np.ndarray] = {}  # views of the file, 1-D tensors
        # widened tensors: all of a half-precision model that fits the budget (once loaded is once
        # widened), else one layer's
        self._hold = Hold(self.widened_bytes())
        self.prefix = _prefix(list(self._where), anchors, self.path)

    def _file(self, full: str):
        if full not in self._where:
            raise RuntimeFailure(f"{self.path} has no tensor '{full}': the checkpoint does not match its config.json")
        return self._handles[self._where[full]]

    def __contains__(self, name: str) -> bool:
        return self.prefix + name in self._names

    def _info(self, full: str) -> dict:
        """The header entry (dtype, shape, data_offsets) of tensor ``full``."""
        return self._headers[self._where[full]][0][full]

    def base_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of the base model (its name starts with the prefix; a task head's, such as
        cls.* or lm_head.weight, does not) by its name without the prefix, with its shape."""
        n = len(self.prefix)
        return {name[n:]: tuple(self._info(name)["shape"]) for name in self._names if name.startswith(self.prefix)}

    def check_finite(self, names: Sequence[str]) -> None:
        """Every float tensor ``names`` (prefix left out) holds no NaN or infinity, so a damaged
        weight is refused at load, before any output: each is viewed in the file in its own dtype
        (no copy, nothing kept); a bfloat16 one is tested on its exponent bits, and widened only
        to say whether it holds NaN or infinity."""
        for name in names:
            full = self.prefix + name
            if full not in self._names or self._dtype_of(full) not in RAW_VIEWS:
                continue
            tensor = self._view(full)
            try:
                if self._dtype_of(full) == "BF16":
                    if not ((tensor & BF16_EXPONENT) == BF16_EXPONENT).any():
                        continue
                    tensor = _widen(tensor)
                check_finite(tensor, f"the weight {name}")
            finally:
                self._release(full)

    def widened_bytes(self) -> int:
        """Bytes of every half-precision (bfloat16, float16) matrix of the checkpoint widened to the
        compute dtype: what holding the whole model widened costs (from the headers; nothing read)."""
        return sum(math.prod(info["shape"]) * self.dtype.itemsize for header, _ in self._headers.values()
                   for name, info in header.items()
                   if name != "__metadata__" and info.get("dtype") in ("BF16", "F16") and len(info["shape"]) >= 2)

    def hold_widened(self, budget: int | None = None) -> None:
        """From now on keep widened layer tensors across passes, up to ``budget`` bytes in all, the
        rest one layer at a time (_kept): for a corpus's many passes (trace_batch) on a model too
        large to hold whole, where widening every pass again was 16% of attn stats (cProfile)."""
        self._hold.extend(budget)

    def get(self, name: str, dtype: type | None = None) -> np.ndarray:
        """The whole tensor ``name`` (prefix left out) in the compute dtype (or ``dtype``): see _kept."""
        return self._kept(name, self.prefix + name, dtype)

    def has_exact(self, full: str) -> bool:
        return full in self._names

    def get_exact(self, full: str, dtype: type | None = None) -> np.ndarray:
        """A tensor by its full name, prefix included (a head outside the base model, e.g. lm_head.weight)."""
        return self._kept("/" + full, full, dtype)  # "/": no tensor name starts with it

    def _kept(self, key: str, full: str, dtype: type | None) -> np.ndarray:
        """Tensor ``full`` in ``dtype``. A view of the file (float32 in a float32 pass) or a 1-D one
        is kept (it costs no memory of its own, or little); a widened one (bfloat16, float16) is kept
        while the bytes held stay within the hold (weight_hold.Hold: __init__, hold_widened), and past
        it only while its layer runs: asking for another layer's drops it, and a widened table
        outside the layers (a tied head) is widened per use. So a half-precision checkpoint over the hold stays mapped in
        its own dtype and a pass holds one layer in float32, not the model."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        if (key, dtype) in self._cache:
            return self._cache[key, dtype]
        found = LAYER.search(full)
        layer = found.group(0) if found else None
        held = self._hold.find((key, dtype), layer)
        if held is not None:
            return held
        tensor = self._read(full, dtype)[()]
        if tensor.ndim < 2 or _in_file(tensor):
            self._cache[key, dtype] = tensor
            return tensor
        return self._hold.keep((key, dtype), layer, tensor)

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` of a 2-D tensor (an embedding table) without reading the rest of it; an id
        outside the table is an IndexError (a negative one never wraps round)."""
        full = self.prefix + name
        kind = self._dtype_of(full)
        if kind in RAW_VIEWS:  # only the rows asked for, from the memory map (bfloat16: widened)
            table = self._view(full)  # (V, d)
            flat = np.asarray(ids).ravel()
            if flat.size and (flat.min() < 0 or flat.max() >= table.shape[0]):
                raise IndexError(f"row {flat.max()} of {name}, which has {table.shape[0]}")
            picked = _widen(table[flat]) if kind == "BF16" else table[flat]  # (n, d)
            return picked.astype(self.dtype, copy=False).reshape(*np.shape(ids), -1)
        self._check_readable(full, kind)
        sl = self._file(full).get_slice(full)
        unique, inverse = np.unique(np.asarray(ids).ravel(), return_inverse=True)
        if unique.size and (unique[0] < 0 or unique[-1] >= sl.get_shape()[0]):
            raise IndexError(f"row {unique[-1]} of {name}, which has {sl.get_shape()[0]}")
        gathered = np.stack([sl[int(i): int(i) + 1][0] for i in unique]).astype(self.dtype)
        return gathered[inverse].reshape(*np.shape(ids), -1)

    def head_rows(self, tied: bool) -> int:
        """V: the rows of the LM head (the embedding when ``tied``)."""
        return int(self._info(self.prefix + "embed_tokens.weight" if tied else "lm_head.weight")["shape"][0])

    def head_blocks(self, name: str):
        """(start, rows (n, d)) of the LM head by blocks of rows, as a GGUF file's (gguf_reader): here
        one block, the whole tensor (``name``: a base tensor's, or "/" and a full one)."""
        yield 0, self.get_exact(name[1:]) if name.startswith("/") else self.get(name)

    def _dtype_of(self, full: str) -> str:
        return self._file(full).get_slice(full).get_dtype()

    def _check_readable(self, full: str, kind: str) -> None:
        """A tensor neither viewed in the file (RAW_VIEWS) nor of a kind NumPy holds (NUMPY_DTYPES),
        e.g. float8, which safetensors' NumPy reader fails on: BadInput naming it and the way out."""
        if kind not in NUMPY_DTYPES:
            raise BadInput(f"{self.path}: tensor {json.dumps(full)[:60]} is {json.dumps(kind)[:16]}, which attn's "
                           "NumPy pass does not read: use --backend torch")

    def _release(self, full: str) -> None:
        """Let the kernel take back the mapped pages of tensor ``full`` (MADV_DONTNEED: they are the
        file's, clean; a later read of them faults them in again from the page cache), so that a
        tensor scanned or widened is not counted twice in the process's memory."""
        shard = self._where[full]
        header, start = self._headers[shard]
        begin, end = header[full]["data_offsets"]  # checked by _view
        page = mmap.PAGESIZE
        first = (start + begin) // page * page
        if end > begin and hasattr(mmap, "MADV_DONTNEED"):
            self._maps[shard].madvise(mmap.MADV_DONTNEED, first, start + end - first)

    def _view(self, full: str) -> np.ndarray:
        """Floating tensor ``full`` as it lies in its shard (bfloat16 as its uint16 bits): a
        read-only view of the shard's memory map, no copy. Its data_offsets must span exactly its
        shape's bytes, inside the mapped file: anything else is damage that names the tensor."""
        shard = self._where[full]
        header, start = self._headers[shard]  # read_header's: the shape is a list of sizes
        info, mapped = header[full], self._maps[shard]
        kind = info.get("dtype")
        raw = np.dtype(RAW_VIEWS[kind]) if isinstance(kind, str) and kind in RAW_VIEWS else None
        shape = tuple(info["shape"])
        count = math.prod(shape)
        offsets = info.get("data_offsets")
        ok = (raw is not None and isinstance(offsets, list) and len(offsets) == 2
              and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
              and offsets[0] >= 0 and offsets[1] - offsets[0] == count * raw.itemsize
              and start + offsets[1] <= len(mapped))
        if not ok:
            raise damaged(shard.name, f"tensor {json.dumps(full)[:60]} ({json.dumps(kind)[:12]}, shape {shape}) "
                                      f"does not lie inside the file's {len(mapped):,} bytes as its "
                                      f"data_offsets {json.dumps(offsets)[:40]} say")
        if count == 0:
            return np.zeros(shape, dtype=raw)
        tensor = np.frombuffer(mapped, dtype=raw, count=count, offset=start + offsets[0]).reshape(shape)
        return tensor if tensor.flags.aligned else tensor.copy()  # a stranger's offsets need not be aligned

    def _read(self, full: str, dtype: np.dtype | None = None) -> np.ndarray:
        dtype = self.dtype if dtype is None else dtype
        if full not in self._names:
            raise RuntimeFailure(f"{self.path} has no tensor '{full}': the checkpoint does not match its config.json")
        kind = self._dtype_of(full)
        if kind in RAW_VIEWS:
            view = self._view(full)
            if kind == "BF16":
                tensor = _widen(view).astype(dtype, copy=False)
            else:  # float32 in a float32 pass: the view itself, no copy
                tensor = view.astype(dtype, copy=False)
            if tensor is not view:
                self._release(full)  # converted: the file's pages are not needed again
            return tensor
        self._check_readable(full, kind)
        tensor = self._file(full).get_tensor(full)
        return tensor.astype(dtype, copy=False) if tensor.dtype.kind == "f" else tensor


def _in_file(tensor: np.ndarray) -> bool:
    """``tensor`` is a view of a memory-mapped file (its base chain ends in no array of its own)."""
    base = tensor
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return not isinstance(base, np.ndarray)


def _widen(halves: np.ndarray) -> np.ndarray:
    """bfloat16 (as uint16s) -> float32: a bfloat16 is the top half of a float32, so a 16-bit shift
    (in place, one copy in all) makes the float32's bits."""
    bits = halves.astype(np.uint32)
    bits <<= 16
    return bits.view(np.float32)


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (tensor name -> dtype, shape, data_offsets) and where its data
    starts, read through the checked door: a regular file (no FIFO, no device), a header of at
    most SAFETENSORS_HEADER_BYTES inside the file, JSON nested at most MAX_DEPTH deep, every entry
    with a list of sizes as its shape. Anything else is damage that names the file."""
    try:
        fd = open_regular(path, follow_symlinks=True)
    except FileProblem as exc:
        raise damaged(path.name, str(exc)) from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        if len(head) < 8:
            raise damaged(path.name, "it is too short to be a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(SAFETENSORS_HEADER_BYTES, size - 8):
            raise damaged(path.name, f"its header claims {n:,} bytes (the file has {size:,})")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except RecursionError:
        raise damaged(path.name, f"its header nests more than {MAX_DEPTH} deep") from None
    except ValueError as exc:
        raise damaged(path.name, f"its header is not JSON ({exc})") from None
    if not isinstance(header, dict) or depth(header) > MAX_DEPTH:
        raise damaged(path.name, "its header is not a table of tensors")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = info.get("shape") if isinstance(info, dict) else None
        if not (isinstance(shape, list) and len(shape) <= 8
                and all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 2**40 for k in shape)):
            raise damaged(path.name, f"tensor {json.dumps(name)[:60]} has no valid shape")
    return header, 8 + n


def _prefix(names: list[str], anchors: Sequence[str], path: Path) -> str:
    for anchor in anchors:
        found = sorted({n[: -len(anchor)] for n in names if n == anchor or n.endswith("." + anchor)}, key=len)
        if found:
            return found[0]
    raise BadInput(f"{path} holds none of the tensors this architecture needs ({', '.join(anchors)}): "
                   "use --backend torch")


class WeightsAs:
    """The same tensors (one file, one cache) handed out in another dtype: float32 for ``embed``."""

    def __init__(self, weights: Weights, dtype: type):
        self.weights = weights
        self.dtype = np.dtype(dtype)
        self.prefix = weights.prefix

    def __contains__(self, name: str) -> bool:
        return name in self.weights

    def get(self, name: str, dtype: type | None = None) -> np.ndarray:
        return self.weights.get(name, self.dtype if dtype is None else dtype)

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        return self.weights.rows(name, ids).astype(self.dtype)

    def has_exact(self, full: str) -> bool:
        return self.weights.has_exact(full)

    def get_exact(self, full: str, dtype: type | None = None) -> np.ndarray:
        return self.weights.get_exact(full, self.dtype if dtype is None else dtype)

    def head_rows(self, tied: bool) -> int:
        return self.weights.head_rows(tied)

    def head_blocks(self, name: str):
        for start, rows in self.weights.head_blocks(name):
            yield start, rows.astype(self.dtype, copy=False)
