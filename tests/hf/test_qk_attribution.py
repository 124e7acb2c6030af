"""attn qk: a head's score at (query, key) split into (query component) x (key component) parts.

The parts must add up to the model's own score (the trace's attn.scores), and differences of the
summed parts between two keys must equal transformers' own log-attention differences (float64
eager attention: log A[i, j] - log A[i, j'] = score(i, j) - score(i, j'), the softmax's row constant
cancels), an independent reference for the frozen norms, the weights' slices and RoPE.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed
from _tolerance import f32_atol, f32_size

needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _transformer_fixtures import build_bert, build_distilbert, build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.qk_attribution import qk_parts  # noqa: E402

TEXT = "the cat sat on the mat and the dog sat on the log"
EPS32 = 2.0 ** -23
BUILD = {"gpt2": build_gpt2, "bert": build_bert, "distilbert": build_distilbert}
DECODERS = ("llama3", "llama-bias", "qwen2", "gemma", "phi3", "mistral", "qwen3", "gemma3")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    @functools.cache
    def get(kind):
        d = tmp_path_factory.mktemp(kind)
        if kind in BUILD:  # every weight drawn (LayerNorm biases too, which start at 0): each part bites
            path = every_parameter_drawn(BUILD[kind](d / "base"), d / kind)
        else:
            path = build_decoder(kind, d / kind)
        return load(str(path), backend="numpy")
    return get


def _cells(model, enc):
    T = len(enc.ids)
    last = model.layers - 1
    # keys within 2 of the query: inside every fixture's sliding window (Mistral's 3, Qwen2's 4)
    cells = [(last, model.heads - 1, T - 1, T - 3), (last, 0, T - 2, T - 2), (0, 1 % model.heads, T - 1, T - 2)]
    windows = getattr(model.arch, "windows", None)  # the Llama family's per layer; None: no window
    if model.is_decoder and (windows is None or windows[last] is None):
        cells.append((last, 0, T - 1, 0))  # the first key, far back (where no sliding window hides it)
    if not model.is_decoder:
        cells += [(last, 0, 1, T - 1), (0, 1, T - 1, 0)]  # an encoder's query sees later keys too
    return cells



@pytest.mark.parametrize("kind", ["gpt2", "bert", "distilbert", *DECODERS])
def test_the_parts_add_up_to_the_models_score(models, kind):
    model = models(kind)
    enc = model.encode(TEXT)
    float32 = model.arch.w.dtype == np.float32
    for layer, head, i, j in _cells(model, enc):
        r = qk_parts(model, enc, layer, head, i, j)
        assert r.parts.shape == (len(r.labels), len(r.labels)) and r.labels[0] == "embed" and r.labels[-1] == "bias"
        # float32 passes: the score is a d_head-long dot product of values rounded through
        # 2 (layers + 1) float32 matrix products and norms; bound it by the magnitude of the parts
        scale = np.abs(r.parts).sum()
        tol = (64 * EPS32 * (model.layers + 1) * scale) if float32 else 1e-10 * max(1.0, scale)
        assert abs(r.total - r.score) <= tol, (kind, layer, head, i, j, r.total, r.score, tol)


def test_gemma3_heads_through_the_frozen_output_norm_leave_no_remainder(models):
    """Gemma 3 norms the attention's output before its residual add: each head's part goes through
    that norm frozen at the whole output's scale, so without an attention bias the heads' parts are
    all of attn.out (each layer's attn_bias part is 0) and still add up to the score."""
    model = models("gemma3")
    enc = model.encode(TEXT)
    T = len(enc.ids)
    r = qk_parts(model, enc, 1, 0, T - 1, T - 2)
    bias = [n for n, label in enumerate(r.labels) if label.endswith("attn_bias")]
    tol = f32_atol(np.abs(r.parts).max(), depth=model.layers + 1, length=f32_size(model.config)[1])
    assert bias and np.abs(r.parts[bias]).max() <= tol and np.abs(r.parts[:, bias]).max() <= tol
    assert abs(r.total - r.score) <= 64 * EPS32 * (model.layers + 1) * np.abs(r.parts).sum()


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama3", "qwen2", "phi3", "qwen3", "gemma3"])
def test_score_differences_equal_transformers_log_attention_differences(models, kind):
    """Independent of attn's pass: transformers' own model in float64, eager attention."""
    import torch
    import transformers

    model = models(kind)
    enc = model.encode(TEXT)
    ref = transformers.AutoModel.from_pretrained(str(model.path), attn_implementation="eager",
                                                 torch_dtype=torch.float64).eval()
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([enc.ids]), output_attentions=True)
    T = len(enc.ids)
    layer, head, i = model.layers - 1, model.heads - 1, T - 1
    keys = [T - 3, T - 2, T - 1]  # inside Qwen2's window
    log_a = torch.log(out.attentions[layer][0, head, i]).numpy()  # (T,)
    totals = [qk_parts(model, enc, layer, head, i, j).total for j in keys]
    float32 = model.arch.w.dtype == np.float32
    depth, length = f32_size(model)
    tol = f32_atol(1.0, depth=depth, length=length) if float32 else 1e-9  # float32: the scores' rounding through the layers
    for (a, total_a), (b, total_b) in zip(zip(keys, totals), zip(keys[1:], totals[1:])):
        want = log_a[a] - log_a[b]
        got = total_a - total_b
        assert abs(got - want) <= tol * max(1.0, abs(want)), (kind, a, b, got, want)


