"""DistilBERT's forward pass in NumPy, step for step as transformers' ``modeling_distilbert.py``.

    embeddings  x = LayerNorm(word_embeddings[ids] + position_embeddings[0..T-1])   (eps 1e-12)
                (sinusoidal_pos_embds models store their sines in position_embeddings too)
    per layer   q, k, v = q_lin(x), k_lin(x), v_lin(x)                   split into h heads
                A = softmax(q k^T / sqrt(d_head) + mask)                  (B, h, T, T)
                a = sa_layer_norm(out_lin(concat_heads(A v)) + x)
                x = output_layer_norm(ffn.lin2(act(ffn.lin1(a))) + a)
No token types, no pooler. Shapes: B texts, T tokens, d dim, h n_heads, d_head = d / h.
"""

from __future__ import annotations

import math

import numpy as np

from attncli.hf.kernels import ops
from attncli.hf.kernels.chunked_attention import Mask, attend
from attncli.hf.checks.config_defaults import field
from attncli.hf.families.bert import encoder_roles
from attncli.hf.families.parts import Parts, Tensor, shapes
from attncli.model.record import Recorder
from attncli.hf.formats.weights import Weights

MODEL_TYPES = {"distilbert"}
ANCHORS = ("embeddings.word_embeddings.weight",)
EPS = 1e-12  # fixed in modeling_distilbert.py


UNUSED_OK = ("embeddings.position_ids",)
OPTIONAL: set[str] = set()


def _roles(config: dict) -> dict[str, Tensor]:
    return encoder_roles("transformer.layer.{l}.", dict(
        q="attention.q_lin", k="attention.k_lin", v="attention.v_lin", o="attention.out_lin",
        n1="sa_layer_norm", n2="output_layer_norm", up="ffn.lin1", down="ffn.lin2"),
        field(config, "dim"), field(config, "hidden_dim"))


def parts(config: dict) -> Parts:
    """The description methods read: a LayerNorm (eps fixed) after each residual add, absolute positions."""
    heads, d = int(field(config, "n_heads")), int(field(config, "dim"))
    return Parts(layers=int(field(config, "n_layers")), heads=heads, kv_heads=heads, d_head=d // heads,
                 norm="layer", place="post", eps=EPS, roles=_roles(config))


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    """Every tensor this forward pass reads, with the shape config.json implies."""
    d = field(config, "dim")
    return {
        "embeddings.word_embeddings.weight": (field(config, "vocab_size"), d),
        "embeddings.position_embeddings.weight": (field(config, "max_position_embeddings"), d),
        "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,),
        **shapes(_roles(config), int(field(config, "n_layers"))),
    }


def unsupported(config: dict) -> str | None:
    if field(config, "activation") not in ops.ACTIVATIONS:
        return f"activation '{field(config, 'activation')}'"
    if field(config, "dim") % field(config, "n_heads") or field(config, "n_layers") < 1:
        return "dim not a multiple of n_heads"
    return None


class DistilBert:
    causal = False

    def __init__(self, weights: Weights, config: dict):
        self.w = weights
        self.layers = int(field(config, "n_layers"))
        self.heads = int(field(config, "n_heads"))
        self.d = int(field(config, "dim"))
        self.d_head = self.d // self.heads
        self.act = ops.ACTIVATIONS[field(config, "activation")]
        self.parts = parts(config)

    def tensor(self, name: str) -> np.ndarray:
        return self.w.get(name)

    def scale(self, layer: int) -> float:
        return 1.0 / math.sqrt(self.d_head)

    def embeddings(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        x = w.rows("embeddings.word_embeddings.weight", ids)  # (B, T, d)
        x = x + w.get("embeddings.position_embeddings.weight")[: ids.shape[1]][None]  # (B, T, d)
        return ops.layer_norm(x, w.get("embeddings.LayerNorm.weight"), w.get("embeddings.LayerNorm.bias"), EPS)

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder) -> np.ndarray:
        """One TransformerBlock: x (B, T, d) -> the new x (B, T, d), its sites recorded by ``rec``."""
        w = self.w
        p = f"transformer.layer.{l}."
        q = ops.split_heads(ops.linear(x, w.get(p + "attention.q_lin.weight"), w.get(p + "attention.q_lin.bias")), self.heads)
        k = ops.split_heads(ops.linear(x, w.get(p + "attention.k_lin.weight"), w.get(p + "attention.k_lin.bias")), self.heads)
        v = ops.split_heads(ops.linear(x, w.get(p + "attention.v_lin.weight"), w.get(p + "attention.v_lin.bias")), self.heads)
        z = attend(rec, l, q, k, v, self.scale(l), mask)  # (B, T, h d_head)
        sa = rec("attn.out", l, ops.linear(z, w.get(p + "attention.out_lin.weight"), w.get(p + "attention.out_lin.bias")))
        a = rec("resid_mid", l, ops.layer_norm(sa + x, w.get(p + "sa_layer_norm.weight"), w.get(p + "sa_layer_norm.bias"), EPS))
        inner = self.act(ops.linear(a, w.get(p + "ffn.lin1.weight"), w.get(p + "ffn.lin1.bias")))  # (B, T, hidden_dim)
        ffn = rec("mlp.out", l, ops.linear(inner, w.get(p + "ffn.lin2.weight"), w.get(p + "ffn.lin2.bias")))  # (B, T, d)
        return ops.layer_norm(ffn + a, w.get(p + "output_layer_norm.weight"), w.get(p + "output_layer_norm.bias"), EPS)

    def output_weight(self, l: int) -> np.ndarray:
        """W_O (d, d) as x @ W_O (rows h*d_head..(h+1)*d_head belong to head h): attention.out_lin."""
        return self.w.get(f"transformer.layer.{l}.attention.out_lin.weight").T  # stored (out, in)

    def final(self, x: np.ndarray) -> np.ndarray:
        return x
