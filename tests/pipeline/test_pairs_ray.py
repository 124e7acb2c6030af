"""``attn patch --pairs FILE --ray ADDRESS`` on a local Ray cluster of 2 CPUs started by this test
(as tests/stats/test_stats_ray.py does for attn stats): the same mean as one process, to 1e-12."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from _stats_helpers import cli, local_ray_cluster
from conftest import needed

ray = needed("ray")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAIRS = [("the president of the united", "the president of the new", "states", "york"),
         ("the cat sat on the", "the dog sat on the", "table", "floor"),
         ("the man went to the", "the woman went to the", "church", "house")]


@pytest.fixture(scope="module")
def cluster_address():
    yield from local_ray_cluster()


def test_a_ray_cluster_gives_the_same_mean_as_one_process(cluster_address, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(dict(zip(("clean", "corrupt", "target", "contrast"), p))) + "\n" for p in PAIRS),
                    encoding="utf-8")
    whole = cli(["patch", "--pairs", path, "--site", "head", "--json"])
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "attncli", "patch", "--pairs", str(path), "--site", "head", "--ray", cluster_address,
            "--shard-pairs", "1", "--out", str(out), "--json"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert doc["shards"] == 3 and doc["computed"] == 3 and doc["ran"] == {"on": "ray", "workers": 2}
    for name in ("grid", "clean", "corrupt"):
        assert np.abs(np.asarray(doc["mean"][name]) - np.asarray(whole["mean"][name])).max() <= 1e-12
    assert len(list(out.glob("shard-*.json"))) == 3
