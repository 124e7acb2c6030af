"""The BLAS thread policy (attncli/hf/kernels/blas.py): one thread for a short pass, the free cores for a
large one, the user's --threads / environment variables over both, set through threadpoolctl
for the pass and restored after; read inside the pass with threadpoolctl's own report."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

from attncli.errors import BadInput
from attncli.hf.kernels import blas

threadpoolctl = needed("threadpoolctl")


@pytest.fixture
def no_user_choice(monkeypatch):
    for name in blas.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(blas.runtime, "threads", None)


def blas_threads() -> set[int]:
    """The thread counts threadpoolctl reports for the BLAS libraries this process loaded."""
    return {info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"}


def test_policy_is_one_thread_for_short_work_and_the_free_cores_for_large(no_user_choice, monkeypatch):
    monkeypatch.setattr(blas, "cores", lambda: 4)
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # this process only
    assert blas.threads_for(blas.SMALL_ROWS) == 1
    assert blas.threads_for(blas.SMALL_ROWS + 1) == 4
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (3.5, 1.0, 1.0))  # 2.5 cores busy elsewhere
    assert blas.threads_for(10_000) == 1
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (9.0, 9.0, 9.0))  # a busy machine: one thread
    assert blas.threads_for(10_000) == 1


def test_this_process_s_own_threads_are_not_counted_as_the_rest_of_the_machine(no_user_choice, monkeypatch):
    """The load average less this process's own CPU use (averaged over the same minute): a run
    that has kept two threads busy on an idle 2-core machine (load 2) keeps two; the same load with
    this process using one core is another process's, and leaves one."""
    clock = {"wall": 100.0, "cpu": 5.0}
    monkeypatch.setattr(blas.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(blas.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(blas, "own_load", blas.OwnLoad())
    monkeypatch.setattr(blas, "cores", lambda: 2)
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    assert blas.own_load() == 1.0 and blas.threads_for(10_000) == 1  # nothing known yet: this process is 1
    clock["wall"] += 60.0
    clock["cpu"] += 120.0  # a minute on two cores
    assert blas.own_load() == pytest.approx(1.0 + (2.0 - 1.0) * (1.0 - np.exp(-1.0)), rel=1e-12)
    clock["wall"] += 600.0
    clock["cpu"] += 1200.0  # ten more: the average is this process's two threads
    assert blas.own_load() == pytest.approx(2.0 - np.exp(-1.0) * np.exp(-10.0), rel=1e-12)  # e^-10 of the gap left
    assert blas.threads_for(10_000) == 2
    clock["wall"] += 600.0
    clock["cpu"] += 600.0  # ten minutes on one core: the load's other 1 is another process's
    assert blas.threads_for(10_000) == 1
    clock["wall"] += 600.0  # idle ten minutes: at least 1, the process itself
    assert blas.own_load() == 1.0


def test_the_users_choice_overrides_the_policy(no_user_choice, monkeypatch):
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert blas.threads_for(10) == 3 and blas.threads_for(10_000) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the first of THREAD_VARIABLES set
    assert blas.threads_for(10) == 2
    blas.choose(5)  # --threads
    assert blas.threads_for(10) == 5
    blas.choose(None)
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")  # refused, as --threads would refuse it (attncli/rules/limits.py)
    with pytest.raises(BadInput, match="OMP_NUM_THREADS"):
        blas.threads_for(10)
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # empty: not given
    assert blas.threads_for(10) == 3
    for bad in (0, 1025, 10**20):
        with pytest.raises(BadInput, match="--threads"):
            blas.choose(bad)


def test_a_short_pass_runs_on_one_thread_and_a_large_one_on_more_then_restored(no_user_choice, monkeypatch,
                                                                                tiny_bert_dir):
    from attncli.hf import load

    model = load(str(tiny_bert_dir), backend="numpy")
    if not blas_threads():
        pytest.skip("threadpoolctl finds no BLAS under this NumPy")
    monkeypatch.setattr(blas, "free_cores", lambda: 2)  # the machine allows two, whatever its load now
    enc = model.encode("time flies like an arrow", "fruit flies like a banana")
    with threadpoolctl.threadpool_limits(3, user_api="blas"):  # what the process had before
        seen: list[set[int]] = []
        short = model.trace_batch([enc], "blocks.*.attn.pattern", on_layer=lambda l, L: seen.append(blas_threads()))
        assert seen and all(s == {1} for s in seen)
        assert blas_threads() == {3}  # restored
        seen.clear()
        monkeypatch.setattr(blas, "SMALL_ROWS", 4)  # the same pass counted as large work
        large = model.trace_batch([enc], "blocks.*.attn.pattern", on_layer=lambda l, L: seen.append(blas_threads()))
        assert seen and all(s == {2} for s in seen)
        assert blas_threads() == {3}
    # the thread count changes no result
    np.testing.assert_array_equal(short[0].stack("attn.pattern", model.layers), large[0].stack("attn.pattern", model.layers))


def test_the_users_threads_hold_inside_a_short_pass(no_user_choice, monkeypatch, tiny_bert_dir):
    from attncli.hf import load

    model = load(str(tiny_bert_dir), backend="numpy")
    if not blas_threads():
        pytest.skip("threadpoolctl finds no BLAS under this NumPy")
    blas.choose(2)
    seen: list[set[int]] = []
    model.trace_batch([model.encode("time flies")], "blocks.*.attn.pattern",
                      on_layer=lambda l, L: seen.append(blas_threads()))
    assert seen and all(s == {2} for s in seen)
