"""Big models on the torch path (attncli/hf/backends/placement.py, torch_rows.py): --device-map auto
with a --max-memory that forces CPU and disk offload gives the numbers of the plain run (matrix,
ablate, generate through the CLI with --json); the attention rows are recomputed in chunks of query
rows and never as one layer's (h, T, T) when only some rows are asked; every placement mistake is
exit 2 before the model is read. Tiny random models, on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
needed("transformers")
needed("tokenizers")
needed("accelerate")

from typer.testing import CliRunner  # noqa: E402

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_atol, f32_close, f32_size  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load
from attncli.hf.backends import torch_rows  # noqa: E402
from attncli.hf.backends.placement import parse_max_memory, parse_size  # noqa: E402

runner = CliRunner()
TEXT = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture(scope="module")
def mistral(tmp_path_factory) -> Path:
    """Four layers, GQA (4 query heads over 2 kv heads), RoPE and a sliding window of 3 tokens."""
    return build_decoder("mistral", tmp_path_factory.mktemp("big") / "mistral", num_hidden_layers=4)


def budget(path: Path) -> str:
    """A CPU budget that holds the embeddings and some layers, not all: the rest go to the disk."""
    size = (path / "model.safetensors").stat().st_size
    return f"cpu={int(size * 0.8)},disk"


def run_json(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_budget_forces_cpu_and_disk_offload(mistral):
    model = load(str(mistral), backend="torch", device_map="auto", max_memory=budget(mistral))
    places = {str(v) for k, v in model.model.hf_device_map.items() if ".layers." in k}
    assert places == {"cpu", "disk"}, model.model.hf_device_map  # some layers in memory, some read from the disk
    assert any(p.device.type == "meta" for p in model.model.parameters())  # accelerate holds the disk's weights


def same_document(a, b, where="", tol: float = 0.0) -> None:
    """``a`` equals ``b``: every number to ``tol``, everything else exactly."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            same_document(a[k], b[k], f"{where}.{k}", tol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same_document(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float) and not isinstance(b, bool):
        assert isinstance(b, (int, float)) and abs(a - b) <= tol, (where, a, b)
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize("command", [
    ["matrix", TEXT, "--layer", "3"],
    ["matrix", TEXT, "--layer", "2", "--show", "norms"],
    ["ablate", TEXT, "--target-id", "5"],
    ["generate", "the cat sat", "-n", "3", "--greedy"],
])
def test_offloaded_runs_give_the_numbers_of_the_plain_run(command, mistral):
    base = command + ["--transformer", str(mistral), "--backend", "torch", "--json"]
    plain = run_json(base)
    split = run_json(base + ["--device-map", "auto", "--max-memory", budget(mistral)])
    # two float32 torch passes, rows recomputed in chunks: float32 rounding at the model's size and the
    # document's largest number
    depth, length = f32_size(mistral)
    largest = max(abs(x) for x in _numbers(plain) if isinstance(x, float))
    same_document(split, plain, tol=f32_atol(largest, depth=depth, length=length))
    assert "[" in json.dumps(plain) and any(isinstance(x, float) for x in _numbers(plain))  # numbers were compared


