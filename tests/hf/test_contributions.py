"""ALTI, GlobEnc and value zeroing (attncli/hf/methods/contributions.py) against references written here from
the papers' formulas on transformers' own modules in float64 (not from attn's pass), and value
zeroing against a brute-force transformers run with a hook that zeroes one token's values."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed
from _tolerance import f32_close, f32_size

torch = needed("torch")
transformers = needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder, build_mpnet  # noqa: E402
from _transformer_fixtures import build_bert, build_distilbert, build_gpt2, every_parameter_drawn  # noqa: E402

BUILD = {"bert": build_bert, "gpt2": build_gpt2, "distilbert": build_distilbert, "mpnet": build_mpnet}

from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.contributions import METHODS, contributions, rolled_out  # noqa: E402

TEXT = "the cat sat on the mat and the dog"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    @functools.cache
    def get(kind):
        d = tmp_path_factory.mktemp(kind)
        if kind in ("llama3", "qwen3", "gemma3"):
            path = build_decoder(kind, d / kind)
        else:  # every weight drawn, LayerNorm biases and gains too: each term of the formulas bites
            path = every_parameter_drawn(BUILD[kind](d / "base"), d / kind)
        model = load(str(path), backend="numpy")
        ref = transformers.AutoModel.from_pretrained(str(path), attn_implementation="eager",
                                                     dtype=torch.float64).eval()
        return model, ref
    return get


def _run(ref, ids):
    with torch.no_grad():
        return ref(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)


def _ln_linear(u, ln):
    """LayerNorm ln's linear part frozen at u (T, d): w -> (w - mean w) / s_i * gamma, applied on the last axis."""
    s = torch.sqrt(u.var(dim=-1, unbiased=False) + ln.eps)  # (T,)
    return lambda w: (w - w.mean(dim=-1, keepdim=True)) / s.view(-1, *([1] * (w.dim() - 1))) * ln.weight


