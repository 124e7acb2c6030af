"""Long inputs on attn's NumPy pass (attncli/hf/kernels/chunked_attention.py): attention computed by
chunks of query rows, kept sites holding only the rows and heads asked for.

- At 512 tokens, the last 16 rows of every layer equal transformers' eager ``output_attentions``
  to 1e-5 (tiny random Llama with grouped-query attention and RoPE, Mistral's sliding window, GPT-2),
  with chunks small enough that the pass runs in many of them.
- Chunked equals whole: padded batches (BERT, Qwen2's windows), MPNet's position bias, the
  generation cache, at chunk sizes that cut rows apart, against one chunk of every row.
- Keep's rows, heads and float32 hold only those; bad rows and heads are refused; ``on_layer``
  reports each layer.
- Memory: a SmolLM2-135M-shaped Llama (2 of its 30 layers; the peak is one layer's) keeps the last
  16 rows of every layer at 8,192 tokens within 1.5x its float32 weights, measured as the peak
  resident memory of a process of its own above what it held before the pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")

from _tolerance import EPS32, f32_atol, f32_close, f32_size  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf.kernels import chunked_attention
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention, Keep  # noqa: E402

LONG = 512
LAST = 16
ROOT = Path(__file__).resolve().parents[2]


def _ids(model, n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(3, model.config["vocab_size"], n).tolist()


def _rows_per_chunk(monkeypatch, rows: int, heads: int, keys: int, itemsize: int = 8) -> list[int]:
    """Set CHUNK_BYTES so a one-text pass over ``keys`` tokens runs ``rows`` query rows a chunk;
    returns a list that counts the chunks run."""
    monkeypatch.setattr(chunked_attention, "CHUNK_BYTES", rows * heads * keys * itemsize)
    count = [0]
    real = chunked_attention._chunk

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(chunked_attention, "_chunk", counted)
    return count


@pytest.fixture(scope="module")
def long_models(tmp_path_factory, tiny_gpt2_dir):
    """kind -> (attn's NumPy model, transformers' eager model), positions for LONG tokens."""
    torch = needed("torch")
    transformers = needed("transformers")
    from _llama_fixtures import build_decoder

    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("long")
    out = {}
    for kind in ("llama", "mistral"):
        path = build_decoder(kind, base / kind, max_position_embeddings=LONG + 8)
        ref = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
        out[kind] = (load(str(path), backend="numpy"), ref)
    path = base / "gpt2"
    shutil.copytree(tiny_gpt2_dir, path)
    config = transformers.AutoConfig.from_pretrained(path)
    config.n_positions = LONG + 8
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    out["gpt2"] = (load(str(path), backend="numpy"), ref)
    return out


@pytest.mark.parametrize("float32", [False, True])
@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
def test_last_rows_at_512_tokens_equal_transformers_eager(long_models, monkeypatch, kind, float32):
    torch = needed("torch")
    model, ref = long_models[kind]
    ids = _ids(model, LONG)
    rows = list(range(LONG - LAST, LONG))
    chunks = _rows_per_chunk(monkeypatch, 37, model.heads, LONG)  # 14 chunks a layer, the last one short
    tr = model.trace(ids, Keep(("blocks.*.attn.pattern",), rows=tuple(rows), float32=float32))
    assert chunks[0] == model.layers * -(-LONG // (37 if not float32 or kind == "gpt2" else 74))
    with torch.no_grad():
        want = ref(torch.tensor([ids]), output_attentions=True).attentions  # L x (1, h, T, T)
    assert sorted(tr) == [f"blocks.{l}.attn.pattern" for l in range(model.layers)]
    for l in range(model.layers):
        got = tr[f"blocks.{l}.attn.pattern"]
        assert got.shape == (model.heads, LAST, LONG)
        assert got.dtype == (np.float32 if float32 else np.float64)
        depth, width = f32_size(model)  # the widest reduction here is the 512 keys a row sums over
        f32_close(got, want[l][0, :, rows].double().numpy(), depth, max(width, LONG), per_element=True, what=f"layer {l}")
    if kind == "mistral":  # the window bites: row i sees only keys i-2..i
        assert (tr["blocks.0.attn.pattern"][:, :, : LONG - LAST - 2] == 0).all()


def _whole_and_chunked(monkeypatch, run, rows: int, heads: int, keys: int):
    """run() with every row in one chunk, then with ``rows`` rows a chunk."""
    monkeypatch.setattr(chunked_attention, "CHUNK_BYTES", 2**40)
    whole = run()
    chunks = _rows_per_chunk(monkeypatch, rows, heads, keys)
    chunked = run()
    assert chunks[0] > 1
    return whole, chunked


def _close(a, b, size=None):
    """The same sites: to 1e-12 for a float64 pass, within float32 rounding of a model of ``size``
    (depth, widest reduction: tests/_tolerance.py; patterns per element) for a float32 pass."""
    assert sorted(a) == sorted(b)
    for name in a:
        if size is None:
            np.testing.assert_allclose(a[name], b[name], atol=1e-12, rtol=0, err_msg=name)
        else:
            f32_close(a[name], b[name], *size, per_element=name.endswith("pattern"), what=name)


TEXTS = ["the cat sat on the mat and the dog sat on the log", "a",
         "she sells sea shells by the sea shore, and the shells she sells are sea shells for sure"]


@pytest.mark.parametrize("kind", ["tiny_bert", "qwen2", "mpnet", "gpt2"])
def test_chunks_give_the_whole_computation(request, monkeypatch, tmp_path, kind):
    """A padded batch (right padding; Qwen2's sliding window on its second layer), MPNet's
    relative position bias: the same sites with 3 rows a chunk as with one chunk of every row."""
    if kind == "tiny_bert":
        path = request.getfixturevalue("tiny_bert_dir")
    elif kind == "gpt2":
        path = request.getfixturevalue("tiny_gpt2_dir")
    else:
        needed("torch")
        needed("transformers")
        from _llama_fixtures import build_decoder, build_mpnet

        path = build_mpnet(tmp_path / kind) if kind == "mpnet" else build_decoder(kind, tmp_path / kind)
    model = load(str(path), backend="numpy")
    encs = [model.encode(t, truncate=True) for t in TEXTS]
    keep = ["blocks.*.attn.pattern", "blocks.*.attn.scores", "blocks.*.attn.z", "final_norm"]
    T = max(len(e.ids) for e in encs)
    whole, chunked = _whole_and_chunked(monkeypatch, lambda: model.trace_batch(encs, keep), 3,
                                        len(encs) * model.heads, T)
    # the Llama family's pass is float32: z summed over other spans of keys rounds otherwise (as test_trace_batch)
    size = None if model.arch.w.dtype == np.float64 else f32_size(model)
    for w, c in zip(whole, chunked):
        _close(dict(w), dict(c), size)
    one = lambda: dict(model.trace(encs[0], keep, rows=[0, 5, len(encs[0].ids) - 1]))  # noqa: E731
    w, c = _whole_and_chunked(monkeypatch, one, 2, model.heads, len(encs[0].ids))
    _close(w, c, size)


@pytest.mark.parametrize("kind", ["llama", "phi3", "qwen2"])
def test_llama_blocks_and_in_place_sums_give_the_whole_computation(monkeypatch, tmp_path, kind):
    """Llama's pass makes k and v by blocks of rows, q per chunk of query rows (Phi-3 from its fused
    qkv_proj), the MLP by blocks added in place into arrays the layer owns: with blocks of 2 rows
    the same as in one block; a kept attn.out, resid_mid or resid_pre is never written over by the
    sums that follow it (each kept alone, then all at once, then mlp.out too: the other path)."""
    needed("torch")
    needed("transformers")
    from _llama_fixtures import build_decoder

    from attncli.hf.families import llama

    model = load(str(build_decoder(kind, tmp_path / kind)), backend="numpy")
    encs = [model.encode(t, truncate=True) for t in TEXTS]
    sites = ["blocks.*.attn.q", "blocks.*.attn.k", "blocks.*.attn.v", "blocks.*.attn.pattern", "blocks.*.attn.z",
             "blocks.*.attn.out", "blocks.*.resid_mid", "blocks.*.resid_post", "final_norm", "logits"]
    monkeypatch.setattr(llama, "ROW_BLOCK_BYTES", 2**40)
    monkeypatch.setattr(chunked_attention, "CHUNK_BYTES", 2**40)
    whole = [dict(t) for t in model.trace_batch(encs, sites)]
    T = max(len(e.ids) for e in encs)
    monkeypatch.setattr(llama, "ROW_BLOCK_BYTES", 2 * len(encs) * min(model.arch.d, model.arch.intermediate) * 4)
    _rows_per_chunk(monkeypatch, 2, len(encs) * model.heads, T)
    for w, c in zip(whole, model.trace_batch(encs, sites)):
        _close(w, dict(c), f32_size(model))
    ids = encs[2].ids
    full = model.trace(ids, ["blocks.*.resid_pre", "blocks.*.attn.out", "blocks.*.resid_mid", "blocks.*.mlp.out",
                             "blocks.*.resid_post"])
    for l in range(model.layers):
        # one float32 addition apart (tests/_tolerance.py at depth 1, no reduction)
        f32_close(full[f"blocks.{l}.resid_mid"], full[f"blocks.{l}.resid_pre"] + full[f"blocks.{l}.attn.out"])
        f32_close(full[f"blocks.{l}.resid_post"], full[f"blocks.{l}.resid_mid"] + full[f"blocks.{l}.mlp.out"])
    for keep in (["blocks.*.attn.out"], ["blocks.*.resid_mid"], ["blocks.*.resid_pre"],
                 ["blocks.*.resid_pre", "blocks.*.attn.out", "blocks.*.resid_mid", "blocks.*.resid_post"]):
        part = model.trace(ids, keep)
        for name in part:
            np.testing.assert_array_equal(part[name], full[name], err_msg=f"{name}, keeping {keep}")


def test_the_generation_cache_runs_its_new_rows_by_chunks(monkeypatch, tiny_gpt2_dir):
    model = load(str(tiny_gpt2_dir), backend="numpy")
    ids = model.encode(TEXTS[2], truncate=True).ids

    def run():
        cache = model.new_cache()
        model.logits_and_attentions(ids[:5], cache)
        return model.logits_and_attentions(ids, cache)

    (lw, aw), (lc, ac) = _whole_and_chunked(monkeypatch, run, 2, model.heads, len(ids))
    np.testing.assert_allclose(lc, lw, atol=1e-12, rtol=0)
    np.testing.assert_allclose(ac, aw, atol=1e-12, rtol=0)


def test_keep_holds_only_the_rows_and_heads_asked_for(monkeypatch, tiny_gpt2_dir):
    model = load(str(tiny_gpt2_dir), backend="numpy")
    ids = model.encode(TEXTS[2], truncate=True).ids
    _rows_per_chunk(monkeypatch, 3, model.heads, len(ids))
    full = model.trace(ids, "blocks.*.attn.*")
    rows, heads = (9, 2, len(ids) - 1, 2), (3, 1)
    part = model.trace(ids, Keep(("blocks.1.attn.pattern", "blocks.1.attn.scores"), rows=rows, heads=heads))
    assert sorted(part) == ["blocks.1.attn.pattern", "blocks.1.attn.scores"]
    assert part.rows == list(rows) and part.heads == list(heads)
    for name in part:
        want = full[name][list(heads)][:, list(rows)]
        assert part[name].shape == want.shape == (2, 4, len(ids))
        np.testing.assert_array_equal(part[name], want)
    small = model.trace(ids, Keep(("blocks.1.attn.pattern",), rows=rows, heads=heads, float32=True))
    assert small["blocks.1.attn.pattern"].dtype == np.float32
    # GPT-2's float64 pattern held in float32: one rounding to nearest, half an eps32 of each weight
    np.testing.assert_allclose(small["blocks.1.attn.pattern"], part["blocks.1.attn.pattern"], atol=0, rtol=EPS32 / 2)
    # an intervention on the pattern (head 0, row 1: neither kept) makes the layer whole: the same cut
    iv = Intervention("blocks.1.attn.pattern", "zero", head=0, position=1)
    cut = model.trace(ids, Keep(("blocks.1.attn.pattern",), rows=rows, heads=heads), interventions=[iv])
    np.testing.assert_allclose(cut["blocks.1.attn.pattern"], part["blocks.1.attn.pattern"], atol=1e-15, rtol=0)
    assert Keep.of(Keep(("x",), rows=(1,)), heads=[0]) == Keep(("x",), rows=(1,), heads=(0,))
    for bad, match in ((dict(rows=(len(ids),)), "rows must lie in"), (dict(heads=(model.heads,)), "heads must lie in"),
                       (dict(rows=(-1,)), "rows must lie in")):
        with pytest.raises(BadInput, match=match):
            model.trace(ids, Keep(("blocks.0.attn.pattern",), **bad))


def test_on_layer_reports_each_layer_as_it_is_done(tiny_gpt2_dir):
    model = load(str(tiny_gpt2_dir), backend="numpy")
    ids = model.encode(TEXTS[0]).ids
    seen = []
    tr = model.trace(ids, ["blocks.1.resid_pre", "logits"], on_layer=lambda l, L: seen.append((l, L)))
    assert seen == [(l, model.layers) for l in range(model.layers)]
    seen.clear()
    model.trace(ids, "logits", start=(1, tr["blocks.1.resid_pre"]), on_layer=lambda l, L: seen.append((l, L)))
    assert seen == [(1, model.layers)]
    seen.clear()
    model.trace_batch([model.encode(t, truncate=True) for t in TEXTS], "embed", on_layer=lambda l, L: seen.append((l, L)))
    assert seen == [(l, model.layers) for l in range(model.layers)]


# --- memory --------------------------------------------------------------------------------------

TOKENS = 8192
LAYERS = 2  # of SmolLM2-135M's 30: the peak is one layer's (and the kept rows, 4.5 MiB a layer)
PROBE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from attncli.hf import load
    from attncli.model.trace import Keep

    def status(key):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))

    path, tokens, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    model = load(path, backend="numpy")
    model.trace([1, 5, 6, 7], "logits")  # every weight read once (the LM head is the tied embeddings)
    ids = np.random.default_rng(0).integers(3, 49152, tokens).tolist()
    before = status("VmRSS")
    # a guard, not the measure: a pass that allocates gigabytes fails here instead of starving the machine
    limit = status("VmSize") + 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # VmHWM, the peak resident set, starts again from now
    rows = tuple(range(tokens - last, tokens))
    tr = model.trace(ids, Keep(("blocks.*.attn.pattern",), rows=rows, float32=True))
    peak = status("VmHWM")
    held = [tr[name] for name in tr]
    print(json.dumps({"before": before, "peak": peak, "sites": len(held),
                      "shape": list(held[0].shape), "dtype": str(held[0].dtype),
                      "sums": float(np.abs(np.stack(held).sum(-1) - 1).max())}))
""")


