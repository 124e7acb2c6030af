"""attn sinks' bounds (attncli.causal.massive_activations.scan), issue 52: every text's attention
pattern (L, h, T, T) and residual states (L, T, d) were held until the last text was traced, so
memory grew with --sentences (100,000 allowed: on Gemma-3-270M about 1.3 GB a thousand Brown
sentences), and --layer past the model was refused only after every text had been traced. Now a
text's pattern and states are read as it is traced (only the --causal-test texts keep theirs), the
memory held does not grow with the number of texts, and --layer is refused before any pass. The
report itself is unchanged (tests/causal/test_massive_activations.py holds it to its references)."""

from __future__ import annotations

import tracemalloc

import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")

from _llama_fixtures import build_decoder  # noqa: E402
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


def held(model, n: int) -> int:
    """Bytes scan() holds at its peak over n texts (tracemalloc sees numpy's arrays), beyond the ids."""
    ids = texts(model, n)
    scan(model, ids[:1], causal=0)  # warm: caches, the weights' first read
    tracemalloc.start()
    try:
        scan(model, ids, causal=2)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_memory_held_does_not_grow_with_the_number_of_texts(model):
    small, large = held(model, 10), held(model, 70)
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
