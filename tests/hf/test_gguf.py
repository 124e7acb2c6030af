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
         ("phi3", "Q8_0", 64), ("qwen2", "Q4_0", 64, True), ("gemma3", "Q8_0", 64, True)]  # True: no output.weight, the head tied to the embedding
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


def test_one_layer_kept(tmp_path):
    """Dequantized tensors of one layer at most are held: asking for layer 1 drops layer 0's."""
    needed("transformers")
    needed("gguf")
    from attncli.hf.loader import load

    write_gguf(tmp_path / "m.gguf", "llama", "Q4_0")
    w = load(str(tmp_path / "m.gguf")).arch.w
    w.get("layers.0.self_attn.q_proj.weight")
    w.get("layers.1.self_attn.q_proj.weight")
    kept = {name for name, _ in w._layer[1]}
    assert kept == {"model.layers.1.self_attn.q_proj.weight"}


def test_cli_matrix_on_gguf(tmp_path):
    needed("transformers")
    needed("gguf")
    from typer.testing import CliRunner

    from attncli.cli.main import app

    write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    result = CliRunner().invoke(app, ["matrix", "hello world", "--transformer", str(tmp_path / "m.gguf"),
                                      "--layer", "1", "--head", "0"])
    assert result.exit_code == 0, result.output
    assert "Ġw" in result.output and "backend: numpy" in result.output


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
    from attncli.hf.gguf_reader import gguf_file_in

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