def test_last_rows_at_8192_tokens_peak_within_one_and_a_half_times_the_weights(tmp_path):
    """Resident memory (RSS, not tracemalloc, so OpenBLAS's buffers, the allocator's slack and the
    mapped weights' pages count, as on a user's machine), read in a process of its own:
    - the pass: its peak above what the process held before it (the weights read once, resident),
      within 1.5x the float32 weights of the model measured (2 layers: 135 MiB), stricter than
      SmolLM2-135M's 30 layers (513 MiB), whose pass has the same per-layer peak;
    - the whole process, as SmolLM2-135M's 30 layers would run it: this 2-layer process's peak
      plus, for each of the 28 other layers, its float32 weights and its kept rows (9 x 16 x 8,192
      float32), within 1.5x the 30 layers' weights (770 MiB) and LAYOUT (below). The estimate read
      758 MiB when bench/bench_long.py measured the 30 layers themselves at 758 MiB, and 774 MiB
      for the same code run from another checkout."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("the peak-RSS reset (/proc/self/clear_refs) is Linux's")
    from _long_fixtures import SMOL, build_smol, float32_bytes

    path = build_smol(tmp_path / "smol", LAYERS)
    weights = float32_bytes(path)
    run = subprocess.run([sys.executable, "-c", PROBE, str(path), str(TOKENS), str(LAST)], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["sites"] == LAYERS and got["shape"] == [9, LAST, TOKENS] and got["dtype"] == "float32"
    assert got["sums"] <= f32_atol(1.0, length=TOKENS)  # float32 rows of TOKENS weights, summed in float32
    extra = got["peak"] - got["before"]
    assert extra <= 1.5 * weights, (f"the pass peaked {extra / 2**20:.0f} MiB above the {got['before'] / 2**20:.0f} "
                                    f"MiB before it: more than 1.5x the {weights / 2**20:.0f} MiB of float32 weights")
    d, i, kv = SMOL["hidden_size"], SMOL["intermediate_size"], SMOL["num_key_value_heads"] * SMOL["head_dim"]
    layer = 4 * (2 * d + 2 * d * d + 2 * d * kv + 3 * d * i)  # one layer's float32 weights
    assert weights == 4 * (SMOL["vocab_size"] * d + d) + LAYERS * layer  # the count above is the model's
    more = 30 - LAYERS
    whole = got["peak"] + more * (layer + 9 * LAST * TOKENS * 4)
    budget = 1.5 * (weights + more * layer) + LAYOUT
    assert whole <= budget, (f"at 30 layers the process would peak at {whole / 2**20:.0f} MiB, more than "
                             f"{budget / 2**20:.0f} MiB (1.5x the {(weights + more * layer) / 2**20:.0f} MiB of "
                             f"float32 weights, and {LAYOUT / 2**20:.0f} MiB for where the allocator lands)")


# The same code, run from two checkouts of the repository, peaked 252 and 270 MiB in the 2-layer
# process (the allocator's and the kernel's layout, not attn's arrays): the whole-process estimate
# allows that much; bench/bench_long.py measures the 30 layers themselves (docs/benchmarks.md).
LAYOUT = 24 * 2**20
