"""MPNet's forward pass in NumPy (all-mpnet-base-v2), step for step as transformers' ``modeling_mpnet.py``.

    embeddings  x = LayerNorm(word[ids] + position[pos])    pos = padding_idx + 1 + running count
                                                            of real tokens (padding_idx 1, as RoBERTa)
    bias        B[h, i, j] = relative_attention_bias[bucket(j - i), h]      (1, h, T, T), all layers
                bucket: T5's bidirectional buckets, 32 of them, exact below 8, log-spaced to 128
    per layer   q, k, v = attn.q(x), attn.k(x), attn.v(x)                   split into h heads
                A = softmax(q k^T / sqrt(d_head) + B + mask)                  (B, h, T, T)
                x = LayerNorm(x + attn.o(concat_heads(A v)))                  attention.LayerNorm
                x = LayerNorm(x + output.dense(act(intermediate.dense(x))))   output.LayerNorm
No token types, no pooler. Shapes: B texts, T tokens, d hidden_size, h heads, d_head = d / h.
Because of the bias, softmax(q k^T * scale) alone is not the attention: ``qk`` is refused.
"""

from __future__ import annotations

import math

import numpy as np

from attncli.hf.kernels import ops
from attncli.hf.kernels.chunked_attention import Mask, attend
from attncli.model.record import Recorder
from attncli.hf.families.bert import PostNormEncoder, encoder_roles
from attncli.hf.families.parts import Parts, Tensor, shapes
from attncli.hf.checks.config_defaults import field
from attncli.hf.formats.weights import Weights

MODEL_TYPES = {"mpnet"}
ANCHORS = ("embeddings.word_embeddings.weight",)
PADDING_IDX = 1  # fixed in modeling_mpnet.py
BUCKETS, MAX_DISTANCE = 32, 128  # compute_position_bias's defaults (the config's count sizes the table only)


UNUSED_OK = ("pooler.", "embeddings.position_ids")  # the pooler is never used; position_ids: a buffer older checkpoints carry
OPTIONAL: set[str] = set()


def _roles(config: dict) -> dict[str, Tensor]:
    return encoder_roles("encoder.layer.{l}.", dict(
        q="attention.attn.q", k="attention.attn.k", v="attention.attn.v", o="attention.attn.o",
        n1="attention.LayerNorm", n2="output.LayerNorm", up="intermediate.dense", down="output.dense"),
        int(field(config, "hidden_size")), int(field(config, "intermediate_size")))


def parts(config: dict) -> Parts:
    """The description methods read: a LayerNorm after each residual add, a relative position bias."""
    heads, d = int(field(config, "num_attention_heads")), int(field(config, "hidden_size"))
    return Parts(layers=int(field(config, "num_hidden_layers")), heads=heads, kv_heads=heads, d_head=d // heads,
                 norm="layer", place="post", eps=float(field(config, "layer_norm_eps")), roles=_roles(config),
                 position="relative")


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    """Every tensor this forward pass reads (the base model's names), with the shape config.json
    implies: weight_check.check_weight_names reports a missing or unused one."""
    d = int(field(config, "hidden_size"))
    return {
        "embeddings.word_embeddings.weight": (field(config, "vocab_size"), d),
        "embeddings.position_embeddings.weight": (field(config, "max_position_embeddings"), d),
        "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,),
        "encoder.relative_attention_bias.weight": (field(config, "relative_attention_num_buckets"),
                                                   int(field(config, "num_attention_heads"))),
        **shapes(_roles(config), int(field(config, "num_hidden_layers"))),
    }


def unsupported(config: dict) -> str | None:
    if field(config, "hidden_act") not in ops.ACTIVATIONS:
        return f"hidden_act '{field(config, 'hidden_act')}'"
    if field(config, "hidden_size") % field(config, "num_attention_heads"):
        return "hidden_size not a multiple of num_attention_heads"
    return None


def relative_position_bucket(relative: np.ndarray) -> np.ndarray:
    """T5's bidirectional bucket of each key-minus-query offset (int64, in 0..BUCKETS-1)."""
    n = -relative
    half = BUCKETS // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(np.maximum(n, 1).astype(np.float32) / max_exact)
                             / math.log(MAX_DISTANCE / max_exact) * (half - max_exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return ret + np.where(n < max_exact, n, large)


class MPNet(PostNormEncoder):
    def __init__(self, weights: Weights, config: dict):
        super().__init__(weights, config)
        self.parts = parts(config)  # position "relative": its queries and keys alone are not its attention
        self._bias: np.ndarray | None = None

    def embeddings(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        real = (ids != PADDING_IDX).astype(np.int64)  # (B, T)
        positions = np.cumsum(real, axis=1) * real + PADDING_IDX  # (B, T)
        x = w.rows("embeddings.word_embeddings.weight", ids) + w.get("embeddings.position_embeddings.weight")[positions]
        self._bias = self.position_bias_of(ids.shape[1])  # the same for every layer of this pass
        return ops.layer_norm(x, w.get("embeddings.LayerNorm.weight"), w.get("embeddings.LayerNorm.bias"), self.eps)

    def position_bias_of(self, T: int) -> np.ndarray:
        """(1, h, T, T): the relative position bias added to every layer's scores."""
        relative = np.arange(T)[None, :] - np.arange(T)[:, None]  # (T, T): key - query
        table = self.w.get("encoder.relative_attention_bias.weight")  # (buckets, h)
        return table[relative_position_bucket(relative)].transpose(2, 0, 1)[None]  # (1, h, T, T)

    def _linear(self, name: str, x: np.ndarray) -> np.ndarray:
        return ops.linear(x, self.w.get(name + ".weight"), self.w.get(name + ".bias"))

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder) -> np.ndarray:
        """One MPNetLayer: x (B, T, d) -> the new x (B, T, d), its sites recorded by ``rec``."""
        p = f"encoder.layer.{l}."
        q, k, v = (ops.split_heads(self._linear(p + f"attention.attn.{n}", x), self.heads) for n in "qkv")
        z = attend(rec, l, q, k, v, self.scale(l), mask, bias=self._bias)  # (B, T, h d_head)
        attn_out = rec("attn.out", l, self._linear(p + "attention.attn.o", z))  # (B, T, d)
        x = rec("resid_mid", l, ops.layer_norm(attn_out + x, self.w.get(p + "attention.LayerNorm.weight"),
                                               self.w.get(p + "attention.LayerNorm.bias"), self.eps))
        inner = self.act(self._linear(p + "intermediate.dense", x))  # (B, T, i)
        out = rec("mlp.out", l, self._linear(p + "output.dense", inner))  # (B, T, d)
        return ops.layer_norm(out + x, self.w.get(p + "output.LayerNorm.weight"),
                              self.w.get(p + "output.LayerNorm.bias"), self.eps)

    def output_weight(self, l: int) -> np.ndarray:
        """W_O (d, d) as x @ W_O (rows h*d_head..(h+1)*d_head belong to head h): attention.attn.o, stored (out, in)."""
        return self.w.get(f"encoder.layer.{l}.attention.attn.o.weight").T

    def final(self, x: np.ndarray) -> np.ndarray:
        return x
