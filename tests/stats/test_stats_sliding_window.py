"""``attn stats`` on decoders with a sliding window (Mistral on every layer, Qwen2 on the layers
from max_window_layers on): a query sees the keys less than W positions back, and its entropy is
normalised by the log of that number, min(i + 1, W), not log(i + 1). The reference is transformers'
own attentions (eager, output_attentions, float32 as the model is stored; transformers' rotary
angles are float32 even in a float64 model), counted query by query. The tolerance follows from
the documented bound on those weights (1e-5 of attn's float64 pass, tests/test_transformer_llama.py):
a change dp in a weight p moves -p log p by at most |1 + log p| dp."""

from __future__ import annotations

import numpy as np
import pytest

from _llama_fixtures import BASE, build_decoder
from _stats_helpers import cli, corpus_lines
from _tolerance import f32_atol
from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")
needed("safetensors")


# transformers' float32 attentions against attn's float64 pass, every weight: float32 rounding of the
# tiny model's layers and widest reduction (tests/_tolerance.py), at the weights' size 1
WEIGHTS_TOL = f32_atol(1.0, depth=BASE["num_hidden_layers"], length=max(BASE["hidden_size"], BASE["intermediate_size"]))


def reference_entropy(directory, texts, model):
    """(L, H) the mean entropy over the scored queries (non-special, at least two visible keys),
    from transformers' float32 attentions; the visible keys from the config's window per layer.
    Also the largest change of a query's entropy that WEIGHTS_TOL allows."""
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager",
                                                           dtype=torch.float32).eval()
    types = getattr(hf.config, "layer_types", None) or ["sliding_attention"] * hf.config.num_hidden_layers
    window = hf.config.sliding_window
    sums, count, bound = 0.0, 0, 0.0
    for text in texts:
        enc = model.encode(text, truncate=True)
        with torch.no_grad():
            out = hf(torch.tensor([enc.ids]), output_attentions=True)
        A = np.stack([a[0].double().numpy() for a in out.attentions])  # (L, H, T, T)
        for i in range(len(enc.ids)):
            if enc.special[i] or i < 1:
                continue
            ent = []
            for l, kind in enumerate(types):
                n = min(i + 1, window) if kind == "sliding_attention" else i + 1
                p = A[l, :, i, : i + 1]  # (H, i+1): the keys outside the window hold exactly 0
                ent.append(-np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0).sum(-1) / np.log(n))
                low = np.maximum(p - WEIGHTS_TOL, np.finfo(np.float64).tiny)  # |1 + log p| is largest at the low end
                bound = max(bound, float((np.abs(1 + np.log(low)) * (p > 0) * WEIGHTS_TOL).sum(-1).max() / np.log(n)))
            sums, count = sums + np.stack(ent), count + 1
    return sums / count, count, bound


@pytest.mark.parametrize("kind, overrides", [("mistral", {}), ("qwen2", {}), ("qwen3", {})])
def test_entropy_is_normalised_by_the_keys_the_window_lets_a_query_see(kind, overrides, tmp_path):
    from attncli.hf import load

    directory = build_decoder(kind, tmp_path / kind, **overrides)
    texts = corpus_lines(6, seed=2)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    model = load(str(directory), backend="numpy")
    assert len(model.encode(max(texts, key=len)).ids) > 6  # past every window (3, 4): the windows bite
    expect, count, bound = reference_entropy(directory, texts, model)
    doc = cli(["stats", corpus, "--transformer", directory, "--precision", "float64", "--json"])
    assert doc["stats"]["entropy"]["count"] == count
    assert bound < 0.01  # the test can tell log(i + 1) from log(W): they differ by more at these lengths
    np.testing.assert_allclose(np.asarray(doc["stats"]["entropy"]["mean"]), expect, rtol=0, atol=bound)