def _numbers(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _numbers(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _numbers(v)
    else:
        yield doc


def test_a_resumed_pass_leaves_the_offload_hooks_of_the_layers_it_skips(mistral):
    """``start`` skips the layers before it by replacing their forward; accelerate's own wrapper (which
    brings a disk layer's weights in) is put back, so the next whole pass still reads them."""
    plain = load(str(mistral), backend="torch")
    model = load(str(mistral), backend="torch", device_map="auto", max_memory="cpu=1KB,disk")  # all on the disk
    assert set(map(str, model.model.hf_device_map.values())) == {"disk"}
    ids = model.encode(TEXT).ids
    want = plain.trace(ids, ["logits", "blocks.2.resid_pre"])
    wrappers = [layer.__dict__.get("forward") for layer in model.model.model.layers]
    assert all(wrappers)  # accelerate's
    resumed = model.trace(ids, "logits", start=(2, want["blocks.2.resid_pre"]))
    assert [layer.__dict__.get("forward") for layer in model.model.model.layers] == wrappers
    f32_close(resumed["logits"], want["logits"], *f32_size(mistral))  # float32 on the disk and in memory
    f32_close(model.trace(ids, "logits")["logits"], want["logits"], *f32_size(mistral))


def test_nan_in_a_weight_left_on_the_disk_is_damage(mistral, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from attncli.errors import RuntimeFailure

    bad = tmp_path / "bad"
    shutil.copytree(mistral, bad)
    weights = load_file(bad / "model.safetensors")
    name = next(k for k in weights if k.endswith("layers.3.self_attn.o_proj.weight"))
    weights[name][0, 0] = float("nan")
    save_file(weights, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RuntimeFailure, match="layers.3.self_attn.o_proj.weight"):
        load(str(bad), backend="torch", device_map="auto", max_memory=budget(bad))


def test_the_offload_folder_is_removed_with_the_model(mistral, monkeypatch, tmp_path):
    import gc
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = load(str(mistral), backend="torch", device_map="auto", max_memory=budget(mistral))
    made = list(tmp_path.glob("attn-offload-*"))
    assert len(made) == 1 and made[0].is_dir()
    del model
    gc.collect()
    assert not made[0].exists()


# --- chunks of query rows ---------------------------------------------------------------------

def test_rows_come_in_chunks_and_never_as_the_whole_layer(mistral, monkeypatch):
    model = load(str(mistral), backend="torch")
    enc = model.encode(TEXT)
    T = len(enc.ids)
    full = model.trace(enc, ["blocks.*.attn.pattern", "blocks.*.attn.scores"])
    seen = []
    real = torch_rows.scores

    def spy(q, k, scale, qi, **kw):
        out = real(q, k, scale, qi, **kw)
        seen.append(tuple(out.shape))
        return out

    monkeypatch.setattr(torch_rows, "scores", spy)
    monkeypatch.setattr(torch_rows, "CHUNK_BYTES", model.heads * T * 8 * 2)  # two rows a chunk
    rows = [T - 5, T - 3, T - 2, T - 1, 0]
    part = model.trace(enc, ["blocks.*.attn.pattern", "blocks.*.attn.scores"], rows=rows)
    assert seen and max(s[1] for s in seen) == 2 and len(seen) == model.layers * 3  # 5 rows: 2 + 2 + 1
    for l in range(model.layers):
        for site in ("pattern", "scores"):
            np.testing.assert_allclose(part[f"blocks.{l}.attn.{site}"], full[f"blocks.{l}.attn.{site}"][:, rows],
                                       atol=1e-12)
    seen.clear()
    model.trace(enc, "blocks.0.attn.pattern")  # every row asked: still chunk by chunk on the device
    assert seen and max(s[1] for s in seen) == 2


def test_a_pass_that_keeps_no_logits_asks_the_model_for_one_row_of_them(mistral, monkeypatch):
    """(T, V) logits of a long text outweigh everything a rows view keeps (8,192 x 128,256 floats:
    4 GiB): a trace that keeps none asks for the last position's alone."""
    model = load(str(mistral), backend="torch")
    ids = model.encode(TEXT).ids
    seen = []
    real = model._forward
    monkeypatch.setattr(model, "_forward", lambda inputs, **flags: seen.append(flags) or real(inputs, **flags))
    model.trace(ids, "blocks.*.attn.pattern", rows=[len(ids) - 1])
    full = model.trace(ids, "logits")
    assert seen[0].get("logits_to_keep") == 1 and "logits_to_keep" not in seen[1]
    assert full["logits"].shape == (len(ids), model.model.config.vocab_size)


def test_each_layer_drops_its_projections_once_its_rows_are_made(mistral, monkeypatch):
    """A long text's q, k and v of every layer would outweigh the rows kept: the pass holds one layer's."""
    from attncli.hf.backends import torch_trace

    model = load(str(mistral), backend="torch")
    runs = []
    real = torch_trace.TracedRun.run
    monkeypatch.setattr(torch_trace.TracedRun, "run", lambda self, inputs: runs.append(self) or real(self, inputs))
    model.trace(model.encode(TEXT).ids, "blocks.*.attn.pattern", rows=[3])
    assert len(runs[0].raw) == model.layers
    assert all(not {"q", "k", "v", "qkv", "rope"} & set(held) for held in runs[0].raw.values())


def test_chunk_rows_fits_the_budget():
    assert torch_rows.chunk_rows(32, 8192) == 2**26 // (32 * 8192 * 8) == 32
    assert torch_rows.chunk_rows(32, 8192, budget=1) == 1  # never zero rows
    assert torch_rows.chunk_rows(32, 8192, itemsize=4) == 64  # float32 on MPS


# --- --max-memory ------------------------------------------------------------------------------

def test_max_memory_reads_as_accelerate_does():
    assert parse_size("2GiB") == 2 * 2**30 and parse_size("200MB") == 200 * 10**6 and parse_size("4096") == 4096
    assert parse_size("1.5gb") == 1.5e9 and parse_size("64 KiB") == 64 * 1024
    assert parse_max_memory("cpu=200MB,disk") == ({"cpu": 200 * 10**6}, True)
    assert parse_max_memory("CPU=1GiB") == ({"cpu": 2**30}, False)


@pytest.mark.parametrize("spec, words", [
    ("cpu", "is not DEVICE=SIZE"),
    ("cpu=lots", "'lots' is not a size"),
    ("gpu=1GB", "unknown device 'gpu'"),
    ("cpu=1GB,cpu=2GB", "names cpu twice"),
    ("disk", "names no device"),
    ("=1GB", "is not DEVICE=SIZE"),
])
def test_malformed_max_memory(spec, words):
    with pytest.raises(BadInput, match=words):
        parse_max_memory(spec)


# --- exit 2, before the model is read ------------------------------------------------------------

NO_CUDA = not torch.cuda.is_available()
MPS = getattr(torch.backends, "mps", None)
NO_MPS = not (MPS and MPS.is_available())


@pytest.mark.parametrize("args, words, applies", [
    (["--backend", "torch", "--device", "cuda"], "torch finds no CUDA device here", NO_CUDA),
    (["--backend", "torch", "--device", "mps"], "torch finds no MPS device here", NO_MPS),
    (["--backend", "torch", "--dtype", "float64"], "unknown --dtype 'float64'", True),
    (["--backend", "torch", "--device-map", "everywhere"], "unknown --device-map 'everywhere'", True),
    (["--backend", "torch", "--device-map", "auto", "--max-memory", "cpu=lots"], "'lots' is not a size", True),
    (["--backend", "torch", "--device-map", "auto", "--max-memory", "0=1GB,cpu=1GB"], "names GPU 0", NO_CUDA),
    (["--backend", "torch", "--device-map", "auto", "--max-memory", "mps=1GB,cpu=1GB"], "no MPS device here", NO_MPS),
    (["--backend", "torch", "--max-memory", "cpu=1GB"], "add --device-map auto", True),
    (["--backend", "torch", "--device-map", "auto", "--device", "cpu"], "drop --device cpu", True),
])
def test_placement_mistakes_are_exit_2_before_the_model_is_read(args, words, applies, tmp_path):
    if not applies:
        pytest.skip("this machine has the device")
    missing = str(tmp_path / "no-such-model")  # never read: the options are refused first
    for command in (["matrix", "a cat"], ["generate", "a cat", "-n", "2"], ["ablate", "a cat", "--target", "cat"],
                    ["patch", "a cat", "a dog", "--target", "cat"]):
        result = runner.invoke(app, command + ["--transformer", missing, *args])
        assert result.exit_code == 2, result.output
        assert words in " ".join(result.stderr.split()) and "Traceback" not in result.output


def test_device_map_without_accelerate_names_the_extra(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(tmp_path / "m"), "--backend", "torch",
                                 "--device-map", "auto"])
    assert result.exit_code == 2 and "pip install -e '.[big]'" in " ".join(result.stderr.split()), result.output


@pytest.mark.parametrize("args, words", [
    (["--device-map", "auto"], "add --backend torch"),  # the NumPy path runs this model
    (["--backend", "numpy", "--device-map", "auto"], "add --backend torch"),
    (["--backend", "torch", "--device-map", "auto", "--max-memory", "cpu=1KB"], "add ',disk'"),  # fits nowhere
])
def test_device_map_mistakes_that_need_the_model(args, words, mistral):
    for command in (["matrix", "a cat"], ["dla", "a cat", "--target", "cat"]):
        result = runner.invoke(app, command + ["--transformer", str(mistral), *args])
        assert result.exit_code == 2, result.output
        assert words in " ".join(result.stderr.split()) and "Traceback" not in result.output
