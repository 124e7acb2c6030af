"""One BLAS thread for the small matrix products of a pretrained forward pass (best effort).

A sentence is a few dozen tokens: each product is (T, 384) x (384, 1536) or so, too small for two
threads to pay, and on a busy machine two threads wait on each other. Measured on this project's
2-core machine under load: MiniLM's forward pass on one sentence pair 1.4 s with OpenBLAS's
default two threads, 0.2 s with one; one (13, 384) x (384, 1536) product 20 ms against 2.3 ms.

NumPy's wheels bundle OpenBLAS (``numpy.libs/`` on Linux, ``numpy/.dylibs/`` on macOS) with
prefixed symbols; ``one_thread()`` sets its thread count to 1 for the block and restores it after.
It does nothing when the library or its symbols are not found (another BLAS, a distribution's
NumPy), or when the user has chosen a thread count (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS).
Results do not change: OpenBLAS splits a product's output between threads, not its sums.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from typing import Callable, Iterator

PREFIXES = ("scipy_openblas_", "openblas_")
SUFFIXES = ("64_", "")
_found: tuple[Callable[[], int], Callable[[int], None]] | None | bool = False  # False: not looked yet


def _library_paths() -> list[str]:
    import numpy

    root = os.path.dirname(numpy.__file__)
    patterns = [os.path.join(root, os.pardir, "numpy.libs", "*openblas*"), os.path.join(root, ".dylibs", "*openblas*")]
    return sorted(p for pattern in patterns for p in glob.glob(pattern))


def _openblas() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """(get_num_threads, set_num_threads) of the OpenBLAS NumPy uses, or None."""
    global _found
    if _found is not False:
        return _found  # type: ignore[return-value]
    _found = None
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(path)  # already loaded by NumPy: the same library, not a second copy
        except OSError:
            continue
        for prefix in PREFIXES:
            for suffix in SUFFIXES:
                get = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    put.restype, put.argtypes = None, [ctypes.c_int]
                    _found = (get, put)
                    return _found
    return None


@contextlib.contextmanager
def one_thread(enabled: bool = True) -> Iterator[None]:
    """Run the block with one OpenBLAS thread (when ``enabled`` and possible), then restore."""
    if not enabled or os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        yield
        return
    found = _openblas()
    if found is None:
        yield
        return
    get, put = found
    before = get()
    put(1)
    try:
        yield
    finally:
        put(before)
