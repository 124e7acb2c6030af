"""GPT-2's forward pass in NumPy, step for step as transformers' ``modeling_gpt2.py``.

    embeddings  x = wte[ids] + wpe[0..T-1]
    per block   a = ln_1(x)
                q, k, v = c_attn(a).split(d)      Conv1D: a W + b, W stored (in, out)
                A = softmax(q k^T * scaling + causal mask)     (B, h, T, T)
                scaling = 1/sqrt(d_head) if scale_attn_weights, / (layer+1) if scale_attn_by_inverse_layer_idx
                x = x + c_proj(concat_heads(A v))
                x = x + mlp.c_proj(act(mlp.c_fc(ln_2(x))))      act = gelu_new
    last        h = ln_f(x);  logits = h wte^T (the LM head is tied to wte)
Shapes: B texts, T tokens, d n_embd, h n_head, d_head = d / h, V vocab_size.
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

MODEL_TYPES = {"gpt2"}
ANCHORS = ("wte.weight",)


# the causal-mask buffers older checkpoints saved (h.N.attn.bias, h.N.attn.masked_bias): never weights
UNUSED_OK = ("attn.bias", "attn.masked_bias")
OPTIONAL: set[str] = set()


def _roles(config: dict) -> dict[str, Tensor]:
    """Layer l's tensors by role (families/parts.py), Conv1D's stored (in, out): c_attn's columns q | k | v."""
    d = field(config, "n_embd")
    inner = field(config, "n_inner")
    inner = 4 * d if inner is None else inner  # modeling_gpt2's GPT2Block
    p, qkv = "h.{l}.", (d, 3 * d)
    return {"n1": Tensor(p + "ln_1", (d,), True), "n2": Tensor(p + "ln_2", (d,), True),
            **{n: Tensor(p + "attn.c_attn", qkv, True, True, (i * d, (i + 1) * d)) for i, n in enumerate("qkv")},
            "o": Tensor(p + "attn.c_proj", (d, d), True, True),
            "up": Tensor(p + "mlp.c_fc", (d, inner), True, True), "down": Tensor(p + "mlp.c_proj", (inner, d), True, True)}


def parts(config: dict) -> Parts:
    """The description methods read: LayerNorm before each sublayer, learned absolute positions."""
    heads, d = int(field(config, "n_head")), int(field(config, "n_embd"))
    return Parts(layers=int(field(config, "n_layer")), heads=heads, kv_heads=heads, d_head=d // heads, norm="layer",
                 place="pre", eps=float(field(config, "layer_norm_epsilon")), roles=_roles(config))


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    """Every tensor this forward pass reads, with the shape config.json implies (Conv1D: (in, out))."""
    d = field(config, "n_embd")
    return {"wte.weight": (field(config, "vocab_size"), d), "wpe.weight": (field(config, "n_positions"), d),
            "ln_f.weight": (d,), "ln_f.bias": (d,), **shapes(_roles(config), int(field(config, "n_layer")))}


def unsupported(config: dict) -> str | None:
    if field(config, "add_cross_attention"):
        return "cross-attention"
    if field(config, "activation_function") not in ops.ACTIVATIONS:
        return f"activation_function '{field(config, 'activation_function')}'"
    for flag in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "tie_word_embeddings"):
        field(config, flag)  # a null is garbled
    if field(config, "n_embd") % field(config, "n_head") or field(config, "n_layer") < 1:
        return "n_embd not a multiple of n_head"
    return None


