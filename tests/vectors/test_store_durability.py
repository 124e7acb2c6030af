"""Durability and atomicity of the model store by fault injection (issue 24; attncli/vectors/
versions.py, store.py): the order of fsync / rename / replace calls is recorded and checked (the
data and its folders fsynced before the commit point, the commit one os.replace, the name never
removed); a reader process hammering the name during many swaps never sees a missing or mixed
model; SIGKILL at each stage of a write (attncli/io/faultpoints.py) leaves the old model or the new
one, never neither."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from _lookup_fixtures import WORDS, save_plain
from _pause import PYTHON, child_env, paused
from attncli.env import paths
from attncli.io.faultpoints import STAGES_OF
from attncli.vectors.model import load_vectors

BIGGER = list(WORDS) + ["extra", "words", "here"]


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def calls(monkeypatch):
    """Every fsync, rename, replace, symlink, unlink and rmdir, in order, as (call, path[, path])."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to name an fsynced descriptor")  # Linux, which CI is
    events: list[tuple[str, ...]] = []
    real = {name: getattr(os, name) for name in ("fsync", "rename", "replace", "symlink", "unlink", "rmdir")}

    def fsync(fd):
        events.append(("fsync", _fd_path(fd)))
        return real["fsync"](fd)

    def two(name):
        def call(src, dst, *args, **kw):
            events.append((name, os.fspath(src), os.fspath(dst)))
            return real[name](src, dst, *args, **kw)
        return call

    def one(name):
        def call(path, *args, **kw):
            events.append((name, os.fspath(path)))
            return real[name](path, *args, **kw)
        return call

    monkeypatch.setattr(os, "fsync", fsync)
    for name in ("rename", "replace", "symlink"):
        monkeypatch.setattr(os, name, two(name))
    for name in ("unlink", "rmdir"):
        monkeypatch.setattr(os, name, one(name))
    return events


def test_a_write_fsyncs_everything_before_one_atomic_replace(calls):
    save_plain("m")
    models = os.path.realpath(paths.models_dir())
    versions = os.path.join(models, ".versions")
    link = os.path.join(models, "m")
    old = os.path.realpath(link)
    calls.clear()
    save_plain("m", seed=1, words=BIGGER)
    new = os.path.realpath(link)
    assert new != old
    renames = [i for i, e in enumerate(calls) if e[0] == "rename" and os.path.realpath(e[2]) == new]
    assert len(renames) == 1, calls
    r = renames[0]
    tmp = os.path.realpath(calls[r][1])
    fsynced_before = {e[1] for e in calls[:r] if e[0] == "fsync"}
    for name in sorted(os.listdir(new)):
        assert os.path.join(tmp, name) in fsynced_before, f"{name} was not fsynced before the rename"
    assert tmp in fsynced_before, "the new version's folder was not fsynced before the rename"
    commits = [i for i, e in enumerate(calls) if e[0] in ("replace", "rename") and e[2] == link]
    assert len(commits) == 1 and calls[commits[0]][0] == "replace", calls  # one os.replace commits
    p = commits[0]
    made = [e for e in calls[r:p] if e[0] == "symlink" and e[2] == calls[p][1]]
    assert made and made[0][1] == os.path.join(".versions", os.path.basename(new))  # relative, inside the store
    assert ("fsync", versions) in calls[r:p], "the rename was not fsynced (.versions) before the commit"
    assert ("fsync", models) in calls[p:], "the commit was not fsynced (models/)"
    assert not [e for e in calls if e[0] in ("unlink", "rmdir") and e[1] == link], "the name was removed"
    assert not os.path.exists(old)  # the old version released after the commit
    assert load_vectors("m").words == BIGGER


_READER = r"""
import json, os, sys
from attncli.vectors.model import load_vectors
stop, ready, sizes, bad, loads = sys.argv[1], sys.argv[3], set(), [], 0
while loads == 0 or (not os.path.exists(stop) and loads < 20000):
    try:
        v = load_vectors("m")
        words, vectors = list(v.words), v.vectors
        if len(words) != vectors.shape[0]:
            bad.append(f"mixed: {len(words)} words, {vectors.shape[0]} vectors")
        sizes.add(len(words))
        if float(vectors[0, 0]) != (1.0 if len(words) == int(sys.argv[2]) else 2.0):
            bad.append(f"mixed: {len(words)} words with the other version's vectors")
    except Exception as exc:  # noqa: BLE001 - every failure is recorded
        bad.append(f"{type(exc).__name__}: {exc}")
    loads += 1
    if loads == 1:
        open(ready, "w").close()  # the writer starts swapping only once this reader is loading
print(json.dumps({"loads": loads, "bad": bad[:5], "n_bad": len(bad), "sizes": sorted(sizes)}))
"""


def _save_marked(words: list[str], mark: float) -> None:
    from attncli.vectors import store

    vectors = np.random.default_rng(len(words)).standard_normal((len(words), 16)).astype(np.float32)
    vectors[0, 0] = mark  # which version the vectors came from
    store.save_vectors("m", list(words), vectors, meta={"algorithm": "test"})


def test_a_reader_hammering_the_name_during_many_swaps_sees_whole_models(tmp_path):
    _save_marked(list(WORDS), 1.0)
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    reader = subprocess.Popen([PYTHON, "-c", _READER, str(stop), str(len(WORDS)), str(ready)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env(paths.home(), "", tmp_path / "none"))
    try:
        # on a loaded machine the reader's start-up (imports) can outlast all 60 swaps: wait for its first load
        deadline = time.monotonic() + 60
        while not ready.exists() and reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the reader never loaded the model"
        for i in range(60):  # 60 swaps between two versions of different sizes
            _save_marked(BIGGER if i % 2 == 0 else list(WORDS), 2.0 if i % 2 == 0 else 1.0)
        stop.touch()
        out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert reader.returncode == 0, err[-2000:]
    report = json.loads(out)
    assert report["n_bad"] == 0, report
    assert report["loads"] > 0 and set(report["sizes"]) <= {len(WORDS), len(BIGGER)}, report


_WRITER = "from _lookup_fixtures import save_plain, WORDS; save_plain('m', seed=1, words=list(WORDS) + ['extra', 'words', 'here'])"


@pytest.mark.parametrize("stage", list(STAGES_OF["vectors/versions.py"]))  # the store's stages: every one
def test_sigkill_at_each_stage_of_a_write_leaves_the_old_model_or_the_new(stage):
    save_plain("m")
    home = paths.home()
    with paused([PYTHON, "-c", _WRITER], home, stage) as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    expected = BIGGER if stage == "link-replaced" else list(WORDS)  # the commit point is the replace
    assert load_vectors("m").words == expected
    save_plain("other")  # a later write sweeps what the killed one left
    versions = paths.models_dir() / ".versions"
    assert not [p for p in versions.iterdir() if p.name.endswith(".partial")]
    assert load_vectors("m").words == expected
