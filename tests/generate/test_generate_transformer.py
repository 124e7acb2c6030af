"""attn generate --transformer: a pretrained causal LM writes; every streamed row is a row of
transformers' own ``output_attentions`` over the finished text, greedy is transformers' own greedy
``generate``, encoders are refused. Tiny random models (tests/_transformer_fixtures.py): GPT-2 and a
Llama on the NumPy path, the Llama also on the transformers path ("llama:torch")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needed

from typer.testing import CliRunner

from _tolerance import f32_close, f32_size
from attncli.cli.main import app
from attncli.generate.hf_decoder import load_pretrained
from attncli.generate.run import Settings, generate
from _probe import imported_by

runner = CliRunner()
PROMPT = "the cat sat on the mat"


def run(*args):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A tiny random LlamaForCausalLM (grouped-query attention, rotary positions)."""
    needed("transformers")
    import torch
    from transformers import GPT2Tokenizer, LlamaConfig, LlamaForCausalLM

    from _transformer_fixtures import INIT, SIZES, train_byte_bpe

    directory = tmp_path_factory.mktemp("tiny-llama") / "llama"
    vocab, merges = train_byte_bpe(["<|endoftext|>"])
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=merges)
    torch.manual_seed(0)
    eos = vocab["<|endoftext|>"]
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=SIZES["hidden"], intermediate_size=SIZES["intermediate"],
                         num_hidden_layers=SIZES["layers"], num_attention_heads=SIZES["heads"], num_key_value_heads=2,
                         max_position_embeddings=SIZES["positions"], initializer_range=INIT,
                         bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def decoder_of(kind: str, request):
    """The decoder of tiny model ``kind`` ("gpt2", "llama", or "llama:torch": through transformers)."""
    name, _, backend = kind.partition(":")
    directory = request.getfixturevalue(f"tiny_{name}_dir")
    dec = load_pretrained(str(directory), backend=backend or "auto")
    assert dec.model.backend == (backend or "numpy")
    return directory, dec


