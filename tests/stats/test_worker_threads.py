"""A local worker pool of attn stats (stats/runner.py): each worker's passes on the parent's
--threads or one thread (the workers are the parallelism), and the allocator setting only where
the parent, the attn command line, owns it."""

from __future__ import annotations

import multiprocessing
import signal

from attncli.env import runtime
from attncli.stats import runner


class _Context:
    def __init__(self):
        self.pools = []

    def Pool(self, workers, initializer, initargs):  # noqa: N802 - multiprocessing's name
        self.pools.append((workers, initializer, initargs))
        return "pool"


def _pool_args(monkeypatch):
    ctx = _Context()
    monkeypatch.setattr(multiprocessing, "get_context", lambda how: ctx)
    assert runner.local_pool(2, "spec", "settings", "ident") == "pool"
    return ctx.pools[0]


def test_workers_get_the_parents_threads_or_one_and_its_allocator_choice(monkeypatch):
    monkeypatch.setattr(runtime, "threads", None)
    monkeypatch.setattr(runtime, "owns_allocator", False)
    workers, init, args = _pool_args(monkeypatch)
    assert workers == 2 and args[2:] == (1, False)
    monkeypatch.setattr(runtime, "threads", 3)
    monkeypatch.setattr(runtime, "owns_allocator", True)
    _, _, args = _pool_args(monkeypatch)
    assert args[2:] == (3, True)
    # what a fresh worker does with them (its runtime starts at the defaults)
    monkeypatch.setattr(runtime, "threads", None)
    monkeypatch.setattr(runtime, "owns_allocator", False)
    before = signal.getsignal(signal.SIGINT)
    try:
        init(*args)
    finally:
        signal.signal(signal.SIGINT, before)
    assert runtime.threads == 3 and runtime.owns_allocator
    monkeypatch.setattr(runner, "_JOB", None)
