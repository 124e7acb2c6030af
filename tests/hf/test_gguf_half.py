"""A bfloat16 / float16 safetensors checkpoint stays mapped in its own dtype: a pass widens one
layer at a time, and keeps at most one layer's float32 tensors (weights.py's _kept), with the
same numbers as before (a widened tensor is the same whether kept or widened again)."""

from __future__ import annotations

import numpy as np
import pytest

from _llama_fixtures import build_decoder
from conftest import needed
from _tolerance import f32_close, f32_size


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_checkpoint_keeps_one_layer_widened(tmp_path, dtype):
    needed("torch")
    needed("transformers")
    from attncli.hf.loader import load

    build_decoder("llama", tmp_path, dtype=dtype)
    model = load(str(tmp_path), backend="numpy")
    w = model.arch.w.weights if hasattr(model.arch.w, "weights") else model.arch.w
    enc = model.encode("the cat sat on the mat")
    first = model.attentions(enc)
    layer, widened = w._widened
    assert layer is not None and widened, "a half-precision pass widens its layers"
    assert {key.split(".")[1] for key, _ in widened} == {str(model.layers - 1)}  # "layers.N.": the last only
    assert all(t.ndim < 2 for t in w._cache.values())  # no widened matrix kept outside the layer
    np.testing.assert_array_equal(model.attentions(enc), first)  # widened again: the same numbers


@pytest.mark.parametrize("budget", ["all", "one matrix"])
def test_a_corpus_run_keeps_widened_matrices_within_its_budget(tmp_path, monkeypatch, budget):
    """trace_batch (attn stats' passes) asks the weights to keep widened matrices across passes
    (Weights.hold_widened) up to a budget: with room for all, a second batch widens nothing; with
    room for one matrix, one is kept and the rest go a layer at a time; the numbers are the same.
    (The last layer's stay as the layer at hand, weights.py's _kept, when a pass before held them.)"""
    needed("torch")
    needed("transformers")
    from attncli.hf import weights as weights_module
    from attncli.hf.loader import load

    build_decoder("llama", tmp_path, dtype="bfloat16")
    model = load(str(tmp_path), backend="numpy")
    w = model.arch.w
    encs = [model.encode("the cat sat on the mat"), model.encode("a dog")]
    alone = model.attentions(encs[0])  # a single pass first: nothing held
    assert all(t.ndim < 2 for t in w._cache.values())
    if budget == "one matrix":
        monkeypatch.setattr(weights_module, "HOLD_BYTES", min(t.nbytes for t in w._widened[1].values()))
    first = model.trace_batch(encs, "blocks.*.attn.pattern", precision="float32")
    held = [t for t in w._cache.values() if t.ndim == 2] + list(w._widened[1].values())  # and the layer at hand
    calls = []
    read = w._read
    monkeypatch.setattr(w, "_read", lambda full, dtype=None: calls.append(full) or read(full, dtype))
    again = model.trace_batch(encs, "blocks.*.attn.pattern", precision="float32")
    if budget == "all":
        assert len(held) == 7 * model.layers and not calls  # q, k, v, o, gate, up, down of every layer
    else:
        assert len(held) == 1 + 3 and calls  # and the layer at hand: the last one's q, k, v (a patterns-only
        # pass stops after the last layer's attention: its o, gate, up, down are not read)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a["blocks.0.attn.pattern"], b["blocks.0.attn.pattern"])
    depth, length = f32_size(model)  # the float32 batch against the single pass (float64 scores)
    f32_close(first[0].stack("attn.pattern", model.layers), alone, depth, length, per_element=True)
