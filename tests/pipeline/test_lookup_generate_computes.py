"""attn lookup and attn generate are a request, a compute and a result too (pipeline/lookup_compute.py,
pipeline/generate_compute.py): the command line prints the document the Python API computes from the same
request, and the result's command line, run again, prints it. And the causal views explore opens (G, D, R,
E) measure the model's top prediction through the request (target_top), which the compute resolves."""

import json
import shlex

import numpy as np
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.pipeline.causal_compute import DlaRequest
from attncli.pipeline.causal_compute import compute as compute_causal
from attncli.pipeline.generate_compute import GenerateRequest
from attncli.pipeline.generate_compute import compute as compute_generate
from attncli.pipeline.lookup_compute import LookupRequest
from attncli.pipeline.lookup_compute import compute as compute_lookup
from attncli.tinylm.traced import load_builtin


def run(args: list[str]) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_lookup():
    batch = compute_lookup(LookupRequest("colour", top_k=3))
    doc = json.loads(json.dumps(batch.document()))
    assert doc["best"]["value"] == "black"
    assert run(["lookup", "colour", "--top-k", "3"]) == doc
    assert run(shlex.split(batch.command_line())[1:]) == doc


def test_generate():
    result = compute_generate(GenerateRequest("the cat", n=3, seed=1, lens=True))
    steps = [step.token for step in result.steps()]  # the model writes as the steps are read
    doc = json.loads(json.dumps(result.document()))
    assert doc["tokens"][-len(steps):] == [t for t, s in zip(steps, result.gen.steps) if not s.eos]
    assert len(doc["lens_layers"]) == len(steps)
    assert result.command_line() == "attn generate 'the cat' -n 3 --seed 1 --lens"
    assert run(["generate", "the cat", "-n", "3", "--seed", "1", "--lens"]) == doc
    assert run(shlex.split(result.command_line())[1:]) == doc


def test_the_top_prediction_is_resolved_by_the_compute():
    text = "the cat sat on the"
    model = load_builtin()
    ids = list(model.encode(text).ids)
    top = int(np.argmax(model.trace(ids, "logits")["logits"][len(ids) - 1]))  # (V,): the next token's logits
    result = compute_causal(DlaRequest(text, target_top=True), model)
    assert result.request.target_id == top and not result.request.target_top
    assert f"--target-id {top}" in result.command_line()
    assert result.document() == compute_causal(DlaRequest(text, target_id=top), model).document()
