"""Large arrays straight from the kernel and back to it (glibc's malloc only; best effort).

glibc's malloc maps a block of at least its threshold (128 KiB at first) on its own and unmaps it
when freed, but each time such a block is freed it raises the threshold to that block's size (up
to 32 MiB). After the first (T, d) array of a long text is freed, every array up to that size
comes from the heap, whose freed holes stay resident and split as arrays of other sizes come and
go (a layer's chunks of scores, the rows a trace keeps). Measured on a SmolLM2-135M-shaped model
at 8,192 tokens, 30 layers: the process peaked 28 MiB higher that way than with every array of
2 MiB or more mapped on its own (``mallopt(M_MMAP_THRESHOLD)``, which also stops the raising).

``map_large_arrays()`` sets that threshold once per process (a long pass calls it), and only in a
process whose owner asked for it (``runtime.own_allocator()``): the ``attn`` command line does, for its own
process; importing attncli or running a pass from Python (a notebook) leaves the allocator as it
was. Small
allocations are untouched; a large one costs fresh zeroed pages, a few milliseconds per layer of
an 8,192-token pass. It does nothing where there is no glibc (macOS, musl) or when the user has
set MALLOC_MMAP_THRESHOLD_ (then theirs stands).
"""

from __future__ import annotations

import ctypes
import os
import sys

from attncli.env import runtime

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
THRESHOLD = 2 * 2**20  # bytes: an array this large or larger is mapped on its own
_done = False


def map_large_arrays() -> bool:
    """Make glibc map arrays of THRESHOLD bytes or more on their own (once, in a process that
    owns its allocator: runtime.py); whether it did."""
    global _done
    if _done:
        return True
    if not runtime.owns_allocator or not sys.platform.startswith("linux") or os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    try:
        mallopt = _mallopt()
    except (OSError, AttributeError):
        return False
    # the raising also set the heap's trim threshold to twice the block (up to 64 MiB free kept at its top)
    _done = mallopt(M_MMAP_THRESHOLD, THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, THRESHOLD) == 1
    return _done


def _mallopt():
    """glibc's mallopt, from the process's own symbols (its C library's)."""
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.restype, mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    return mallopt
