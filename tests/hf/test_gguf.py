"""GGUF files on attn's NumPy path equal transformers' own from_pretrained(dir, gguf_file=...) on
the same file: tiny random models written by the gguf package (F32, F16, Q8_0, Q4_0, and K-quants
whose blocks are written by hand), attention and logits to 1e-4 (the same dequantized weights)."""

from __future__ import annotations

import numpy as np
import pytest

from _gguf_fixtures import write_gguf
from conftest import needed
from _tolerance import f32_close, f32_size

CASES = [("llama", "F32", 64), ("llama", "Q8_0", 64), ("qwen2", "F16", 64), ("llama", "Q4_0", 64),
         ("llama", "Q4_K", 256), ("qwen2", "Q6_K", 256), ("llama", "Q5_K", 256), ("gpt2", "Q8_0", 64),
         ("phi3", "Q8_0", 64), ("qwen2", "Q4_0", 64, True), ("gemma3", "Q8_0", 64, True), ("llama", "Q4_1", 64),
         ("qwen2", "Q5_0", 64), ("llama", "Q5_1", 64)]  # True: no output.weight, the head tied to the embedding
TEXT = "hello world, or hell"


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_gguf_equals_transformers(tmp_path, case):
    arch, qtype, d, tied = (*case, False)[:4]
    needed("torch")
    needed("transformers")
    needed("gguf")
    import torch
    import transformers

    from attncli.hf.loader import load

    write_gguf(tmp_path / "m.gguf", arch, qtype, d=d, inner=d, tied=tied)
    ours = load(str(tmp_path / "m.gguf"))
    enc = ours.encode(TEXT)
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    assert enc.ids == tok(TEXT).input_ids
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                            attn_implementation="eager")
    with torch.no_grad():
        out = ref(torch.tensor([enc.ids]), output_attentions=True)
    want = np.stack([a[0].numpy() for a in out.attentions])  # (L, h, T, T)
    logits, att = ours.logits_and_attentions(enc.ids)
    size = f32_size(ref)  # the same dequantised weights, float32 on both sides
    f32_close(ours.attentions(enc), want, *size, per_element=True)
    f32_close(logits, out.logits[0].numpy(), *size)


def test_folder_holding_one_gguf(tmp_path):
    needed("transformers")
    needed("gguf")
    from attncli.hf.loader import load

    write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    by_file, by_folder = load(str(tmp_path / "m.gguf")), load(str(tmp_path))
    enc = by_file.encode(TEXT)
    np.testing.assert_array_equal(by_file.attentions(enc), by_folder.attentions(enc))


def _counted(w, monkeypatch) -> list[str]:
    """The tensors ``w`` dequantizes whole from now on."""
    calls, read = [], w._read
    monkeypatch.setattr(w, "_read", lambda full, dtype: calls.append(full) or read(full, dtype))
    return calls


def test_over_the_budget_one_layer_kept(tmp_path, monkeypatch):
    """A model whose dequantized tensors do not fit ATTN_WEIGHTS_BUDGET keeps one layer's at most:
    asking for layer 1 drops layer 0's, and a second pass dequantizes every matrix again."""
    needed("transformers")
    needed("gguf")
    from attncli.hf.loader import load

    write_gguf(tmp_path / "m.gguf", "llama", "Q4_0")
    whole = load(str(tmp_path / "m.gguf")).arch.w.dequantized_bytes()
    monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", str(whole - 1))
    model = load(str(tmp_path / "m.gguf"))
    w = model.arch.w
    w.get("layers.0.self_attn.q_proj.weight")
    w.get("layers.1.self_attn.q_proj.weight")
    assert {name for name, _ in w._hold.layer[1]} == {"model.layers.1.self_attn.q_proj.weight"}
    assert not w._hold.kept
    ids = model.encode("hello world").ids
    model.trace(ids, "logits")
    calls = _counted(w, monkeypatch)
    model.trace(ids, "logits")
    assert len(calls) >= 7 * (model.layers - 1)


def test_within_the_budget_dequantized_once(tmp_path, monkeypatch):
    """Within the budget (here exactly the model's dequantized bytes) every tensor is dequantized
    once, the tied LM head too (read whole, not by blocks, once it is held): a second pass and a
    generation's next token dequantize nothing, with the numbers of a model that keeps nothing
    (ATTN_WEIGHTS_BUDGET=0)."""
    needed("transformers")
    needed("gguf")
    from attncli.hf.loader import load

    path = write_gguf(tmp_path / "m.gguf", "llama", "Q4_1", tied=True)
    monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", "0")
    streamed = load(str(path))
    monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", str(streamed.arch.w.dequantized_bytes()))
    model = load(str(path))
    w = model.arch.w
    ids = model.encode("hello world, or hello there").ids
    first = model.trace(ids, ["logits", "blocks.*.attn.pattern"])
    assert "model.embed_tokens.weight" in {name for name, _ in w._hold.kept}  # the tied head, held
    assert w._hold.held == sum(t.nbytes for t in w._hold.kept.values())
    calls = _counted(w, monkeypatch)
    again = model.trace(ids, ["logits", "blocks.*.attn.pattern"])
    cache = model.new_cache()
    model.logits_and_attentions(ids[:-1], cache)
    cached = model.logits_and_attentions(ids, cache)
    assert calls == [] and not streamed.arch.w._hold.kept
    reference = streamed.trace(ids, ["logits", "blocks.*.attn.pattern"])
    for name in ("logits", "blocks.0.attn.pattern", f"blocks.{model.layers - 1}.attn.pattern"):
        np.testing.assert_array_equal(again[name], first[name])
        np.testing.assert_array_equal(reference[name], first[name])
    f32_close(cached[0][-1], first["logits"][-1], *f32_size(model.config))  # one row's pass: float32 rounding


