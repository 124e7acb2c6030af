"""attn circuit --backend torch (attncli/hf/backends/torch_edges.py: transformers' own modules under
hooks, each reader's input gradient by torch autograd) equals attn's NumPy tape: on GPT-2 in float64
to 1e-9 (every writer's output, EAP's and EAP-IG's scores, the edge-patched logits for any edge
weights, the circuit); on the Llama family in float32 within float32 rounding (Llama with grouped
keys and values, Phi-3's fused projections with them, Mistral's sliding window, Gemma 3's output
norms); through the CLI, one pair and --pairs; a decoder whose modules the torch backend does not
name is refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

torch = needed("torch")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.causal.circuit import edge_scores, find_circuit  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.backends import torch_edges  # noqa: E402
from attncli.hf.methods.edges import edge_mask, edge_patched_logits, node_outputs  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog ran to the log and the cat"
TEXTS = "the dog sat on the mat", "the mat sat on the dog"  # as many tokens each (the CLI's texts)


def _pair(model):
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    return clean[:n], corrupt[:n]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt2")
    path = every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=3)
    on_torch = load(str(path), backend="torch")
    on_torch.model.to(torch.float64)
    return path, on_torch, load(str(path), backend="numpy")


def _both(on_torch, on_numpy, steps):
    clean, corrupt = _pair(on_numpy)
    target = Target(len(clean) - 1, 5, "t", 7, "c")
    return target, edge_scores(on_torch, clean, corrupt, target, steps), edge_scores(on_numpy, clean, corrupt, target, steps)


@pytest.mark.parametrize("steps", [1, 3])
def test_gpt2_in_float64_equals_the_numpy_tape(gpt2, steps):
    _, on_torch, on_numpy = gpt2
    target, (ours, clean, corrupt), (want, clean_tape, corrupt_tape) = _both(on_torch, on_numpy, steps)
    tight = dict(rtol=0, atol=1e-9 * np.abs(want).max())
    np.testing.assert_allclose(ours, want, **tight)
    for run, tape in ((clean, clean_tape), (corrupt, corrupt_tape)):
        np.testing.assert_allclose(run.outputs(), node_outputs(tape), rtol=0, atol=1e-9 * np.abs(tape.embed).max())
        np.testing.assert_allclose(run.logits(target.position), tape.logits(target.position), rtol=0, atol=1e-9)
    mask = edge_mask(on_numpy.layers, on_numpy.heads)
    rng = np.random.default_rng(2)
    for w in (np.ones(mask.shape), np.zeros(mask.shape), rng.uniform(0, 1, mask.shape)):
        np.testing.assert_allclose(torch_edges.patched_logits(on_torch, clean.ids, corrupt, np.where(mask, w, 0.0)),
                                   edge_patched_logits(clean_tape, corrupt_tape, w, target.position), rtol=0, atol=1e-9)


def test_gpt2_circuit_is_the_numpy_ones(gpt2):
    _, on_torch, on_numpy = gpt2
    clean, corrupt = _pair(on_numpy)
    target = Target(len(clean) - 1, 5, "t", 7, "c")
    ours, want = find_circuit(on_torch, clean, corrupt, target), find_circuit(on_numpy, clean, corrupt, target)
    assert ours.kept == want.kept and ours.checks == want.checks
    assert abs(ours.patched - want.patched) <= 1e-9 * max(1.0, abs(want.patched))


@pytest.mark.parametrize("kind", ["llama", "phi3", "mistral", "gemma3"])
def test_llama_family_in_float32_equals_the_numpy_tape(tmp_path, kind):
    path = build_decoder(kind, tmp_path / kind)
    on_torch, on_numpy = load(str(path), backend="torch"), load(str(path), backend="numpy")
    target, (ours, clean, corrupt), (want, clean_tape, corrupt_tape) = _both(on_torch, on_numpy, 2)
    depth, length = f32_size(path)
    T = len(clean.ids)
    # a score: T d products of a float32 writer's shift and a float32 gradient, through a forward and a backward
    f32_close(ours, want, 2 * depth + 2, length * T, what=f"{kind} scores")
    f32_close(clean.outputs(), node_outputs(clean_tape), depth + 1, length, what=f"{kind} writers")
    mask = edge_mask(on_numpy.layers, on_numpy.heads)
    w = np.random.default_rng(3).uniform(0, 1, mask.shape)
    f32_close(torch_edges.patched_logits(on_torch, clean.ids, corrupt, np.where(mask, w, 0.0)),
              edge_patched_logits(clean_tape, corrupt_tape, w, target.position), 2 * depth + 2, length,
              what=f"{kind} edge-patched logits")


def run(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})


def test_the_cli_runs_on_torch_single_and_pairs(gpt2, tmp_path):
    path, _, _ = gpt2
    args = ["circuit", *TEXTS, "--transformer", str(path), "--target-id", "5", "--contrast-id", "7",
            "--steps", "2", "--json"]
    a, b = run(*args, "--backend", "torch"), run(*args, "--backend", "numpy")
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ours, want = json.loads(a.stdout), json.loads(b.stdout)
    depth, length = f32_size(path)
    assert [(e["from"], e["to"], e["input"]) for e in ours["edges"][:5]] == \
        [(e["from"], e["to"], e["input"]) for e in want["edges"][:5]]  # the strongest edges, far apart here
    f32_close([e["score"] for e in ours["edges"][:5]], [e["score"] for e in want["edges"][:5]], 2 * depth + 2,
              length * len(ours["tokens"]), printed=5e-9)
    assert ours["faithfulness"] >= 0.9
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"clean": TEXTS[0], "corrupt": TEXTS[1], "target": t, "contrast": c}) + "\n"
                             for t, c in ((" the", " a"), (" dog", " on"))))
    r = run("circuit", "--pairs", str(pairs), "--transformer", str(path), "--backend", "torch", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["pairs"] == 2 and doc["faithfulness"] >= doc["faithfulness_asked"]


def test_a_decoder_whose_modules_are_not_named_is_refused(tmp_path, tiny_gpt2_dir):
    from test_attribution_torch import opt_dir

    path, _ = opt_dir(tmp_path, tiny_gpt2_dir)
    model = load(str(path), backend="torch")
    with pytest.raises(BadInput, match="GPT-2, Llama, Mistral, Qwen2, Gemma, Phi-3"):
        find_circuit(model, [2, 5, 9, 12], [2, 5, 9, 14], Target(3, 5, "t"))
    r = run("circuit", "the dog sat", "the dog on", "--transformer", str(path), "--target-id", "5", "--backend", "torch")
    assert r.exit_code == 2 and "--backend numpy" in r.output and "Traceback" not in r.output
