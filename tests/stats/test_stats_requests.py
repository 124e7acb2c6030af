"""attn stats and attn stats merge as one request, one compute, one result: the command line and
Python build the same request (attncli.stats.stats_request) and get the same document; --json with
an export into stdout is refused (exit 2, stdout untouched), as attn matrix refuses it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from conftest import needed

from _stats_helpers import cli, write_corpus
from attncli.errors import BadInput
from attncli.stats.stats_request import MergeRequest, StatsRequest

needed("safetensors")
needed("tokenizers")


@pytest.fixture(scope="module")
def shards(tiny_gpt2_dir, tmp_path_factory):
    """A corpus and the --out folder of one run over it (2 shards)."""
    where = tmp_path_factory.mktemp("stats_requests")
    corpus = write_corpus(where / "corpus.txt", 12)
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", where / "out", "--shard-texts", "6", "--json"])
    return corpus, where / "out"


@pytest.mark.parametrize("fmt", ["--svg", "--png"])
@pytest.mark.parametrize("merge", [False, True])
def test_json_and_an_export_into_stdout_are_refused(tiny_gpt2_dir, shards, merge, fmt):
    if fmt == "--png":
        needed("PIL")
    corpus, out = shards
    args = ["merge", str(out)] if merge else [str(corpus), "--transformer", str(tiny_gpt2_dir)]
    r = subprocess.run([sys.executable, "-m", "attncli", "stats", *args, "--json", fmt, "/proc/self/fd/1"],
                       capture_output=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stdout == b""
    assert b"--json and an export into stdout" in r.stderr


def test_the_python_api_and_the_command_line_make_one_result(tiny_gpt2_dir, shards):
    from attncli.pipeline import compute_merge, compute_stats
    from attncli.views.stats_view import StatsResult

    corpus, out = shards
    request = StatsRequest(str(corpus), transformer=str(tiny_gpt2_dir), top_k=3, seed=7)
    result = compute_stats(request)
    assert isinstance(result, StatsResult) and result.request is request
    words = shlex.split(result.command_line())
    assert words[:3] == ["attn", "stats", "run"] and "--top-k" in words and "--seed" in words
    doc = cli([*words[1:], "--json"])
    assert json.loads(result.json_text()) == doc
    merged = compute_merge(MergeRequest((out,)))
    assert shlex.split(merged.command_line()) == ["attn", "stats", "merge", str(out)]
    assert json.loads(merged.json_text()) == cli(["stats", "merge", out, "--json"])
    assert result._repr_svg_().startswith("<svg")


def test_the_request_checks_through_the_table_and_the_bounds():
    with pytest.raises(BadInput, match="^attn stats needs --transformer"):
        StatsRequest("c.txt").check()
    with pytest.raises(BadInput, match="^--precision must be float32 or float64 \\(got 'float16'\\)$"):
        StatsRequest("c.txt", transformer="m", precision="float16").check()
    with pytest.raises(BadInput, match="^--workers must be between 1 and 256 \\(got 0\\)$"):
        StatsRequest("c.txt", transformer="m", workers=0).check()
    with pytest.raises(BadInput, match="^--explore opens the statistics"):
        MergeRequest(("d",)).check(json_out=True, explore=True)
    StatsRequest("c.txt", transformer="m", precision="float64").check(json_out=True)
