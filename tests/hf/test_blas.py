"""Finding OpenBLAS to set its thread count (attncli/hf/blas.py): where NumPy's wheels put
it, each build's symbol names (a fake library), a failed search remembered, and this NumPy's own."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from attncli.hf import blas


# --- blas.py ------------------------------------------------------------------------------------


def test_library_paths_look_where_numpys_wheels_put_openblas(tmp_path, monkeypatch):
    """numpy.libs/ beside the package on Linux, numpy/.dylibs/ on macOS (blas.py's docstring), any
    file with openblas in its name, sorted."""
    numpy_dir = tmp_path / "site-packages" / "numpy"
    (numpy_dir / ".dylibs").mkdir(parents=True)
    (tmp_path / "site-packages" / "numpy.libs").mkdir()
    for name in ("numpy.libs/libscipy_openblas64_-ab.so", "numpy.libs/libgfortran.so", "numpy/.dylibs/libopenblas.dylib",
                 "numpy/libopenblas-not-here.so"):
        (tmp_path / "site-packages" / name).write_bytes(b"")
    monkeypatch.setattr(np, "__file__", str(numpy_dir / "__init__.py"))
    got = [os.path.relpath(os.path.normpath(p), tmp_path / "site-packages") for p in blas._library_paths()]
    assert got == ["numpy.libs/libscipy_openblas64_-ab.so", "numpy/.dylibs/libopenblas.dylib"]


class FakeOpenBLAS:
    """A library handle exposing only the thread functions of one build (symbols ``prefix + name + suffix``)."""

    def __init__(self, symbols: list[str]):
        self.threads = 2
        for symbol in symbols:
            fn = (lambda: self.threads) if "get" in symbol else (lambda n: setattr(self, "threads", n))
            setattr(self, symbol, _Function(fn))


class _Function:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)


@pytest.mark.parametrize("prefix, suffix", [("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"),
                                            ("openblas_", "")])
def test_openblas_is_found_under_each_builds_symbol_names(monkeypatch, prefix, suffix):
    """The wheels' scipy-openblas (64-bit ints or not) prefixes its symbols; a plain OpenBLAS
    build has openblas_set_num_threads; one_thread sets 1 and restores what was set before."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    lib = FakeOpenBLAS([f"{prefix}get_num_threads{suffix}", f"{prefix}set_num_threads{suffix}"])
    loaded = []
    monkeypatch.setattr(blas, "_found", False)  # not looked yet, in this test's process
    monkeypatch.setattr(blas, "_library_paths", lambda: ["/nowhere/libbroken.so", "/somewhere/libopenblas.so"])

    def cdll(path):
        loaded.append(path)
        if "broken" in path:
            raise OSError("cannot open")
        return lib

    monkeypatch.setattr(blas.ctypes, "CDLL", cdll)
    get, put = blas._openblas()
    assert loaded == ["/nowhere/libbroken.so", "/somewhere/libopenblas.so"]
    assert get() == 2
    with blas.one_thread():
        assert lib.threads == 1
    assert lib.threads == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's choice stands
    with blas.one_thread():
        assert lib.threads == 2


def test_no_openblas_found_is_remembered_and_one_thread_does_nothing(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(blas, "_found", False)
    looked = []
    monkeypatch.setattr(blas, "_library_paths", lambda: looked.append(1) or ["/x/libopenblas.so"])
    monkeypatch.setattr(blas.ctypes, "CDLL", lambda path: FakeOpenBLAS(["openblas_get_num_threads"]))  # no setter
    assert blas._openblas() is None
    assert blas._openblas() is None and looked == [1]  # looked once
    with blas.one_thread():
        pass


def test_this_numpys_own_openblas_is_found_afresh(monkeypatch):
    """On a NumPy wheel with its bundled OpenBLAS (the library this process mapped), a fresh look
    finds it and one_thread really sets one thread (the cached result of an earlier look is not
    what is tested)."""
    maps = Path("/proc/self/maps")
    mapped = {line.split()[-1] for line in maps.read_text().splitlines() if "openblas" in line} if maps.exists() else set()
    if not mapped:
        pytest.skip("no OpenBLAS mapped by this NumPy (another BLAS, or not Linux)")
    assert {os.path.realpath(p) for p in blas._library_paths()} & {os.path.realpath(p) for p in mapped}
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(blas, "_found", False)
    get, put = blas._openblas()
    before = get()
    with blas.one_thread():
        assert get() == 1
    assert get() == before