def test_cli_matrix_on_gguf(tmp_path):
    needed("transformers")
    needed("gguf")
    from typer.testing import CliRunner

    from attncli.cli.main import app

    write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    result = CliRunner().invoke(app, ["matrix", "hello world", "--transformer", str(tmp_path / "m.gguf"),
                                      "--layer", "1", "--head", "0"])
    assert result.exit_code == 0, result.output
    # the byte-level pieces are drawn as text: 'Ġw' is '␣w' (tests/cli/test_tokens_as_text.py)
    assert "␣w" in result.output and "Ġ" not in result.output and "backend: numpy" in result.output


@pytest.mark.parametrize("argv,shows", [
    (["lens", "hello world"], "logit lens"),
    (["generate", "hello", "-n", "3", "--ignore-eos", "--seed", "1"], "numpy backend"),
    (["dla", "hello world", "--target-id", "5"], "direct logit attribution"),
    (["matrix", "hello world", "--top-k", "2"], "top 2 keys"),
])
def test_cli_views_on_gguf(tmp_path, argv, shows):
    """The views run on a GGUF model as on any other NumpyPretrained (the same object, another reader)."""
    needed("transformers")
    needed("gguf")
    from typer.testing import CliRunner

    from attncli.cli.main import app

    write_gguf(tmp_path / "m.gguf", "llama", "Q4_0")
    result = CliRunner().invoke(app, argv + ["--transformer", str(tmp_path / "m.gguf")])
    assert result.exit_code == 0, result.output
    assert shows in " ".join(result.output.split()), result.output


def test_transformers_folder_with_a_gguf_stays_safetensors(tmp_path):
    """A folder with config.json is a transformers model even when a .gguf lies beside it."""
    needed("gguf")
    from attncli.hf.formats.gguf_reader import gguf_file_in

    write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    assert gguf_file_in(tmp_path) == tmp_path / "m.gguf"
    (tmp_path / "config.json").write_text("{}")
    assert gguf_file_in(tmp_path) is None


def test_cli_stats_on_gguf(tmp_path):
    needed("transformers")
    needed("gguf")
    from typer.testing import CliRunner

    from attncli.cli.main import app

    write_gguf(tmp_path / "m.gguf", "qwen2", "Q8_0")
    (tmp_path / "corpus.txt").write_text("hello world\nhello there world\n")
    result = CliRunner().invoke(app, ["stats", str(tmp_path / "corpus.txt"), "--transformer", str(tmp_path / "m.gguf")])
    assert result.exit_code == 0, result.output
    assert "sink" in result.output and "layer 1" in result.output, result.output


def test_rope_freqs_left_out_other_tensors_refused(tmp_path):
    """Llama 3.1 files carry rope_freqs.weight, which transformers' GGUF loader leaves out too (the
    attention is unchanged); a tensor attn does not know is refused by name."""
    needed("transformers")
    needed("gguf")
    from attncli.errors import RuntimeFailure
    from attncli.hf.loader import load

    plain = load(str(write_gguf(tmp_path / "a.gguf", "llama", "F32")))
    freqs = load(str(write_gguf(tmp_path / "b.gguf", "llama", "F32", extra={"rope_freqs.weight": np.ones(8)})))
    enc = plain.encode(TEXT)
    np.testing.assert_array_equal(freqs.attentions(enc), plain.attentions(enc))
    with pytest.raises(RuntimeFailure, match="blk.0.attn_sinks"):
        load(str(write_gguf(tmp_path / "c.gguf", "llama", "F32", extra={"blk.0.attn_sinks.weight": np.ones(4)})))


def test_the_convert_hint_makes_a_folder_attn_runs(tmp_path):
    """The command a refused GGUF's message gives (CONVERT_HINT), run as printed with the installed
    transformers on a tiny Llama GGUF: a folder attn loads, whose attention equals the file's."""
    import shlex
    import subprocess
    import sys

    needed("torch")
    needed("transformers")
    needed("gguf")
    from attncli.hf.formats.gguf_file import CONVERT_HINT
    from attncli.hf.loader import load

    write_gguf(tmp_path / "m.gguf", "llama", "F32")
    command = shlex.split(CONVERT_HINT.split("convert it to a folder attn runs: ", 1)[1])
    assert command[0] == "python" and command[-3:] == ["DIR", "FILE.gguf", "OUT_DIR"]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, *command[1:-3], str(tmp_path), "m.gguf", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    converted, original = load(str(out)), load(str(tmp_path / "m.gguf"))
    assert converted.encode(TEXT).ids == original.encode(TEXT).ids
    f32_close(converted.attentions(converted.encode(TEXT)), original.attentions(original.encode(TEXT)),
              *f32_size(out), per_element=True, what="attention")