def hf_reference(directory: Path, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' own pass: logits (T, V) and output_attentions stacked (L, h, T, T)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return out.logits[0].double().numpy(), np.stack([a[0].double().numpy() for a in out.attentions])


def hf_greedy(directory: Path, ids: list[int], n: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=model.config.eos_token_id)
    return [int(i) for i in out[0, len(ids):]]


@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama:torch"])
@pytest.mark.parametrize("opts", [{}, {"layer": 0, "head": 1}, {"rollout": True}], ids=["mean", "head", "rollout"])
def test_streamed_rows_are_rows_of_transformers_output_attentions(kind, opts, request):
    directory, dec = decoder_of(kind, request)
    gen = generate(dec, PROMPT, Settings(n=10, seed=3, top_k=0, ignore_eos=True, **opts))
    assert len(gen.generated) == 10
    _, att = hf_reference(directory, gen.ids)  # (L, h, T, T)
    if opts.get("rollout"):
        T = att.shape[-1]
        ref = np.eye(T)
        for layer in att:
            ref = (0.5 * layer.mean(0) + 0.5 * np.eye(T)) @ ref
    else:
        layer = att[opts.get("layer", att.shape[0] - 1)]
        ref = layer[opts["head"]] if "head" in opts else layer.mean(0)
    size = f32_size(directory)  # transformers' float32 weights: per element (sums and products of weights)
    f32_close(gen.weights, ref, *size, per_element=True, what="weights")
    for s in gen.steps:
        f32_close(s.attention, ref[s.query, : s.query + 1], *size, per_element=True, what=f"step {s.query}")
    assert max(float(s.attention.max()) for s in gen.steps) > 2.0 / len(gen.tokens)  # far from uniform


@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama:torch"])
def test_greedy_is_transformers_greedy_generate(kind, request):
    directory, dec = decoder_of(kind, request)
    gen = generate(dec, PROMPT, Settings(n=8, greedy=True, ignore_eos=True))
    prompt_ids = gen.ids[: gen.prompt_length]
    assert gen.ids[gen.prompt_length:] == hf_greedy(directory, prompt_ids, 8)
    logits, _ = hf_reference(directory, gen.ids)
    for s in gen.steps:
        z = logits[s.query]
        p = np.exp(z - z.max())
        p /= p.sum()
        # a probability moves by itself times twice its logits' error, float32 rounding at the logits' size
        f32_close(s.prob, p[s.id], *f32_size(directory), scale=2 * float(np.abs(z).max()) * p[s.id])


def test_cli_json_with_gpt2(tiny_gpt2_dir):
    result = run("generate", PROMPT, "--transformer", str(tiny_gpt2_dir), "-n", "6", "--seed", "1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["model"]["kind"] == "pretrained" and doc["model"]["context"] == 40
    assert doc["text"].startswith(PROMPT)
    mapping = doc["prompt_mapping"]["tokens"]
    assert [m["token"] for m in mapping] == doc["tokens"][: len(mapping)] == doc["prompt_tokens"]
    assert "".join(doc["prompt_tokens"]) == PROMPT  # byte-level BPE: the pieces' text joins to the text
    W = np.array(doc["weights"])
    assert W.shape == (len(doc["tokens"]),) * 2
    for s in doc["steps"]:  # float32 passes over q + 1 and T tokens, weights printed in full
        f32_close(s["attention"], W[s["query"], : s["query"] + 1], *f32_size(tiny_gpt2_dir), per_element=True)


def test_terminal_view_with_gpt2(tiny_gpt2_dir):
    result = run("generate", PROMPT, "--transformer", str(tiny_gpt2_dir), "-n", "3", "--greedy", "--ignore-eos")
    assert result.exit_code == 0, result.output
    assert "pretrained gpt2" in result.stdout and result.stdout.count("attends to:") == 3
    assert "Ġ" not in result.stdout  # pieces are shown as text


def test_seed_reproduces_across_processes_with_gpt2(tiny_gpt2_dir, attn_home):
    args = ["generate", PROMPT, "--transformer", str(tiny_gpt2_dir), "-n", "8", "--seed", "99", "--json"]
    code = "import sys\nfrom attncli.cli.main import main\nsys.argv = ['attn'] + sys.argv[1:]\nmain()\n"
    env = dict(os.environ, ATTN_HOME=str(attn_home))
    a, b = (subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2))
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout


def test_gpt2_numpy_path_imports_no_torch(tiny_gpt2_dir, attn_home):
    modules, out = imported_by(["generate", "the cat", "--transformer", str(tiny_gpt2_dir), "-n", "4", "--json"])
    bad = [m for m in ("torch", "transformers") if m in modules]
    assert not bad, bad
    assert json.loads(out)["steps"]


def test_an_encoder_cannot_generate(tiny_bert_dir):
    result = run("generate", "the cat", "--transformer", str(tiny_bert_dir))
    assert result.exit_code == 2, result.output
    assert "cannot generate" in result.stderr and "Traceback" not in result.output


def test_context_of_a_pretrained_model(tiny_gpt2_dir):
    result = run("generate", PROMPT, "--transformer", str(tiny_gpt2_dir), "-n", "39")
    assert result.exit_code == 2 and "at most 40" in result.stderr


def test_a_missing_transformer_is_bad_input(tmp_path):
    result = run("generate", "the cat", "--transformer", str(tmp_path / "nothing-here"))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_a_prompt_longer_than_the_context(tiny_gpt2_dir):
    result = run("generate", " ".join(["the cat sat"] * 30), "--transformer", str(tiny_gpt2_dir))
    assert result.exit_code == 2, result.output
    assert "longer than model" in result.stderr and "40 tokens" in result.stderr


def test_the_key_value_cache_changes_nothing(tiny_gpt2_dir):
    from attncli.generate.hf_decoder import PretrainedLM
    from attncli.hf import load

    model = load(str(tiny_gpt2_dir))
    cached = generate(PretrainedLM(model), PROMPT, Settings(n=12, seed=8, ignore_eos=True, rollout=True))
    full = generate(PretrainedLM(model, use_cache=False), PROMPT, Settings(n=12, seed=8, ignore_eos=True, rollout=True))
    assert cached.ids == full.ids
    assert len(cached.decoder.cache) == len(cached.tokens) and full.decoder.cache is None  # the cache did the work
    size = f32_size(tiny_gpt2_dir)  # float32 passes with and without the cache; rollout rows: products of weights
    f32_close(cached.weights, full.weights, *size)
    for a, b in zip(cached.steps, full.steps):
        # the probability per element, in a row holding the most probable (the first candidate)
        f32_close([a.prob] + [p for _, p in a.candidates], [b.prob] + [p for _, p in b.candidates], *size, per_element=True)
        f32_close(a.attention, b.attention, *size)


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0"])
def test_gguf_greedy_keeps_its_cache_and_is_transformers_greedy_generate(tmp_path, monkeypatch, qtype):
    """A quantized Llama GGUF (the NumPy path's Llama family): each token after the prompt runs one
    row's pass (the key/value cache's), the tokens are those of a pass over the whole text at
    every step and those of transformers' greedy generate on the same file."""
    needed("transformers")
    needed("gguf")
    import torch
    from transformers import AutoModelForCausalLM

    from _gguf_fixtures import write_gguf
    from attncli.generate.hf_decoder import PretrainedLM
    from attncli.hf import load

    write_gguf(tmp_path / "m.gguf", "llama", qtype, tied=True, seed=3)
    model = load(str(tmp_path / "m.gguf"))
    embeddings, rows = model.arch.embeddings, []  # the tokens each pass runs
    monkeypatch.setattr(model.arch, "embeddings", lambda ids, *a, **k: rows.append(ids.shape[-1]) or embeddings(ids, *a, **k))
    cached = generate(PretrainedLM(model), "hello world", Settings(n=8, greedy=True, ignore_eos=True))
    assert rows == [cached.prompt_length] + [1] * 8  # the prompt, 7 new tokens, the finished text's last one
    full = generate(PretrainedLM(model, use_cache=False), "hello world", Settings(n=8, greedy=True, ignore_eos=True))
    assert cached.ids == full.ids and min(rows[9:]) >= cached.prompt_length  # without it: every pass whole
    reference = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf", attn_implementation="eager").eval()
    prompt = cached.ids[: cached.prompt_length]
    with torch.no_grad():
        out = reference.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=8, min_new_tokens=8, pad_token_id=0)
    assert cached.ids[cached.prompt_length:] == [int(i) for i in out[0, len(prompt):]]
