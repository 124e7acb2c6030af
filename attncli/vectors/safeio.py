"""Reading a stored model's files without trusting them: regular files only, sizes and ``.npy``
headers checked before any data is read.

A model file may be anything a hostile or careless hand put there: a FIFO (opening it would
block), a device or a symlink to ``/dev/zero`` (reading it never ends), an ``.npy`` or an
``.npz`` entry whose header declares a huge shape (allocating it exhausts memory). Every reader
of the store goes through :func:`open_regular`, :func:`read_text`, :func:`load_npy` and
:func:`load_npz`; each failure is a :class:`FileProblem` whose message says what is wrong with
the file, which the caller turns into "model ... is damaged (FILE: problem)". The checked
open and read are :mod:`attncli.io.fileio`'s, the door every reader in attn goes through.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from attncli.io.fileio import FileProblem, open_regular, read_text  # noqa: F401 - the store's readers import them from here

if TYPE_CHECKING:
    import numpy as np

MAX_HEADER = 10_000  # bytes of an .npy header (numpy's own default limit)


def _read_header(fh) -> tuple[tuple[int, ...], bool, "np.dtype"]:
    """(shape, fortran_order, dtype) of the .npy at ``fh``'s position; FileProblem if garbled."""
    from numpy.lib import format as npformat

    try:
        version = npformat.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(fh, max_header_size=MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = npformat.read_array_header_2_0(fh, max_header_size=MAX_HEADER)
        else:
            raise FileProblem(f"it is an .npy file of format {version}, which attn does not write")
    except FileProblem:
        raise
    except Exception as exc:  # noqa: BLE001 - empty, garbled or truncated header: whatever numpy fails with
        raise FileProblem(f"it is not a NumPy array file ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject or dtype.name not in ("float16", "float32", "int64"):
        raise FileProblem(f"it holds {dtype}, not float16 or float32")
    return tuple(int(n) for n in shape), bool(fortran), dtype


def load_npy(path: Path) -> np.ndarray:
    """The array of an .npy file, memory-mapped, after its header's shape was checked against
    the file's size (a header declaring more data than the file holds is refused before any
    mapping or allocation)."""
    import numpy as np

    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        shape, fortran, dtype = _read_header(fh)
        offset = fh.tell()
        nbytes = math.prod(shape) * dtype.itemsize
        if offset + nbytes != size:
            raise FileProblem(f"its header declares an array of shape {shape} ({nbytes:,} bytes of data), "
                              f"but the file holds {max(size - offset, 0):,}")
        if nbytes == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(fh, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def load_npz(path: Path, expected: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Float32 arrays ``expected`` (name -> shape) from an .npz archive; each entry's header is
    checked against its expected shape and the entry's declared size before its data is read."""
    import zipfile

    import numpy as np

    fd = open_regular(path)
    out: dict[str, np.ndarray] = {}
    with os.fdopen(fd, "rb") as raw:
        try:
            zf = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise FileProblem(f"it is not an .npz archive ({exc})") from None
        with zf:
            for name, want in expected.items():
                try:
                    info = zf.getinfo(name + ".npy")
                except KeyError:
                    raise FileProblem(f"it has no array {name!r}") from None
                try:
                    with zf.open(info) as fh:
                        shape, fortran, dtype = _read_header(fh)
                        if shape != tuple(want):
                            raise FileProblem(f"{name} has shape {shape}, expected {tuple(want)}")
                        nbytes = math.prod(shape) * dtype.itemsize
                        if info.file_size != fh.tell() + nbytes:
                            raise FileProblem(f"the entry of {name} holds {info.file_size:,} bytes, its header "
                                              f"declares {nbytes:,} bytes of data")
                        data = fh.read(nbytes)
                except FileProblem:
                    raise
                except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
                    raise FileProblem(f"its entry {name} cannot be read ({type(exc).__name__}: {exc})") from None
                if len(data) != nbytes:
                    raise FileProblem(f"its entry {name} is truncated")
                array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
                out[name] = array.astype(np.float32)
    return out