class GPT2:
    causal = True

    def __init__(self, weights: Weights, config: dict):
        self.w = weights
        self.config = config
        self.layers = int(field(config, "n_layer"))
        self.heads = int(field(config, "n_head"))
        self.d = int(field(config, "n_embd"))
        self.d_head = self.d // self.heads
        self.eps = float(field(config, "layer_norm_epsilon"))
        inner = field(config, "n_inner")
        self.inner = 4 * self.d if inner is None else int(inner)  # the MLP's width
        self.act = ops.ACTIVATIONS[field(config, "activation_function")]
        self.parts = parts(config)

    def tensor(self, name: str) -> np.ndarray:
        return self.w.get(name)

    def scale(self, layer: int) -> float:
        s = 1.0 / math.sqrt(self.d_head) if field(self.config, "scale_attn_weights") else 1.0
        if field(self.config, "scale_attn_by_inverse_layer_idx"):
            s /= float(layer + 1)
        return s

    def embeddings(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray, offset: int = 0) -> np.ndarray:
        """wte[ids] + wpe[offset .. offset+T-1] (offset: tokens already in a cache)."""
        x = self.w.rows("wte.weight", ids)  # (B, T, d)
        return x + self.w.get("wpe.weight")[offset: offset + ids.shape[1]][None]  # (B, T, d)

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder,
              past: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """One GPT2Block: x (B, T, d) -> the new x (B, T, d), its sites recorded by ``rec`` (k, v
        (B, h, S, d_head) with the cache's). ``past`` holds the keys and values of S - T earlier
        tokens (a cache); ``mask`` is then the caller's, with the offset."""
        w = self.w
        p = f"h.{l}."
        a = ops.layer_norm(x, w.get(p + "ln_1.weight"), w.get(p + "ln_1.bias"), self.eps)
        qkv = ops.conv1d(a, w.get(p + "attn.c_attn.weight"), w.get(p + "attn.c_attn.bias"))  # (B, T, 3d)
        q, k, v = (ops.split_heads(part, self.heads) for part in np.split(qkv, 3, axis=-1))  # (B, h, T, d_head)
        if past is not None:
            k = np.concatenate([past[0], k], axis=2)  # (B, h, S, d_head)
            v = np.concatenate([past[1], v], axis=2)
        z = attend(rec, l, q, k, v, self.scale(l), mask)  # (B, T, h d_head)
        x = rec("resid_mid", l, x + rec("attn.out", l, ops.conv1d(z, w.get(p + "attn.c_proj.weight"),
                                                                  w.get(p + "attn.c_proj.bias"))))
        return x + rec("mlp.out", l, ops.by_rows(lambda rows: self._mlp(p, rows), x, self.inner))  # (B, T, d)

    def _mlp(self, p: str, x: np.ndarray) -> np.ndarray:
        """mlp.c_proj(act(mlp.c_fc(ln_2(x)))): x (B, c, d) -> (B, c, d), each row on its own."""
        w = self.w
        m = ops.layer_norm(x, w.get(p + "ln_2.weight"), w.get(p + "ln_2.bias"), self.eps)
        inner = self.act(ops.conv1d(m, w.get(p + "mlp.c_fc.weight"), w.get(p + "mlp.c_fc.bias")))  # (B, c, n_inner)
        return ops.conv1d(inner, w.get(p + "mlp.c_proj.weight"), w.get(p + "mlp.c_proj.bias"))

    def output_weight(self, l: int) -> np.ndarray:
        """W_O (d, d) as x @ W_O (rows h*d_head..(h+1)*d_head belong to head h): attn.c_proj (Conv1D, stored (in, out))."""
        return self.w.get(f"h.{l}.attn.c_proj.weight")

    def final(self, x: np.ndarray) -> np.ndarray:
        return ops.layer_norm(x, self.w.get("ln_f.weight"), self.w.get("ln_f.bias"), self.eps)

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        """The final norm as (kind, weight, bias, eps): ln_f, a LayerNorm."""
        return "layer", self.w.get("ln_f.weight"), self.w.get("ln_f.bias"), self.eps

    def unembedding(self) -> np.ndarray:
        """(V, d) the LM head: the checkpoint's lm_head.weight, else the tied wte (else, untied by
        config.json and not stored, lm_head is missing: a clear failure, where transformers would
        draw a random head). As transformers 5: a stored head of other values is kept, whatever
        tie_word_embeddings says."""
        if self.w.has_exact("lm_head.weight") or not field(self.config, "tie_word_embeddings"):
            return self.w.get_exact("lm_head.weight")  # (V, d)
        return self.w.get("wte.weight")  # (V, d)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """(..., d) final hidden states -> (..., V) logits through the LM head (``unembedding``)."""
        return hidden @ self.unembedding().T  # (..., V)
