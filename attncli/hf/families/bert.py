"""The BERT family's forward pass in NumPy, step for step as transformers' ``modeling_bert.py``
(and ``modeling_roberta.py``, ``modeling_electra.py``, which share its encoder).

    embeddings  x = LayerNorm(word[ids] + position[pos] + token_type[type_ids])
                    pos = 0..T-1 for BERT / ELECTRA; padding_idx+1.. for RoBERTa (fairseq's make_positions)
                ELECTRA: x = embeddings_project(x) when embedding_size != hidden_size
    per layer   q, k, v = query(x), key(x), value(x)                split into h heads
                A = softmax(q k^T / sqrt(d_head) + mask)               (B, h, T, T): the attentions
                x = LayerNorm(x + output.dense(concat_heads(A v)))     attention.output
                x = LayerNorm(x + output.dense(act(intermediate.dense(x))))
    the last hidden state is x after the last layer (no pooler).

Shapes: B texts, T tokens, d hidden_size, h heads, d_head = d / h.
"""

from __future__ import annotations

import math

import numpy as np

from attncli.hf.kernels import ops
from attncli.hf.kernels.chunked_attention import Mask, attend
from attncli.hf.checks.config_defaults import field
from attncli.hf.families.parts import Parts, Tensor, shapes
from attncli.model.record import Recorder
from attncli.hf.formats.weights import Weights

ROBERTA_TYPES = {"roberta", "xlm-roberta", "camembert"}
MODEL_TYPES = {"bert", "electra"} | ROBERTA_TYPES
ANCHORS = ("embeddings.word_embeddings.weight",)


# in the base model but never read by this forward pass, and harmless: the pooler (attn reads the
# last hidden state), the position_ids buffer some older checkpoints saved
UNUSED_OK = ("pooler.", "embeddings.position_ids")
OPTIONAL = {"embeddings.token_type_embeddings.weight", "embeddings_project.weight", "embeddings_project.bias"}


def encoder_roles(p: str, names: dict[str, str], d: int, inner: int) -> dict[str, Tensor]:
    """A post-LN encoder's layer tensors by role (families/parts.py), every one with its bias: the
    Linear projections q, k, v, o (d, d), up (inner, d), down (d, inner); the LayerNorms n1, n2 (d,)."""
    shape = dict(q=(d, d), k=(d, d), v=(d, d), o=(d, d), n1=(d,), n2=(d,), up=(inner, d), down=(d, inner))
    return {role: Tensor(p + name, shape[role], True) for role, name in names.items()}


def _roles(config: dict) -> dict[str, Tensor]:
    return encoder_roles("encoder.layer.{l}.", dict(
        q="attention.self.query", k="attention.self.key", v="attention.self.value", o="attention.output.dense",
        n1="attention.output.LayerNorm", n2="output.LayerNorm", up="intermediate.dense", down="output.dense"),
        field(config, "hidden_size"), field(config, "intermediate_size"))


def parts(config: dict) -> Parts:
    """The description methods read: a LayerNorm after each residual add, learned absolute positions."""
    heads, d = int(field(config, "num_attention_heads")), int(field(config, "hidden_size"))
    return Parts(layers=int(field(config, "num_hidden_layers")), heads=heads, kv_heads=heads, d_head=d // heads,
                 norm="layer", place="post", eps=float(field(config, "layer_norm_eps")), roles=_roles(config))


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    """Every tensor this forward pass reads, with the shape config.json implies (None: a size the
    config does not state)."""
    d = field(config, "hidden_size")
    e = field(config, "embedding_size") if config["model_type"] == "electra" else d
    return {
        "embeddings.word_embeddings.weight": (field(config, "vocab_size"), e),
        "embeddings.position_embeddings.weight": (field(config, "max_position_embeddings"), e),
        "embeddings.token_type_embeddings.weight": (field(config, "type_vocab_size"), e),
        "embeddings.LayerNorm.weight": (e,), "embeddings.LayerNorm.bias": (e,),
        "embeddings_project.weight": (d, e), "embeddings_project.bias": (d,),
        **shapes(_roles(config), int(field(config, "num_hidden_layers"))),
    }


def not_in_transformers(config: dict) -> str | None:
    """What a BERT-family config asks for that transformers 5 dropped too (relative position
    embeddings: its BertModel loads such a checkpoint without its distance_embedding weights)."""
    if config.get("model_type") not in MODEL_TYPES:
        return None
    kind = config.get("position_embedding_type", "absolute")
    return None if kind in ("absolute", None) else f"position_embedding_type '{kind}'"