def reference_pieces(kind, ref, ids, l):
    """From transformers' modules: (T_i(x_j) (T, T, d), y (T, d), the second LayerNorm's linear part or None)."""
    out = _run(ref, ids)
    x = out.hidden_states[l][0]  # (T, d) the layer's input
    A = out.attentions[l][0]  # (h, T, T)
    T, d = x.shape
    h = A.shape[0]
    if kind == "bert":
        layer = ref.encoder.layer[l]
        sa, so = layer.attention.self, layer.attention.output
        v = (x @ sa.value.weight.T + sa.value.bias).view(T, h, d // h)  # (T, h, dh)
        W_O = so.dense.weight.T.view(h, d // h, d)  # (h, dh, d)
        f = torch.einsum("jhk,hkd->hjd", v, W_O)  # (h, T, d) Kobayashi's f^h(x_j)
        u = x + torch.einsum("hij,hjd->id", A, f) + so.dense.bias  # LN1's input
        mixed = torch.einsum("hij,hjd->ijd", A, f) + torch.diag_embed(torch.ones(T, dtype=x.dtype))[..., None] * x[:, None]
        L1 = _ln_linear(u, so.LayerNorm)
        y = so.LayerNorm(u)
        mid = y
        ffn = layer.output.dense(layer.intermediate(mid))
        L2 = _ln_linear(ffn + mid, layer.output.LayerNorm)
        return L1(mixed), y, L2
    if kind == "gemma3":  # the attention's output o normed before its residual add: frozen at each query's o_i
        block = ref.layers[l]
        sa, kv = block.self_attn, ref.config.num_key_value_heads
        dh = ref.config.head_dim
        v = sa.v_proj(block.input_layernorm(x)).view(T, kv, dh).repeat_interleave(h // kv, dim=1)  # (T, h, dh)
        f = torch.einsum("jhk,hkd->hjd", v, sa.o_proj.weight.T.reshape(h, dh, d))  # (h, T, d)
        o = torch.einsum("hij,hjd->id", A, f)  # (T, d)
        norm = block.post_attention_layernorm
        scale = (1.0 + norm.weight) / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + norm.eps)  # (T, d): N_i's
        mixed = torch.einsum("hij,hjd->ijd", A, f) * scale[:, None] + \
            torch.diag_embed(torch.ones(T, dtype=x.dtype))[..., None] * x[:, None]
        return mixed, x + norm(o), None
    block = ref.h[l]
    a = block.ln_1(x)
    v = (a @ block.attn.c_attn.weight + block.attn.c_attn.bias)[:, 2 * d:].view(T, h, d // h)  # Conv1D: (in, out)
    W_O = block.attn.c_proj.weight.view(h, d // h, d)
    f = torch.einsum("jhk,hkd->hjd", v, W_O)
    mixed = torch.einsum("hij,hjd->ijd", A, f) + torch.diag_embed(torch.ones(T, dtype=x.dtype))[..., None] * x[:, None]
    y = x + torch.einsum("hij,hjd->id", A, f) + block.attn.c_proj.bias
    return mixed, y, None


@torch.no_grad()
def reference(kind, method, ref, ids, l):
    mixed, y, L2 = reference_pieces(kind, ref, ids, l)
    if method == "alti":  # Ferrando et al. 2022, eq. 7-8
        c = (y.abs().sum(-1)[:, None] - (y[:, None] - mixed).abs().sum(-1)).clamp(min=0)
    else:  # GlobEnc: ||LN2(LN1(...))|| with the FFN left out (Modarressi et al. 2022, eq. 6)
        c = (L2(mixed) if L2 is not None else mixed).norm(dim=-1)
    return (c / c.sum(-1, keepdim=True)).numpy()


@pytest.mark.parametrize("kind", ["bert", "gpt2", "gemma3"])
@pytest.mark.parametrize("method", ["alti", "globenc"])
def test_alti_and_globenc_equal_the_papers_formulas(built, kind, method):
    model, ref = built(kind)
    enc = model.encode(TEXT)
    ours = contributions(model, enc, method)  # (L, T, T)
    for l in range(model.layers):
        want = reference(kind, method, ref, enc.ids, l)
        if model.arch.w.dtype == np.float32:  # a float32 pass (Gemma 3) against the float64 reference
            f32_close(ours[l], want, *f32_size(model))
        else:
            np.testing.assert_allclose(ours[l], want, rtol=0, atol=1e-12)  # both float64
        np.testing.assert_allclose(ours[l].sum(-1), 1.0, atol=1e-12)
    if model.is_decoder:  # a query takes nothing from a later key
        assert np.all(np.triu(ours, 1) == 0)


def _zeroing_hook(kind, ref, l, j):
    """A hook on transformers' model zeroing token j's values in every head of layer l."""
    if kind in ("bert", "distilbert", "mpnet"):
        module = {"bert": lambda: ref.encoder.layer[l].attention.self.value,
                  "distilbert": lambda: ref.transformer.layer[l].attention.v_lin,
                  "mpnet": lambda: ref.encoder.layer[l].attention.attn.v}[kind]()
        def hook(m, args, out):
            out = out.clone()
            out[:, j] = 0
            return out
    elif kind == "gpt2":
        module, d = ref.h[l].attn.c_attn, ref.config.n_embd
        def hook(m, args, out):
            out = out.clone()
            out[:, j, 2 * d:] = 0
            return out
    else:
        module = ref.layers[l].self_attn.v_proj
        def hook(m, args, out):
            out = out.clone()
            out[:, j] = 0
            return out
    return module.register_forward_hook(hook)


def _layer_output(kind, ref, ids, l):
    """(T, d) layer l's output as transformers' own block returns it (hidden_states' last entry is
    after the final norm in GPT-2 and Llama, so the block is hooked instead)."""
    block = {"bert": lambda: ref.encoder.layer[l], "mpnet": lambda: ref.encoder.layer[l], "gpt2": lambda: ref.h[l],
             "distilbert": lambda: ref.transformer.layer[l]}.get(kind, lambda: ref.layers[l])()
    seen = []
    handle = block.register_forward_hook(lambda m, args, out: seen.append(out[0] if isinstance(out, tuple) else out))
    try:
        _run(ref, ids)
    finally:
        handle.remove()
    return seen[0][0]


@pytest.mark.parametrize("kind", ["bert", "distilbert", "mpnet", "gpt2", "llama3", "qwen3", "gemma3"])
def test_value_zeroing_equals_a_brute_force_transformers_run(built, kind):
    model, ref = built(kind)
    enc = model.encode(TEXT)
    ours = contributions(model, enc, "value-zeroing")
    T = len(enc.ids)
    for l in range(model.layers):
        clean = _layer_output(kind, ref, enc.ids, l)  # (T, d)
        d = np.zeros((T, T))
        for j in range(T):
            handle = _zeroing_hook(kind, ref, l, j)
            try:
                zeroed = _layer_output(kind, ref, enc.ids, l)
            finally:
                handle.remove()
            d[:, j] = (1 - torch.nn.functional.cosine_similarity(zeroed, clean, dim=-1)).numpy()
        want = d / d.sum(-1, keepdims=True)
        if model.arch.w.dtype == np.float32:  # a float32 Llama against the float64 reference
            f32_close(ours[l], want, *f32_size(model))
        else:
            np.testing.assert_allclose(ours[l], want, rtol=0, atol=1e-12)  # both float64


def test_rollout_multiplies_the_layers_and_rows_stay_stochastic(built):
    model, _ = built("bert")
    enc = model.encode(TEXT)
    per = contributions(model, enc, "alti")
    R = rolled_out(per)
    np.testing.assert_allclose(R, per[1] @ per[0], atol=1e-12)
    np.testing.assert_allclose(R.sum(-1), 1.0, atol=1e-12)


def test_refusals(built):
    model, _ = built("bert")
    with pytest.raises(BadInput, match="no contribution method"):
        contributions(model, model.encode(TEXT), "attention-flow")
    assert METHODS == ("alti", "globenc", "value-zeroing")
