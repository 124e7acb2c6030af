"""``--show norms`` on the Llama family (grouped-query attention) and MPNet (issue 23).

The reference is computed here from transformers' own modules, as in tests/attention/test_value_norms.py:
a forward hook on the value projection (v_proj; Phi-3's fused qkv_proj, split; MPNet's attn.v)
gives v, each query head h reads its key-value group's v (group h // (h / h_kv), spelled out
below, not transformers' repeat_kv), f^h(x_j) = v^{g(h)}_j W_O^h with W_O^h head h's columns of
o_proj's stored (d, h d_head) weight; alpha from ``output_attentions``. attn's NumPy pass must
equal it to 1e-5. Tiny random models from tests/_llama_fixtures.py: Llama (4 query heads, 2
key-value heads), Qwen2 (v bias), Gemma (1 key-value head, head_dim 12 apart from hidden / heads),
Phi-3 (fused q | k | v) and MPNet (relative position bias, which the value vectors do not see).
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
torch = needed("torch")
transformers = needed("transformers")

from typer.testing import CliRunner  # noqa: E402

from _llama_fixtures import build_decoder, build_mpnet  # noqa: E402
from _tolerance import f32_close  # noqa: E402

from attncli.cli.main import app  # noqa: E402
from attncli.hf import load  # noqa: E402

torch.set_num_threads(1)
SENTENCE = "the cat sat on the mat and the dog sat on the log"
KINDS = ("llama", "qwen2", "gemma", "phi3", "mpnet", "qwen3")


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("norms-models")

    @functools.lru_cache(maxsize=None)
    def build(kind: str):
        return build_mpnet(base / kind) if kind == "mpnet" else build_decoder(kind, base / kind)

    return build


@functools.lru_cache(maxsize=None)
def reference(path: str, ids: tuple[int, ...]):
    """Per layer: alpha (h, T, T) and f (h, T, d), float64, from transformers' own modules."""
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    cfg = model.config
    mpnet = cfg.model_type == "mpnet"
    h = cfg.num_attention_heads
    kv = h if mpnet else cfg.num_key_value_heads
    d_head = cfg.hidden_size // h if mpnet else getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    v_name = ("encoder.layer.{l}.attention.attn.v" if mpnet else
              "layers.{l}.self_attn.qkv_proj" if cfg.model_type == "phi3" else "layers.{l}.self_attn.v_proj")
    o_name = "encoder.layer.{l}.attention.attn.o" if mpnet else "layers.{l}.self_attn.o_proj"
    modules = dict(model.named_modules())
    seen = {}
    hooks = [modules[v_name.format(l=l)].register_forward_hook(
        lambda m, a, out, l=l: seen.__setitem__(l, out[0].detach().double()))
        for l in range(cfg.num_hidden_layers)]
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    for hook in hooks:
        hook.remove()
    layers = []
    for l in range(cfg.num_hidden_layers):
        v = seen[l]  # (T, h_kv d_head), or Phi-3's (T, (h + 2 h_kv) d_head)
        if cfg.model_type == "phi3":
            v = v[:, (h + kv) * d_head:]
        T = v.shape[0]
        v = v.reshape(T, kv, d_head)  # (T, h_kv, d_head)
        w = modules[o_name.format(l=l)].weight.detach().double()  # (d, h d_head), nn.Linear's (out, in)
        f = torch.stack([v[:, hd // (h // kv)] @ w[:, hd * d_head:(hd + 1) * d_head].T for hd in range(h)])  # (h, T, d)
        layers.append((out.attentions[l][0].double().numpy(), f.numpy()))
    return layers


def ref_norms(alpha, f):
    """Independent of attncli.attention.value_norms: per head alpha ||f||, the layer's norm of the sum."""
    per_head = alpha * np.sqrt((f ** 2).sum(-1))[:, None, :]  # (h, T, S)
    summed = np.sqrt((np.einsum("hij,hjd->ijd", alpha, f) ** 2).sum(-1))  # (T, S)
    return per_head, summed


@pytest.mark.parametrize("kind", KINDS)
def test_value_vectors_equal_transformers_own(kind, models):
    path = models(kind)
    model = load(str(path), backend="numpy")
    enc = model.encode(SENTENCE)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    assert enc.ids == tok(SENTENCE)["input_ids"]
    for l, (alpha, f) in enumerate(reference(str(path), tuple(enc.ids))):
        weights, fx = model.value_vectors(enc, l)
        assert fx.shape == f.shape and fx.dtype == np.float64
        f32_close(weights, alpha, depth=l + 1, length=37, per_element=True)  # transformers' float32 (MLP 37 wide)
        f32_close(fx, f, depth=l + 1, length=37)
    assert np.abs(f).max() > 0.1  # vectors that would show a wrong group or slice


@pytest.mark.parametrize("kind", ["llama", "mpnet"])
def test_show_norms_json(kind, models):
    path = models(kind)
    ids = tuple(load(str(path), backend="numpy").encode(SENTENCE).ids)
    alpha, f = reference(str(path), ids)[1]
    per_head, summed = ref_norms(alpha, f)
    result = CliRunner().invoke(app, ["matrix", SENTENCE, "--transformer", str(path), "--json",
                                      "--layer", "1", "--show", "norms"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["show"] == "norms" and doc["backend"] == "numpy"
    f32_close(np.array(doc["head_weights"]), per_head, depth=2, length=37, printed=5e-6 * np.abs(per_head).max())
    f32_close(np.array(doc["weights"]), summed, depth=2, length=37, printed=5e-6 * np.abs(summed).max())
    assert not np.allclose(summed, per_head.mean(axis=0), atol=1e-3)  # fixed: the layer's is not the heads' mean (far apart)