def test_on_the_induction_llama_the_key_side_is_carried_by_the_previous_token_head(tmp_path):
    """The induction head (layer 1 head 0) scores the key after the first copy of the query's token
    through K-composition: its key is the previous-token head's (layer 0 head 1) output."""
    from _llama_head_fixtures import build_head_llama

    model = load(str(build_head_llama(tmp_path / "llama")), backend="numpy")
    enc = model.encode("the quick brown fox jumps the quick brown")
    ids = enc.ids
    i = len(ids) - 1  # the second "brown" (the last token)
    first = ids.index(ids[i])  # the first "brown"
    assert first < i
    r = qk_parts(model, enc, 1, 0, i, first + 1)
    key_side = r.parts.sum(axis=0)  # (C,) each key-side component's share of the score
    prev = r.labels.index("L0.H1")
    assert r.score > 4 and key_side[prev] > 0.5 * r.score, (r.score, dict(zip(r.labels, key_side.round(3))))


def test_refusals_name_the_problem(models):
    model = models("gpt2")
    enc = model.encode(TEXT)
    T = len(enc.ids)
    with pytest.raises(BadInput, match="masked"):
        qk_parts(model, enc, 0, 0, 1, 3)  # a causal model's query sees no later key
    with pytest.raises(BadInput, match="out of range"):
        qk_parts(model, enc, 0, 0, T, 0)
    with pytest.raises(BadInput, match="head 99"):
        qk_parts(model, enc, 0, 99, 1, 0)
    mistral = models("mistral")  # sliding window 3: key 0 is outside it for query T - 1
    enc = mistral.encode(TEXT)
    with pytest.raises(BadInput, match="masked"):
        qk_parts(mistral, enc, 0, 0, len(enc.ids) - 1, 0)


def test_a_score_its_parts_cannot_add_up_to_is_refused(tmp_path):
    """Weights of 1e19 in c_attn: the float32 pass's score is rounding noise (its queries are sums
    of values near 1e19 that cancel) that no float64 split adds up to; refused, not shown."""
    from safetensors.numpy import load_file, save_file

    from attncli.errors import RuntimeFailure

    path = build_gpt2(tmp_path / "gpt2")
    weights = load_file(path / "model.safetensors")
    for name in weights:
        if "attn.c_attn.weight" in name:
            weights[name] = np.full(weights[name].shape, 1e19, np.float32)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    model = load(str(path), backend="numpy")
    enc = model.encode(TEXT)
    with pytest.raises(RuntimeFailure, match="the parts of the score do not add up to it"):
        qk_parts(model, enc, 1, 0, len(enc.ids) - 1, 2)