def unsupported(config: dict) -> str | None:
    """Why this config's model is beyond this forward pass, or None."""
    if config.get("position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type '{config['position_embedding_type']}'"
    if field(config, "is_decoder") or field(config, "add_cross_attention"):
        return "a BERT-family decoder (is_decoder / cross-attention)"
    if field(config, "hidden_act") not in ops.ACTIVATIONS:
        return f"hidden_act '{field(config, 'hidden_act')}'"
    if field(config, "hidden_size") % field(config, "num_attention_heads") or field(config, "num_hidden_layers") < 1:
        return "hidden_size not a multiple of num_attention_heads"
    return None


class PostNormEncoder:
    """What a BERT-like post-LayerNorm encoder (BERT's family, MPNet) reads of its config: sizes,
    LayerNorm epsilon, activation; and the 1/sqrt(d_head) attention scale."""

    causal = False

    def __init__(self, weights: Weights, config: dict):
        self.w = weights
        self.config = config
        self.layers = int(field(config, "num_hidden_layers"))
        self.heads = int(field(config, "num_attention_heads"))
        self.d = int(field(config, "hidden_size"))
        self.d_head = self.d // self.heads
        self.eps = float(field(config, "layer_norm_eps"))
        self.act = ops.ACTIVATIONS[field(config, "hidden_act")]

    def tensor(self, name: str) -> np.ndarray:
        return self.w.get(name)

    def scale(self, layer: int) -> float:
        return 1.0 / math.sqrt(self.d_head)


class BertFamily(PostNormEncoder):
    """BertModel / RobertaModel / ElectraModel (the discriminator's encoder)."""

    def __init__(self, weights: Weights, config: dict):
        super().__init__(weights, config)
        self.parts = parts(config)
        self.roberta = config["model_type"] in ROBERTA_TYPES
        pad = field(config, "pad_token_id")  # RoBERTa's default: fairseq's <pad>, 1
        self.padding_idx = (1 if pad is None else int(pad)) if self.roberta else 0
        self.project = "embeddings_project.weight" in weights

    def position_ids(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(B, T): 0..T-1, or RoBERTa's padding_idx + 1 + running count of real (non-pad) tokens."""
        if not self.roberta:
            return np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        real = (ids != self.padding_idx).astype(np.int64)  # (B, T)
        return np.cumsum(real, axis=1) * real + self.padding_idx

    def embeddings(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        x = w.rows("embeddings.word_embeddings.weight", ids)  # (B, T, e)
        if "embeddings.token_type_embeddings.weight" in w:
            x = x + w.get("embeddings.token_type_embeddings.weight")[type_ids]  # (B, T, e)
        x = x + w.get("embeddings.position_embeddings.weight")[self.position_ids(ids, mask)]  # (B, T, e)
        x = ops.layer_norm(x, w.get("embeddings.LayerNorm.weight"), w.get("embeddings.LayerNorm.bias"), self.eps)
        if self.project:  # ELECTRA with embedding_size != hidden_size
            x = ops.linear(x, w.get("embeddings_project.weight"), w.get("embeddings_project.bias"))  # (B, T, d)
        return x

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder) -> np.ndarray:
        """One BertLayer: x (B, T, d) -> the new x (B, T, d), its sites recorded by ``rec``."""
        w = self.w
        p = f"encoder.layer.{l}."
        q = ops.split_heads(ops.linear(x, w.get(p + "attention.self.query.weight"), w.get(p + "attention.self.query.bias")), self.heads)
        k = ops.split_heads(ops.linear(x, w.get(p + "attention.self.key.weight"), w.get(p + "attention.self.key.bias")), self.heads)
        v = ops.split_heads(ops.linear(x, w.get(p + "attention.self.value.weight"), w.get(p + "attention.self.value.bias")), self.heads)
        z = attend(rec, l, q, k, v, self.scale(l), mask)  # (B, T, h d_head)
        attn_out = rec("attn.out", l, ops.linear(z, w.get(p + "attention.output.dense.weight"),
                                                 w.get(p + "attention.output.dense.bias")))  # (B, T, d)
        x = rec("resid_mid", l, ops.layer_norm(attn_out + x, w.get(p + "attention.output.LayerNorm.weight"),
                                               w.get(p + "attention.output.LayerNorm.bias"), self.eps))
        inner = self.act(ops.linear(x, w.get(p + "intermediate.dense.weight"), w.get(p + "intermediate.dense.bias")))  # (B, T, 4d)
        out = rec("mlp.out", l, ops.linear(inner, w.get(p + "output.dense.weight"), w.get(p + "output.dense.bias")))  # (B, T, d)
        return ops.layer_norm(out + x, w.get(p + "output.LayerNorm.weight"), w.get(p + "output.LayerNorm.bias"), self.eps)

    def output_weight(self, l: int) -> np.ndarray:
        """W_O (d, d) as x @ W_O (rows h*d_head..(h+1)*d_head belong to head h): attention.output.dense."""
        return self.w.get(f"encoder.layer.{l}.attention.output.dense.weight").T  # stored (out, in)

    def final(self, x: np.ndarray) -> np.ndarray:
        return x
