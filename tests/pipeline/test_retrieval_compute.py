"""``attn retrieval`` end to end on a tiny random Llama (tests/causal/test_retrieval_heads.py checks
the scores against transformers): its JSON, its drawing, the causal test's masks, its refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import skip_without_brown
from _llama_fixtures import build_decoder
from attncli.cli.main import app
from attncli.pipeline.retrieval_compute import RetrievalRequest

@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return build_decoder("llama", tmp_path_factory.mktemp("retr"), max_position_embeddings=512)


def test_the_command_prints_every_head_and_the_causal_test(llama):
    skip_without_brown()
    res = CliRunner().invoke(app, ["retrieval", "--transformer", str(llama), "--needles", "3", "--lengths", "200,240",
                                   "--depths", "2", "--mask", "2", "--top", "3", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["heads"]) == 2 * 4 and len(doc["top"]) == 3 and doc["samples"] == 3 * 2 * 2
    assert [(e["length"], e["depth"]) for e in doc["recall"]] == [(200, 0.0), (200, 1.0), (240, 0.0), (240, 1.0)]
    assert doc["stability"]["needles"] == 3 and len(doc["stability"]["curve"]) == 3
    c = doc["causal"]
    top = {(e["layer"], e["head"]) for e in doc["top"][:2]}
    assert {(e["layer"], e["head"]) for e in c["top"]["heads"]} == top
    assert not top & {(e["layer"], e["head"]) for e in c["random"]["heads"]}
    assert len(doc["answers"]) == 12 and all(0 <= a["recall"] <= 1 for a in doc["answers"])
    drawn = CliRunner().invoke(app, ["retrieval", "--transformer", str(llama), "--needles", "1", "--lengths", "200",
                                     "--depths", "1"], env={"COLUMNS": "120"})
    assert drawn.exit_code == 0 and "retrieval heads of" in drawn.stdout and "needle recall" in drawn.stdout


@pytest.mark.parametrize("args,message", [
    (["--lengths", "abc"], "--lengths takes token counts"),
    (["--lengths", "8"], "--lengths: each must be in [16"),
    (["--lengths", "600"], "reads at most 512 positions"),
    (["--lengths", "40"], "the needle and the question alone take"),
    (["--needles", "0"], "--needles must be in"),
    (["--tolerance", "nan"], "--tolerance must be in"),
    (["--mask", "8"], "--mask 8: the model has 8 heads"),
])
def test_refusals(llama, args, message):
    skip_without_brown()
    extra = ["--needles", "1", "--depths", "1", "--lengths", "200"]
    res = CliRunner().invoke(app, ["retrieval", "--transformer", str(llama), *extra, *args])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()), res.output


def test_the_request_writes_its_command_line():
    assert RetrievalRequest(transformer="m", needles=5, lengths=(256, 512), depths=3, mask=4, seed=1).command_line() \
        == "attn retrieval --transformer m --needles 5 --lengths 256,512 --depths 3 --mask 4 --seed 1"
