"""A bfloat16 / float16 safetensors checkpoint stays mapped in its own dtype. One whose widened
tensors fit the budget (weight_hold: HOLD_BYTES, or ATTN_WEIGHTS_BUDGET) keeps each tensor once
widened: a loaded model widens once, and every later call (a trace, the gradient tape) widens
nothing. One over it widens one layer at a time and keeps at most one layer's float32 tensors
(weights.py's _kept, weight_hold.Hold). The numbers are the same either way (a widened tensor is
the same whether kept or widened again)."""

from __future__ import annotations

import numpy as np
import pytest

from _llama_fixtures import build_decoder
from conftest import needed
from _tolerance import f32_close, f32_size


def _loaded(path, monkeypatch, hold=None):
    """The model at ``path`` loaded with ``hold`` as its budget, ATTN_WEIGHTS_BUDGET (None: the default)."""
    from attncli.hf.loader import load

    if hold is None:
        monkeypatch.delenv("ATTN_WEIGHTS_BUDGET", raising=False)
    else:
        monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", str(hold))
    return load(str(path), backend="numpy")


def _held(w) -> list:
    """The widened matrices ``w`` keeps across passes."""
    return [t for t in w._hold.kept.values() if t.ndim == 2]


def _count_reads(w, monkeypatch) -> list[str]:
    """The tensors ``w`` reads (and widens) from its file from now on."""
    calls, read = [], w._read
    monkeypatch.setattr(w, "_read", lambda full, dtype=None: calls.append(full) or read(full, dtype))
    return calls


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_checkpoint_over_the_hold_keeps_one_layer_widened(tmp_path, monkeypatch, dtype):
    needed("torch")
    needed("transformers")
    build_decoder("llama", tmp_path, dtype=dtype)
    widened = _loaded(tmp_path, monkeypatch).arch.w.widened_bytes()
    model = _loaded(tmp_path, monkeypatch, hold=widened - 1)  # one byte short of the whole model
    w = model.arch.w
    enc = model.encode("the cat sat on the mat")
    first = model.attentions(enc)
    layer, held = w._hold.layer
    assert layer is not None and held, "a half-precision pass widens its layers"
    assert {key.split(".")[1] for key, _ in held} == {str(model.layers - 1)}  # "layers.N.": the last only
    assert all(t.ndim < 2 for t in w._cache.values()) and not _held(w) and w._hold.held == 0  # none outside the layer
    calls = _count_reads(w, monkeypatch)
    np.testing.assert_array_equal(model.attentions(enc), first)  # widened again: the same numbers
    assert len(calls) >= 7 * (model.layers - 1)  # q, k, v, o, gate, up, down of every layer but the one at hand


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_checkpoint_within_the_hold_is_widened_once(tmp_path, monkeypatch, dtype):
    """Within the hold (here exactly the model's widened bytes), the first call widens every matrix
    once and keeps it: a second trace and the gradient tape (hf/methods/backward.py, attn attribute's) read
    nothing from the file, and give the numbers of a model that widens layer by layer."""
    needed("torch")
    needed("transformers")
    from attncli.hf.methods.backward import gradients

    build_decoder("llama", tmp_path, dtype=dtype)
    widened = _loaded(tmp_path, monkeypatch).arch.w.widened_bytes()
    streamed = _loaded(tmp_path, monkeypatch, hold=widened - 1)
    model = _loaded(tmp_path, monkeypatch, hold=widened)
    w = model.arch.w
    ids = model.encode("the cat sat on the mat").ids
    first = model.trace(ids, ["logits", "blocks.*.attn.pattern"])
    matrices = _held(w)  # every layer's 7 and the LM head, widened once
    assert len(matrices) == 7 * model.layers + 1 and w._hold.held == sum(t.nbytes for t in matrices)
    vocab, width = w.base_shapes()["embed_tokens.weight"]  # the one matrix a pass reads only rows of
    assert widened == w._hold.held + vocab * width * 4
    calls = _count_reads(w, monkeypatch)
    again = model.trace(ids, ["logits", "blocks.*.attn.pattern"])
    grads, logits = gradients(model, ids, len(ids) - 1, lambda z: np.eye(len(z))[3])
    assert calls == []
    for name in ("logits", "blocks.0.attn.pattern", f"blocks.{model.layers - 1}.attn.pattern"):
        np.testing.assert_array_equal(again[name], first[name])
        np.testing.assert_array_equal(streamed.trace(ids, name)[name], first[name])
    grads_streamed, logits_streamed = gradients(streamed, ids, len(ids) - 1, lambda z: np.eye(len(z))[3])
    np.testing.assert_array_equal(logits, logits_streamed)
    for name in ("embed", "blocks.0.attn.z", "final_norm"):
        np.testing.assert_array_equal(grads[name], grads_streamed[name])


@pytest.mark.parametrize("budget", ["all", "one matrix"])
def test_a_corpus_run_keeps_widened_matrices_within_its_budget(tmp_path, monkeypatch, budget):
    """trace_batch (attn stats' passes) asks the weights to keep widened matrices across passes
    (Weights.hold_widened) up to a budget: with room for all (a model within the hold, held since
    its first pass), a second batch widens nothing; a model over the hold with room for one matrix
    keeps one and the rest go a layer at a time; the numbers are the same.
    (The last layer's stay as the layer at hand, weights.py's _kept, when a pass before held them.)"""
    needed("torch")
    needed("transformers")
    build_decoder("llama", tmp_path, dtype="bfloat16")
    model = _loaded(tmp_path, monkeypatch)
    w = model.arch.w
    encs = [model.encode("the cat sat on the mat"), model.encode("a dog")]
    alone = model.attentions(encs[0])  # a single pass first
    if budget == "one matrix":
        model = _loaded(tmp_path, monkeypatch, hold=min(t.nbytes for t in _held(w)))
        w = model.arch.w
        np.testing.assert_array_equal(model.attentions(encs[0]), alone)
        assert not _held(w)  # over the hold: nothing held by a single pass
    else:
        assert len(_held(w)) == 7 * model.layers  # within it: all
    first = model.trace_batch(encs, "blocks.*.attn.pattern", precision="float32")
    held = _held(w) + list(w._hold.layer[1].values())  # and the layer at hand
    calls = _count_reads(w, monkeypatch)
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
