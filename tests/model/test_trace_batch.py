"""``trace_batch``: one padded forward pass over several texts gives each text the trace it gets
alone (``trace``), cut to its own tokens: encoders (padding a real token could attend to, masked),
decoders (causal, padded on the right; GPT-2's learned positions, Llama's RoPE, Mistral's sliding
window), and the float32 pass within its stated tolerance of the float64 one."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed
from _llama_fixtures import BASE
from _tolerance import f32_close
from attncli.model.record import attention_only
from attncli.model.trace import Keep

needed("tokenizers")
needed("safetensors")

TEXTS = ["the cat sat on the mat and the dog sat on the log",
         "a",
         "time flies like an arrow",
         "she sells sea shells by the sea shore, and the shells she sells are sea shells for sure"]
SITES = ["embed", "blocks.*", "final_norm"]
# the tiny float32 models' rounding (tests/_tolerance.py): their layers and their widest reduction
DEPTH, WIDTH = BASE["num_hidden_layers"], max(BASE["hidden_size"], BASE["intermediate_size"])


def _model(request, kind: str):
    from attncli.hf import load

    if kind in ("llama", "mistral"):
        from _llama_fixtures import build_decoder

        needed("torch")
        needed("transformers")
        path = build_decoder(kind, request.getfixturevalue("tmp_path_factory").mktemp(kind) / kind)
    else:
        path = request.getfixturevalue(f"{kind}_dir")
    return load(str(path), backend="numpy")


@pytest.mark.parametrize("kind", ["tiny_bert", "tiny_roberta", "tiny_gpt2", "llama", "mistral", "minilm"])
def test_a_padded_batch_gives_each_text_its_own_trace(request, kind):
    model = _model(request, kind)
    encs = [model.encode(t, truncate=True) for t in TEXTS]
    assert len({len(e.ids) for e in encs}) == len(encs)  # every text but the longest is padded
    keep = SITES + (["logits"] if model.is_decoder else [])
    exact = model.arch.w.dtype == np.float64  # BERT, GPT-2 families; the Llama family's pass is float32
    batched = model.trace_batch(encs, keep)
    assert len(batched) == len(encs)
    for enc, got in zip(encs, batched):
        want = model.trace(enc, keep)
        assert got.ids == enc.ids and sorted(got) == sorted(want)
        for name in want:
            assert got[name].shape == want[name].shape, name
            if exact:
                np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-12, err_msg=f"{kind} {name}")
            else:  # a float32 pass (the tiny Llama family's): another batch shape, other float32 rounding
                f32_close(got[name], want[name], depth=DEPTH, length=WIDTH, what=f"{kind} {name}")
        A = got.stack("attn.pattern", model.layers)  # (L, h, T, T)
        np.testing.assert_allclose(A.sum(-1), 1.0, atol=1e-12)
        if exact:
            np.testing.assert_allclose(A, want.stack("attn.pattern", model.layers), rtol=0, atol=1e-12)
        else:
            f32_close(A, want.stack("attn.pattern", model.layers), depth=DEPTH, length=WIDTH, what=f"{kind} patterns")


def _size(model) -> tuple[int, int]:
    """The model's layers and its widest reduction (its width or its MLP's), from its config."""
    c = model.config
    width = c.get("hidden_size") or c["n_embd"]
    return c.get("num_hidden_layers") or c["n_layer"], max(width, c.get("intermediate_size") or c.get("n_inner") or 4 * width)


@pytest.mark.parametrize("kind", ["tiny_bert", "tiny_gpt2", "llama", "minilm"])
def test_the_float32_pass_is_within_its_tolerance(request, kind):
    """``precision="float32"`` (attn stats' default): patterns in float64, each weight within float32
    rounding of the float64 pass's, relative to itself (tests/_tolerance.py: a softmax weight's error is
    proportional to the weight), for the model's own depth and widest reduction."""
    model = _model(request, kind)
    depth, width = _size(model)
    encs = [model.encode(t, truncate=True) for t in TEXTS]
    exact = model.trace_batch(encs, "blocks.*.attn.pattern")
    fast = model.trace_batch(encs, "blocks.*.attn.pattern", precision="float32")
    most = 0.0
    for e, f in zip(exact, fast):
        a, b = e.stack("attn.pattern", model.layers), f.stack("attn.pattern", model.layers)
        assert b.dtype == np.float64 and a.shape == b.shape
        f32_close(b, a, depth=depth, length=width, per_element=True, what=f"{kind} float32 patterns")
        most = max(most, float(np.abs(b - a).max()))
    assert most > 0  # another pass: float32 weights and attention (Llama's weights are float32 in both)


@pytest.mark.parametrize("kind", ["tiny_bert", "tiny_gpt2", "llama"])
def test_a_patterns_only_pass_stops_after_the_last_layers_attention(request, kind, monkeypatch):
    """Keeping only patterns (attn stats), the pass ends at the last layer's z: its output
    projection, MLP and final norm are not run (``final`` never called), the patterns are the
    whole pass's; a site after it (resid_post, final_norm) runs the pass to the end."""
    model = _model(request, kind)
    L = model.layers
    assert attention_only(Keep.of("blocks.*.attn.pattern"), L) == f"blocks.{L - 1}.attn.z"
    for later in (f"blocks.{L - 1}.resid_post", "blocks.*", "final_norm", "logits", f"blocks.{L - 1}.attn.z"):
        assert attention_only(Keep.of(["blocks.*.attn.pattern", later]), L) is None, later
    encs = [model.encode(t, truncate=True) for t in TEXTS]
    whole = model.trace_batch(encs, ["blocks.*.attn.pattern", "final_norm"])  # run to the end
    finals = []
    arch = model.arch
    monkeypatch.setattr(arch, "final", lambda x, f=arch.final: finals.append(1) or f(x))
    stopped = model.trace_batch(encs, "blocks.*.attn.pattern")
    assert finals == []
    model.trace_batch(encs[:1], ["blocks.*.attn.pattern", f"blocks.{L - 1}.resid_post"])
    assert finals == [1]
    for a, b in zip(whole, stopped):
        assert sorted(b) == [f"blocks.{l}.attn.pattern" for l in sorted(range(L), key=str)]
        np.testing.assert_array_equal(b.stack("attn.pattern", L), a.stack("attn.pattern", L))


def test_bad_calls_are_refused(tiny_gpt2_dir):
    from attncli.errors import BadInput
    from attncli.hf import load

    model = load(str(tiny_gpt2_dir), backend="numpy")
    enc = model.encode("the cat")
    assert model.trace_batch([], "embed") == []
    for call in (lambda: model.trace_batch([enc], "embed", precision="float16"),
                 lambda: model.trace_batch([[1, 2, 3]], "embed"),
                 lambda: model.trace_batch([enc], "blocks.0.attn.pattern", rows=[0]) if False else
                 model.trace_batch([enc], __import__("attncli.model.trace", fromlist=["Keep"]).Keep.of(
                     "blocks.0.attn.pattern", rows=[0]))):
        with pytest.raises(BadInput):
            call()
