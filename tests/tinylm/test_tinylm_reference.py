"""The trained LM (attncli/tinylm/model.py) against a torch model written here, from the papers (issue
24: no circular reference). tests/tinylm/test_trained.py's ``torch_reference`` runs attn's own model
builder and positional encoding, so it checks that training and inference agree, not that either
is right; this one shares nothing with attn but the stored files: the weights are read from
``weights.npz`` and the word vectors from ``vectors.npy`` / ``vocab.txt`` with NumPy, the
positional encoding is Vaswani et al. 2017's formula written below, and each layer is torch's
``nn.MultiheadAttention`` (loaded with the stored projections), ``F.layer_norm`` and
``F.gelu(approximate="tanh")`` in the pre-LayerNorm order of GPT-2 (Radford et al. 2019)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import needed

from _attention_fixtures import SENTENCES, make_random_attention, widest
from _tolerance import f32_close
from attncli.tinylm import model as trained
from attncli.vectors import store

torch = needed("torch")
F = torch.nn.functional


def paper_positions(T: int, d: int) -> "torch.Tensor":
    """Vaswani et al. 2017, section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)); written loop by loop, (T, d) float64."""
    pe = torch.zeros(T, d, dtype=torch.float64)
    for pos in range(T):
        for i in range(0, d, 2):
            angle = pos / 10000 ** (i / d)
            pe[pos, i] = math.sin(angle)
            if i + 1 < d:
                pe[pos, i + 1] = math.cos(angle)
    return pe


def stored(name: str):
    """The model's files read with NumPy alone: config, weights, and word -> vector."""
    directory = store.model_dir(name)
    config = json.loads((directory / "attention" / "config.json").read_text(encoding="utf-8"))
    with np.load(directory / "attention" / "weights.npz", allow_pickle=False) as npz:
        weights = {k: torch.tensor(npz[k], dtype=torch.float64) for k in npz.files}
    words = (directory / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    table = np.load(directory / "vectors.npy", allow_pickle=False)
    return config, weights, dict(zip(words, table))


def reference_forward(config, w, vectors, tokens, *, everything: bool = False, causal: bool = True):
    """(per-layer attention weights L x (h, T, T), logits (T, V_out)) in float64. With
    ``everything``, also each layer's attention output (T, d) (what it adds to the residual
    stream) and the residual stream before the final norm, (L + 1, T, d). ``causal=False``: no
    mask in any layer."""
    d, h, eps = config["d_model"], config["heads"], config["layer_norm_eps"]
    T = len(tokens)
    e = torch.tensor(np.stack([vectors[t] for t in tokens]), dtype=torch.float64)  # (T, d)
    x = e @ w["input.weight"].T + w["input.bias"] + paper_positions(T, d)  # (T, d)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1) if causal else None  # True = may not attend
    per_layer, outputs, stream = [], [], [x.clone()]
    for layer in range(config["layers"]):
        p = f"blocks.{layer}."
        mha = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64)
        mha.load_state_dict({"in_proj_weight": w[p + "attn.in_proj_weight"], "in_proj_bias": w[p + "attn.in_proj_bias"],
                             "out_proj.weight": w[p + "attn.out_proj.weight"], "out_proj.bias": w[p + "attn.out_proj.bias"]})
        a = F.layer_norm(x, (d,), w[p + "ln1.weight"], w[p + "ln1.bias"], eps)[None]  # (1, T, d)
        with torch.no_grad():
            out, weights = mha(a, a, a, attn_mask=future, need_weights=True, average_attn_weights=False)
        per_layer.append(weights[0].numpy())  # (h, T, T)
        outputs.append(out[0].numpy())  # (T, d)
        x = x + out[0]
        a = F.layer_norm(x, (d,), w[p + "ln2.weight"], w[p + "ln2.bias"], eps)
        x = x + F.gelu(a @ w[p + "mlp.0.weight"].T + w[p + "mlp.0.bias"], approximate="tanh") @ w[p + "mlp.2.weight"].T + w[p + "mlp.2.bias"]
        stream.append(x.clone())
    x = F.layer_norm(x, (d,), w["final_ln.weight"], w["final_ln.bias"], eps)
    logits = (x @ w["head.weight"].T + w["head.bias"]).numpy()  # (T, V_out)
    if everything:
        return per_layer, logits, outputs, torch.stack(stream).numpy()
    return per_layer, logits


def test_the_papers_positional_encoding_is_sin_on_even_and_cos_on_odd_columns():
    pe = paper_positions(3, 4).numpy()
    np.testing.assert_allclose(pe[0], [0, 1, 0, 1], atol=0)  # by hand: sin 0, cos 0
    np.testing.assert_allclose(pe[2], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)], atol=1e-15)
    f32_close(trained.sinusoidal_positions(50, 16), paper_positions(50, 16).numpy())  # float64 rounded once to float32


@pytest.mark.parametrize("layers,heads", [(1, 1), (2, 4), (3, 2)])
def test_the_numpy_lm_equals_a_torch_model_written_from_the_papers(layers, heads):
    make_random_attention("rand", layers=layers, heads=heads)
    config, weights, vectors = stored("rand")
    att = trained.load_trained("rand")
    peaks = []
    for sentence in SENTENCES:
        tokens = sentence.split()
        ref_weights, ref_logits = reference_forward(config, weights, vectors, tokens)
        traces = att.trace(tokens)
        assert len(traces) == layers
        for layer, (tr, ref) in enumerate(zip(traces, ref_weights)):
            assert tr.weights.shape == ref.shape == (heads, len(tokens), len(tokens))
            f32_close(tr.weights, ref, depth=layer + 1, length=widest(config), per_element=True)  # float32 vs float64
        peaks.append(ref_weights[0][:, -1].max(-1).mean())
        logits = att.logits(tokens)
        f32_close(logits, ref_logits, depth=layers + 1, length=widest(config))  # every layer and the unembedding
    assert 0.05 < np.mean(peaks) < 0.99  # the weights are neither uniform nor one-hot: the comparison means something
