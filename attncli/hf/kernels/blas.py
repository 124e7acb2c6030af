"""How many BLAS threads a forward pass runs on, chosen by the size of the work, in one place.

A sentence is a few dozen tokens: each product is (T, 384) x (384, 1536) or so, too small for a
second thread to pay, and on a busy machine two threads wait on each other (OpenBLAS's threads
spin). Measured on this project's 2-core machine under load: MiniLM's forward pass on one sentence
pair 1.4 s with OpenBLAS's default two threads, 0.2 s with one. So a pass over at most SMALL_ROWS
rows (batch x tokens) runs on one thread (idle, a second thread would save 0.1 s of twenty
sentences' 0.5 s; busy, lose 0.5 s: docs/benchmarks.md). A larger pass (a long text, a batch of texts) runs on
the cores the machine has free: the cores this process may use, less the load average the rest of
the machine puts on them (rounded down, at least 1), so a busy machine keeps it on one thread. The
rest of the machine's share is the 1-minute load average less this process's own (its CPU seconds
per second, averaged over the same minute; at least 1, the process itself) less a quarter of a
core of noise (LOAD_NOISE). Counted as one runnable thread whatever it runs, this process would
drop to one thread for good in a long run on an idle 2-core machine once its own two threads had
lifted the load average to 2 (2 cores less 2 - 1 others, rounded down: 1).

The user's choice overrides the policy: ``choose(n)`` (the command line's ``--threads N``, held in
runtime.py), else
the usual environment variables (THREAD_VARIABLES, the first one set; a value outside 1 to
limits.MAX_THREADS is refused, attncli/rules/limits.py).

Threads are set through threadpoolctl for the block and restored after: nothing changes for the
rest of the process (nor its environment: the variable threadpoolctl's import sets is removed again
unless the user had set it). Without threadpoolctl (or with a BLAS it does not know) it does nothing.
Results do not change: OpenBLAS splits a product's output between threads, not its sums.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Any, Iterator

from attncli.rules import limits
from attncli.env import runtime

SMALL_ROWS = 128  # up to this many rows (batch x tokens) in a pass, one BLAS thread (bench_threads.py)
THREAD_VARIABLES = limits.THREAD_VARIABLES
KMP_VARIABLE = "KMP_DUPLICATE_LIB_OK"  # threadpoolctl's import sets it (for Intel's OpenMP); undone
LOAD_WINDOW = 60.0  # seconds: the time constant of the 1-minute load average (and of own_load's)
LOAD_NOISE = 0.25  # of the load average left once this process's own is taken out, what counts as nothing
# running (kernel threads, the load's 5-second sampling against own_load's): 2.05 less 1.97 is no process
_controller: Any = False  # False: not made yet; None: threadpoolctl missing


def choose(threads: int | None) -> None:
    """Every pass of this process on ``threads`` BLAS threads (None: the policy again)."""
    runtime.choose_threads(threads)


def user_threads() -> int | None:
    """The thread count the user chose (``choose``, else an environment variable), or None."""
    if runtime.threads is not None:
        return runtime.threads
    return limits.environment_threads()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class OwnLoad:
    """This process's CPU seconds per second of wall clock, averaged as the kernel averages the load
    (exponentially, LOAD_WINDOW seconds): its own threads' share of the load average. Sampled when
    asked; each gap between two samples counts at its mean rate. Starts at 1 (one runnable process)."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.average = time.monotonic(), time.process_time(), 1.0

    def __call__(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        if wall > self.wall:
            keep = math.exp(-(wall - self.wall) / LOAD_WINDOW)
            self.average = keep * self.average + (1.0 - keep) * (cpu - self.cpu) / (wall - self.wall)
            self.wall, self.cpu = wall, cpu
        return max(1.0, self.average)


own_load = OwnLoad()


def free_cores() -> int:
    """The cores the rest of the machine leaves free: ``cores()`` less the 1-minute load average
    without this process's own (``own_load``, at least 1: this process) and LOAD_NOISE, at least 1."""
    try:
        others = max(0.0, os.getloadavg()[0] - own_load() - LOAD_NOISE)
    except (AttributeError, OSError):
        return 1  # no load average: the safe choice on a machine we cannot see
    return max(1, min(cores(), int(cores() - others)))


def threads_for(rows: int) -> int:
    """The BLAS threads for a pass over ``rows`` (batch x tokens): the user's choice, else one for
    a short pass, else the free cores."""
    user = user_threads()
    if user is not None:
        return user
    return 1 if rows <= SMALL_ROWS else free_cores()


def _threadpools() -> Any:
    global _controller
    if _controller is False:
        before = os.environ.get(KMP_VARIABLE)
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _controller = None
        else:
            _controller = ThreadpoolController()
        finally:
            if before is None:  # threadpoolctl sets it on import: a library user's environment stays theirs
                os.environ.pop(KMP_VARIABLE, None)
    return _controller


@contextlib.contextmanager
def limited(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` BLAS threads (where threadpoolctl can set them), then restore."""
    controller = _threadpools()
    if controller is None or not controller.select(user_api="blas").lib_controllers:
        yield
        return
    with controller.limit(limits=threads, user_api="blas"):
        yield


@contextlib.contextmanager
def for_rows(rows: int) -> Iterator[None]:
    """Run a pass over ``rows`` (batch x tokens) with ``threads_for(rows)`` BLAS threads."""
    with limited(threads_for(rows)):
        yield


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one BLAS thread unless the user chose a count (a chunk of attention's
    products are small: two threads wait on each other)."""
    with limited(user_threads() or 1):
        yield
