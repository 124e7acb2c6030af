"""What the process running attn chose for itself, read by the forward passes (nothing heavy imported).

The ``attn`` command line sets these for its own process: ``threads`` from ``--threads N`` (the
BLAS threads of every pass, hf/kernels/blas.py) and ``owns_allocator`` (a long pass may tune glibc's
allocator, hf/kernels/heap.py). A library user's process keeps the defaults: importing attncli or running
a pass from Python changes nothing process-wide.
"""

from __future__ import annotations

from attncli.rules import limits

threads: int | None = None  # --threads N: every pass on N BLAS threads (None: blas.py's policy)
owns_allocator = False  # the process is attn's command line: heap.py may set glibc's thresholds


def choose_threads(n: int | None) -> None:
    """Every pass of this process on ``n`` BLAS threads (None: the policy by the size of the work)."""
    global threads
    threads = None if n is None else limits.whole_number("--threads", n, 1, limits.MAX_THREADS)


def own_allocator() -> None:
    """Let a long pass of this process set glibc's malloc thresholds (the command line calls this)."""
    global owns_allocator
    owns_allocator = True
