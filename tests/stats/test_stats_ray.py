"""``attn stats --ray ADDRESS`` on a local Ray cluster of 2 CPUs started by this test: the same
result as one process. The cluster belongs to this test process (``ray.init``) and ends with it;
attn joins it from a child process by its address, as it would join a remote head node."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _stats_helpers import assert_docs_equal, cli, local_ray_cluster, write_corpus
from conftest import needed

needed("tokenizers")
needed("safetensors")
ray = needed("ray")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cluster_address():
    yield from local_ray_cluster()


@pytest.mark.slow  # starts a local ray cluster
def test_a_ray_cluster_gives_the_same_result_as_one_process(cluster_address, tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 20)
    whole = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--precision", "float64", "--json"])
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "attncli", "stats", str(corpus), "--transformer", str(tiny_gpt2_dir), "--precision", "float64", "--ray",
            cluster_address, "--shard-texts", "6", "--out", str(out), "--json"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert doc["shards"] == 4 and doc["computed"] == 4 and doc["ran"] == {"on": "ray", "workers": 2}
    assert_docs_equal(doc, whole)
    assert len(list(out.glob("shard-*.json"))) == 4  # the same shards a local run writes
    assert_docs_equal(cli(["stats", "merge", out, "--json"]), whole)
