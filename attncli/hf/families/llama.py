"""Llama-family decoders' forward pass in NumPy, step for step as transformers' ``modeling_llama.py``
(and its Mistral, Qwen2, Gemma and Phi-3 variants; a family file of its own, as qwen3.py, runs this
pass with its own llama_config.Variant).

    embeddings  x = embed_tokens[ids]                      Gemma: * sqrt(d) (its "normalizer")
    per layer   a = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w            Gemma: * (1 + w)
                q, k, v = q_proj(a), k_proj(a), v_proj(a)   Phi-3: one qkv_proj, split q | k | v
                q, k = q_norm(q), k_norm(k)                 a variant's per-head RMSNorm (Qwen3), else none
                q, k = RoPE(q), RoPE(k)                     rotate_half, cos / sin of position * inv_freq
                k, v repeated h / h_kv times                (grouped-query attention: query head i
                                                             reads key-value head i // (h / h_kv))
                A = softmax(q k^T / sqrt(d_head) + mask)    (B, h, T, S); mask causal, and a sliding
                                                             window: key j only if i - j < window
                x = x + o_proj(concat_heads(A v))
                x = x + down_proj(act(gate_proj(m)) * up_proj(m)),  m = RMSNorm(x)
                                                            Phi-3: gate | up = gate_up_proj(m)
    last        h = RMSNorm(x); logits = h lm_head^T (embed_tokens when tied and no lm_head is stored)
Biases: Qwen2 on q, k, v; Llama and Gemma on q, k, v, o if attention_bias, Llama on the MLP if
mlp_bias; else none. RoPE's inverse frequencies: 1 / theta^(2i / rotary_dim), i < rotary_dim / 2
(rotary_dim = d_head, times partial_rotary_factor for Phi-3 and for linear / llama3 RoPE), then per
rope type: default, linear (/ factor), llama3 (Llama 3.1's wavelength bands); other types are
refused by name. A field config.json leaves out is transformers' default for the family
(config_defaults.field), and RoPE's fields are resolved with transformers' precedence (what the
config says is llama_config.py). What the methods read of it (its norms, projections, positions,
windows, each weight's name and shape, written once) is ``parts(config)`` (families/parts.py).

Runs in float32 (a real checkpoint's weights, bfloat16 on disk, fit once in memory at float32);
the attention scores and weights in float64 (float32 when a trace's Keep asks for float32).
Shapes: B texts, T queries, S keys (T, or more with a cache), d hidden_size, h heads, h_kv
key-value heads, d_head head_dim, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from attncli.errors import RuntimeFailure
from attncli.hf.kernels import ops
from attncli.hf.kernels.chunked_attention import Mask, Queries, attend
from attncli.hf.families import llama_config
from attncli.hf.families.llama_config import MODEL_TYPES  # noqa: F401 - the registry reads it here
from attncli.hf.families.llama_config import Variant, biases, inverse_frequencies, sizes, variant_of, windows
from attncli.hf.families.parts import Parts, Tensor, shapes
from attncli.model.record import Recorder
from attncli.hf.formats.weights import Weights
from attncli.numeric import rms_norm

ANCHORS = ("embed_tokens.weight",)
DTYPE = np.float32  # the weights and hidden states; attention scores in float64
ROW_BLOCK_BYTES = 2 * 2**20  # a block of rows of the MLP (its (B, c, intermediate) arrays) or of k and v (the
# normed (B, c, d)) at most; 8 MiB (ops') took about 12% less CPU at 8,192 tokens and held 11 MiB more


UNUSED_OK = ("rotary_emb.inv_freq",)  # a buffer some checkpoints carry; attn computes the frequencies
OPTIONAL: set[str] = set()


def unsupported(config: dict, variant: Variant | None = None) -> str | None:
    """Why this pass cannot run the config, or None (llama_config.unsupported)."""
    return llama_config.unsupported(config, variant)


def parts(config: dict, variant: Variant | None = None) -> Parts:
    """The description methods read (families/parts.py): RMSNorm before each sublayer, RoPE, the
    variant's biases, fused projections, q / k norms and windows; every layer tensor's name and shape."""
    v = variant_of(config, variant)
    s = sizes(config, v)
    d, h, kv, dh, i = (s[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                       "intermediate_size"))
    qkv_bias, o_bias, mlp_bias = biases(config, v)
    p = "layers.{l}."
    roles = {"n1": Tensor(p + "input_layernorm", (d,)), "n2": Tensor(p + "post_attention_layernorm", (d,))}
    if v.fused:  # Phi-3: the rows of q | k | v in one qkv_proj, of gate | up in one gate_up_proj
        nq, nk = h * dh, kv * dh
        qkv, gate_up = p + "self_attn.qkv_proj", p + "mlp.gate_up_proj"
        roles.update(q=Tensor(qkv, (nq + 2 * nk, d), out=(0, nq)), k=Tensor(qkv, (nq + 2 * nk, d), out=(nq, nq + nk)),
                     v=Tensor(qkv, (nq + 2 * nk, d), out=(nq + nk, nq + 2 * nk)),
                     gate=Tensor(gate_up, (2 * i, d), out=(0, i)), up=Tensor(gate_up, (2 * i, d), out=(i, 2 * i)))
    else:
        roles.update({n: Tensor(p + f"self_attn.{n}_proj", (out, d), qkv_bias)
                      for n, out in (("q", h * dh), ("k", kv * dh), ("v", kv * dh))})
        roles.update(gate=Tensor(p + "mlp.gate_proj", (i, d), mlp_bias), up=Tensor(p + "mlp.up_proj", (i, d), mlp_bias))
    roles.update(o=Tensor(p + "self_attn.o_proj", (d, h * dh), o_bias), down=Tensor(p + "mlp.down_proj", (d, i), mlp_bias))
    if v.qk_norm:
        roles.update(q_norm=Tensor(p + "self_attn.q_norm", (dh,)), k_norm=Tensor(p + "self_attn.k_norm", (dh,)))
    layers = s["num_hidden_layers"]
    return Parts(layers=layers, heads=h, kv_heads=kv, d_head=dh, norm="rms", place="pre",
                 eps=float(v.field(config, "rms_norm_eps")), roles=roles, norm_offset=v.norm_offset,
                 qk_norm="rms" if v.qk_norm else None, position="rotary",
                 inv_freq=(inverse_frequencies(config, dh, v),) * layers, windows=tuple(windows(config, v)))


def expected(config: dict, variant: Variant | None = None) -> dict[str, tuple[int | None, ...]]:
    """Every tensor of the base model ("model." left out) this forward pass reads, with the shape
    config.json implies (the roles' of ``parts``, written there once): weight_check.check_weight_names
    reports a missing or unused one, ``Llama.tensor`` one of another shape."""
    s = sizes(config, variant)
    d = s["hidden_size"]
    return {"embed_tokens.weight": (s["vocab_size"], d), "norm.weight": (d,),
            **shapes(parts(config, variant).roles, s["num_hidden_layers"])}


def residual(rec: Recorder, l: int, x: np.ndarray, y: np.ndarray, name: str, total: str) -> np.ndarray:
    """x + y (B, T, d), y recorded as site ``name`` of layer l and the sum as ``total``: summed in
    place into y (into a copy of it when the trace keeps y), never into the caller's x."""
    y = rec(name, l, y)
    out = y.copy() if rec.kept(f"blocks.{l}.{name}") else y
    out += x
    return rec(total, l, out)


def residual_by_rows(rec: Recorder, l: int, x: np.ndarray, f: Callable[[np.ndarray], np.ndarray], name: str,
                     x_name: str, width: int) -> np.ndarray:
    """x + f(x) (B, T, d), f reading each row alone (an MLP of ``width``), run by blocks of rows of
    ROW_BLOCK_BYTES: f(x) recorded as site ``name`` of layer l when the trace wants it (then made
    whole), else each block's added in place into x (the layer's own ``x_name``; a copy when kept)."""
    if rec.wants(f"blocks.{l}.{name}"):
        return x + rec(name, l, ops.by_rows(f, x, width, ROW_BLOCK_BYTES))
    out = x.copy() if rec.kept(f"blocks.{l}.{x_name}") else x  # (B, T, d)
    B, T, _ = out.shape
    c = max(1, ROW_BLOCK_BYTES // (B * width * out.itemsize))
    for a in range(0, T, c):  # a row's f reads that row alone: each block's is added in place
        rows = out[:, a: a + c]
        rows += f(rows)
    return out


class Llama:
    causal = True

    def __init__(self, weights: Weights, config: dict, variant: Variant | None = None):
        self.w = weights
        self.config = config
        self.model_type = config["model_type"]
        self.variant = v = variant_of(config, variant)
        self.parts = parts(config, v)
        self.shapes = expected(config, v)  # every tensor's shape, as config.json implies it
        pt = self.parts
        self.layers, self.heads, self.kv_heads, self.d_head = pt.layers, pt.heads, pt.kv_heads, pt.d_head
        self.d, self.intermediate = self.shapes["norm.weight"][0], pt.roles["down"].shape[1]
        self.eps = pt.eps
        act = v.field(config, "hidden_act")
        if v.tanh_gelu and act == "gelu":  # GemmaConfig reads the official releases' legacy "gelu" as
            act = "gelu_pytorch_tanh"      # the tanh approximation they were trained with
        self.act = ops.ACTIVATIONS[act]
        self.inv_freq = pt.inv_freq[0]  # (rotary_dim / 2,)
        self.windows = list(pt.windows)
        self.tied = bool(v.field(config, "tie_word_embeddings"))

    def kv_head(self, head: int) -> int:
        """The key-value head query head ``head`` reads (grouped-query attention)."""
        return self.parts.kv_head(head)

    def scale(self, layer: int) -> float:
        return self.d_head ** -0.5

    def embeddings(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray, offset: int = 0) -> np.ndarray:
        x = self.w.rows("embed_tokens.weight", ids)  # (B, T, d)
        if x.shape[-1] != self.d:
            raise RuntimeFailure(f"embed_tokens.weight has rows of {x.shape[-1]}, config.json's hidden_size is {self.d}: "
                                 "the checkpoint does not match its config")
        if self.variant.embed_scale:
            x = x * np.asarray(math.sqrt(self.d), dtype=x.dtype)
        return x

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` of the base model, in the shape config.json implies (a stranger's checkpoint
        may disagree: a clear failure)."""
        tensor = self.w.get(name)
        want = self.shapes[name]
        if tensor.shape != want:
            raise RuntimeFailure(f"{name} has shape {tensor.shape}, config.json implies {want}: "
                                 "the checkpoint does not match its config")
        return tensor

    def _norm(self, role: str, l: int, x: np.ndarray) -> np.ndarray:
        """RMSNorm ``role`` of layer l on x (..., n) (Gemma's weight 1 + w)."""
        return rms_norm(x, self.tensor(self.parts.roles[role].at(l) + ".weight"), self.eps, self.parts.norm_offset)

    def _project(self, role: str, l: int, x: np.ndarray) -> np.ndarray:
        """x (..., in) through layer l's projection ``role`` (its rows of a fused tensor): (..., out)."""
        t = self.parts.roles[role]
        w = self.tensor(t.at(l) + ".weight")  # (out, in)
        b = self.tensor(t.at(l) + ".bias") if t.bias else None
        if t.out is not None:
            w, b = w[slice(*t.out)], None if b is None else b[slice(*t.out)]
        return ops.linear(x, w, b)

    def _mlp(self, l: int, m: np.ndarray) -> np.ndarray:
        """down(act(gate(m)) * up(m)): m (B, c, d) normed -> (B, c, d)."""
        roles = self.parts.roles
        if roles["gate"].name == roles["up"].name:  # Phi-3's gate_up_proj: one product, split
            t = roles["gate"]
            gate, up = np.split(ops.linear(m, self.tensor(t.at(l) + ".weight"), None), 2, axis=-1)  # (B, c, i) each
        else:
            gate, up = self._project("gate", l, m), self._project("up", l, m)  # (B, c, i)
        hidden = self.act(gate)  # a new array (B, c, i), multiplied by up in place
        hidden *= up
        return self._project("down", l, hidden)  # (B, c, d)

    def _heads_normed(self, role: str, l: int, t: np.ndarray) -> np.ndarray:
        """q or k (B, n, c, d_head) through its per-head RMSNorm (``role`` q_norm / k_norm) when the
        family has one (Qwen3), before RoPE."""
        return self._norm(role, l, t) if self.parts.qk_norm else t

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder,
              past: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """One decoder layer, x (B, T, d) -> the new x (B, T, d), as the paper writes it:

            x = x + attn(norm_1(x))      attn.out (B, T, d), resid_mid
            x = x + mlp(norm_2(x))       mlp.out (B, T, d), run by blocks of rows

        its sites recorded by ``rec``: q (B, h, T, d_head), k, v (B, h, S, d_head) rotated and
        repeated per query head, the scores and pattern (B, h, T, S) float64. ``past`` holds k, v of
        the S - T tokens before (a cache, repeated per query head); ``mask`` is the caller's, this
        layer's window added. The sums go into arrays the layer owns, in place (never into the
        caller's x, which a trace may hold as resid_pre: ``residual``), so a long text holds x and
        one other (B, T, d) array between steps."""
        norm_1 = lambda rows: self._norm("n1", l, rows)  # noqa: E731  RMSNorm of rows (B, c, d)
        norm_2 = lambda rows: self._norm("n2", l, rows)  # noqa: E731
        x = residual(rec, l, x, self._attention(l, norm_1, x, mask, rec, past), "attn.out", "resid_mid")
        x = residual_by_rows(rec, l, x, lambda rows: self._mlp(l, norm_2(rows)), "mlp.out", "resid_mid",
                             self.intermediate)
        return x

    def _attention(self, l: int, normed: Callable[[np.ndarray], np.ndarray], x: np.ndarray, mask: Mask,
                   rec: Recorder, past: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        """o_proj(z) (B, T, d) of the attention on ``normed(x)``, in a function of its own: what it
        allocates is let go before the MLP. The normed x is never held whole: k and v are made by
        blocks of rows, q chunk by chunk of the attention's query rows (``Queries``; whole when a
        site or an intervention asks)."""
        B, T, _ = x.shape
        P = 0 if past is None else past[0].shape[2]  # tokens before these: positions P .. P+T-1

        def rope(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:  # cos, sin (b - a, r) of rows a..b-1
            angles = np.arange(P + a, P + b, dtype=np.float64)[:, None] * self.parts.inv_freq[l][None]  # (c, r/2)
            angles = np.concatenate([angles, angles], axis=-1)  # (c, r)
            return np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)

        def heads(t: np.ndarray, n: int) -> np.ndarray:  # (B, c, n d_head) -> (B, n, c, d_head)
            return t.reshape(B, t.shape[1], n, self.d_head).transpose(0, 2, 1, 3)

        def queries(a: int, b: int) -> np.ndarray:  # query rows a..b-1, (B, h, b - a, d_head) rotated
            q = heads(self._project("q", l, normed(x[:, a:b])), self.heads)  # (B, h, b - a, d_head)
            return ops.rotate(self._heads_normed("q_norm", l, q), *rope(a, b))

        c = max(1, ROW_BLOCK_BYTES // (B * self.d * x.itemsize))
        for a in range(0, max(T, 1), c):  # k, v by blocks of rows
            rows = normed(x[:, a: a + c])  # (B, c, d)
            kc, vc = (heads(self._project(n, l, rows), self.kv_heads) for n in "kv")  # (B, h_kv, c, d_head)
            kc = ops.rotate(self._heads_normed("k_norm", l, kc), *rope(a, a + kc.shape[2]))
            if a == 0:
                k, v = (np.empty((B, self.kv_heads, T, self.d_head), dtype=t.dtype) for t in (kc, vc))
            k[:, :, a: a + c], v[:, :, a: a + c] = kc, vc  # (B, h_kv, T, d_head)
        if past is not None:  # the cache holds them repeated per query head, as the k, v sites
            group = self.heads // self.kv_heads
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # (B, h, T, d_head)
            k = np.concatenate([past[0], k], axis=2)  # (B, h, S, d_head)
            v = np.concatenate([past[1], v], axis=2)
        q = Queries((B, self.heads, T, self.d_head), k.dtype, queries)
        z = attend(rec, l, q, k, v, self.scale(l), mask.windowed(self.windows[l]), score_dtype=np.float64)
        del q, k, v  # (B, T, h d_head) z is all the output projection needs
        return self._project("o", l, z)  # (B, T, d)

    def output_weight(self, l: int) -> np.ndarray:
        """W_O (h d_head, d) as x @ W_O (rows h*d_head..(h+1)*d_head belong to query head h): o_proj,
        stored (out, in). Its bias (Llama with attention_bias) is b_O, the same for every token."""
        return self.tensor(self.parts.roles["o"].at(l) + ".weight").T

    def final(self, x: np.ndarray) -> np.ndarray:
        """The final RMSNorm of x (B, T, d), by blocks of rows (the logit lens hands its rows as one
        text: NumpyPretrained.lens_logits)."""
        final = lambda rows: rms_norm(rows, self.tensor("norm.weight"), self.eps, self.parts.norm_offset)  # noqa: E731
        return ops.by_rows(final, x, self.d, ROW_BLOCK_BYTES)  # (B, T, d)

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        """The final norm as (kind, weight, bias, eps): an RMSNorm (Gemma's weight is 1 + w)."""
        return "rms", self.tensor("norm.weight") + self.parts.norm_offset, None, self.eps

    def unembedding(self) -> np.ndarray:
        """(V, d) the LM head: the checkpoint's lm_head.weight, else embed_tokens when the config
        ties them (else lm_head is missing: a clear failure). As transformers 5: a stored head of
        other values is kept, whatever tie_word_embeddings says."""
        if self.w.has_exact("lm_head.weight") or not self.tied:
            head = self.w.get_exact("lm_head.weight")  # (V, d)
        else:
            head = self.w.get("embed_tokens.weight")  # (V, d)
        if head.shape[1:] != (self.d,):
            raise RuntimeFailure(f"the LM head has shape {head.shape}, config.json's hidden_size is {self.d}: "
                                 "the checkpoint does not match its config")
        return head

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """(..., d) final hidden states -> (..., V) float64 logits through the LM head (``unembedding``)."""
        tied = not (self.w.has_exact("lm_head.weight") or not self.tied)
        out = None
        for start, rows in self.w.head_blocks("embed_tokens.weight" if tied else "/lm_head.weight"):  # rows (n, d)
            if rows.shape[1:] != (self.d,):
                raise RuntimeFailure(f"the LM head has rows of {rows.shape[1:]}, config.json's hidden_size is {self.d}: "
                                     "the checkpoint does not match its config")
            part = hidden @ rows.T  # (..., n)
            if out is None:
                out = np.empty(hidden.shape[:-1] + (self.w.head_rows(tied),), dtype=np.float64)  # (..., V)
            out[..., start: start + rows.shape[0]] = part
        return out
