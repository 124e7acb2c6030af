"""attn sinks' bounds (attncli.causal.massive_activations.scan), issue 52: every text's attention
pattern (L, h, T, T) and residual states (L, T, d) were held until the last text was traced, so
memory grew with --sentences (100,000 allowed: on Gemma-3-270M about 1.3 GB a thousand Brown
sentences), and --layer past the model was refused only after every text had been traced. Now a
text's pattern and states are read as it is traced (only the --causal-test texts keep theirs), the
memory held does not grow with the number of texts, and --layer is refused before any pass. The
report itself is unchanged (tests/causal/test_massive_activations.py holds it to its references).
And a padded pass held 16 texts' (L, h, T, T) float64 attention, whatever T: one --file line of
8,192 tokens on SmolLM2-135M was 135 GiB. Now a pass holds at most ATTENTION_BYTES (2 GiB) of it
(fewer texts a pass), and a text whose attention alone is more is refused before any pass."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from attncli.causal import massive_activations  # noqa: E402
from attncli.causal.massive_activations import scan  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402

WORDS = "the cat sat on a mat and a dog ran far away from the old town by the river".split()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load(str(build_decoder("llama", tmp_path_factory.mktemp("sinks52") / "m")), backend="numpy")


def texts(model, n: int) -> list[list[int]]:
    """n texts of about 55 tokens (the fixture's 64 positions)."""
    return [model.encode(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(50)), truncate=True).ids
            for i in range(n)]


def held(model, n: int, causal: int = 2, **criterion) -> int:
    """Bytes scan() holds at its peak over n texts (tracemalloc sees numpy's arrays), beyond the ids."""
    ids = texts(model, n)
    scan(model, ids[:1], causal=0, **criterion)  # warm: caches, the weights' first read
    tracemalloc.start()
    try:
        scan(model, ids, causal=causal, **criterion)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("criterion", [{}, {"ratio": 0.0, "min_value": 0.0}], ids=["paper", "every-entry-massive"])
def test_the_memory_held_does_not_grow_with_the_number_of_texts(model, criterion):
    """--ratio 0 --min-value 0 makes every entry massive: each text held a (layer, position) pair per
    entry, L T d of them (on SmolLM2-135M 1.7 million tuples a 100-token sentence), now one a position."""
    small, large = held(model, 10, **criterion), held(model, 70, **criterion)
    per_text = model.layers * model.heads * 55 * 55 * 4 + model.layers * 55 * 32 * 4  # a pattern and the states
    # before: the 60 more texts' patterns and states held (about 60 * 115 kB); now a few kB of positions
    assert large - small < 10 * per_text, (small, large, per_text)


def test_a_layer_past_the_model_is_refused_before_any_pass(model, monkeypatch):
    passes = []
    for name in ("trace", "trace_batch"):
        real = getattr(model, name)
        monkeypatch.setattr(model, name, lambda *a, _real=real, **k: passes.append(1) or _real(*a, **k))
    with pytest.raises(BadInput, match=r"--layer 9: model has layers 0\.\.1"):
        scan(model, texts(model, 3), causal=1, causal_layer=9)
    assert passes == []


def counted(model, monkeypatch) -> list[int]:
    """The texts of each padded pass (and 1 for each single trace) scan() runs, as a list."""
    runs: list[int] = []
    real_batch, real_trace = model.trace_batch, model.trace
    monkeypatch.setattr(model, "trace_batch", lambda encs, *a, **k: runs.append(len(encs)) or real_batch(encs, *a, **k))
    monkeypatch.setattr(model, "trace", lambda *a, **k: runs.append(1) or real_trace(*a, **k))
    return runs


def test_a_text_whose_attention_alone_passes_the_bound_is_refused_before_any_pass(model, monkeypatch):
    per_entry = model.layers * model.heads * 8
    monkeypatch.setattr(massive_activations, "ATTENTION_BYTES", per_entry * 20 ** 2)  # 20 tokens at most
    runs = counted(model, monkeypatch)
    encs = [model.encode("the cat sat"), model.encode(" ".join(WORDS), truncate=True)]
    with pytest.raises(BadInput, match=r"text 2 is \d+ tokens: .* at most 20 tokens a sentence for this model"):
        scan(model, encs, causal=1)
    assert runs == []


def test_a_padded_pass_holds_at_most_the_bound_and_the_report_is_the_same(model, monkeypatch):
    encs = [model.encode(" ".join(WORDS[i % 7: i % 7 + 3 + i % 11]), truncate=True) for i in range(20)]
    whole = scan(model, encs, causal=3)
    longest = max(len(e.ids) for e in encs)
    per_entry = model.layers * model.heads * 8
    budget = 3 * per_entry * longest ** 2  # three of the longest a pass
    monkeypatch.setattr(massive_activations, "ATTENTION_BYTES", budget)
    runs = counted(model, monkeypatch)
    cut = scan(model, encs, causal=3)
    assert sum(runs) == 20 and max(runs) <= 16 and len(runs) > 2, runs  # before: one pass of 16, one of 4
    start = 0
    for n in runs:  # each pass within the bound
        assert n * per_entry * max(len(e.ids) for e in encs[start:start + n]) ** 2 <= budget
        start += n
    for key in ("sink_share", "first_token_share"):  # the float32 pass, padded to other lengths
        f32_close(np.array(cut[key]), np.array(whole[key]), *f32_size(model.path), per_element=True, what=key)
    assert cut["channels"] == whole["channels"] and cut["appear"] == whole["appear"]


def test_the_causal_test_holds_no_text_past_its_own_passes(model):
    """--causal-test N kept the N texts' (L, T, d) states from the scan to the test; each text's
    state now comes from its own clean pass."""
    states = model.layers * 55 * 32 * 4  # one text's (L, T, d) float32
    few, every = (held(model, 70, causal=n, ratio=2.0, min_value=0.0) for n in (2, 70))  # the same scan
    assert every - few < 10 * states, (few, every, states)  # before: 68 more texts' states held
