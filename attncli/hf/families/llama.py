"""Llama-family decoders' forward pass in NumPy, step for step as transformers' ``modeling_llama.py``
(and its Mistral, Qwen2, Gemma and Phi-3 variants).

    embeddings  x = embed_tokens[ids]                      Gemma: * sqrt(d) (its "normalizer")
    per layer   a = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w            Gemma: * (1 + w)
                q, k, v = q_proj(a), k_proj(a), v_proj(a)   Phi-3: one qkv_proj, split q | k | v
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
config says is llama_config.py).

Runs in float32 (a real checkpoint's weights, bfloat16 on disk, fit once in memory at float32);
the attention scores and weights in float64 (float32 when a trace's Keep asks for float32).
Shapes: B texts, T queries, S keys (T, or more with a cache), d hidden_size, h heads, h_kv
key-value heads, d_head head_dim, V vocabulary.
"""

from __future__ import annotations

import math

import numpy as np

from attncli.errors import RuntimeFailure
from attncli.hf import ops
from attncli.hf.chunked_attention import Mask, Queries, attend
from attncli.hf.config_defaults import field
from attncli.hf.families.llama_config import MODEL_TYPES, unsupported  # noqa: F401 - the family protocol numpy_backend reads
from attncli.hf.families.llama_config import biases, inverse_frequencies, sizes, windows
from attncli.model.record import Recorder
from attncli.hf.weights import Weights
from attncli.numeric import rms_norm

ANCHORS = ("embed_tokens.weight",)
DTYPE = np.float32  # the weights and hidden states; attention scores in float64
ROW_BLOCK_BYTES = 2 * 2**20  # a block of rows of the MLP (its (B, c, intermediate) arrays) or of k and v (the
# normed (B, c, d)) at most; 8 MiB (ops') took about 12% less CPU at 8,192 tokens and held 11 MiB more


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE on the first rotary_dim dims of x (B, h, T, d_head); cos, sin (T, rotary_dim), halves alike:
    x cos + rotate_half(x) sin = x1 cos - x2 sin | x2 cos + x1 sin, written into one new array."""
    r = cos.shape[-1]
    half = r // 2
    x1, x2 = x[..., :half], x[..., half:r]
    c, s = cos[..., :half], sin[..., :half]  # (T, r/2)
    out = np.empty(x.shape, dtype=np.result_type(x, cos))  # (B, h, T, d_head)
    np.multiply(x1, c, out=out[..., :half])
    out[..., :half] -= x2 * s
    np.multiply(x2, c, out=out[..., half:r])
    out[..., half:r] += x1 * s
    out[..., r:] = x[..., r:]
    return out


UNUSED_OK = ("rotary_emb.inv_freq",)  # a buffer some checkpoints carry; attn computes the frequencies
OPTIONAL: set[str] = set()


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    """Every tensor of the base model ("model." left out) this forward pass reads, with the shape
    config.json implies: weight_check.check_weight_names reports a missing or unused one."""
    kind = config["model_type"]
    s = sizes(config)
    d, h, kv, dh, i = (s[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                       "intermediate_size"))
    qkv_bias, o_bias, mlp_bias = biases(config)
    shapes: dict[str, tuple[int | None, ...]] = {"embed_tokens.weight": (s["vocab_size"], d), "norm.weight": (d,)}

    def linear(name: str, out: int, inp: int, bias: bool) -> None:
        shapes[name + ".weight"] = (out, inp)
        if bias:
            shapes[name + ".bias"] = (out,)

    for l in range(s["num_hidden_layers"]):
        p = f"layers.{l}."
        shapes[p + "input_layernorm.weight"] = shapes[p + "post_attention_layernorm.weight"] = (d,)
        if kind == "phi3":  # fused projections
            linear(p + "self_attn.qkv_proj", (h + 2 * kv) * dh, d, False)
            linear(p + "mlp.gate_up_proj", 2 * i, d, False)
        else:
            for name, out in (("q", h * dh), ("k", kv * dh), ("v", kv * dh)):
                linear(p + f"self_attn.{name}_proj", out, d, qkv_bias)
            linear(p + "mlp.gate_proj", i, d, mlp_bias)
            linear(p + "mlp.up_proj", i, d, mlp_bias)
        linear(p + "self_attn.o_proj", d, h * dh, o_bias)
        linear(p + "mlp.down_proj", d, i, mlp_bias)
    return shapes


class Llama:
    causal = True

    def __init__(self, weights: Weights, config: dict):
        self.w = weights
        self.config = config
        self.model_type = config["model_type"]
        s = sizes(config)
        self.layers, self.heads, self.kv_heads = s["num_hidden_layers"], s["num_attention_heads"], s["num_key_value_heads"]
        self.d, self.d_head, self.intermediate = s["hidden_size"], s["head_dim"], s["intermediate_size"]
        self.eps = float(field(config, "rms_norm_eps"))
        self.gemma = self.model_type == "gemma"
        act = field(config, "hidden_act")
        if self.gemma and act == "gelu":  # GemmaConfig reads the official releases' legacy "gelu" as
            act = "gelu_pytorch_tanh"     # the tanh approximation they were trained with
        self.act = ops.ACTIVATIONS[act]
        self.inv_freq = inverse_frequencies(config, self.d_head)  # (rotary_dim / 2,)
        self.windows = windows(config)
        self.qkv_bias, self.o_bias, self.mlp_bias = biases(config)
        self.tied = bool(field(config, "tie_word_embeddings"))

    def kv_head(self, head: int) -> int:
        """The key-value head query head ``head`` reads (grouped-query attention)."""
        return head // (self.heads // self.kv_heads)

    def scale(self, layer: int) -> float:
        return self.d_head ** -0.5

    def embeddings(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray, offset: int = 0) -> np.ndarray:
        x = self.w.rows("embed_tokens.weight", ids)  # (B, T, d)
        if x.shape[-1] != self.d:
            raise RuntimeFailure(f"embed_tokens.weight has rows of {x.shape[-1]}, config.json's hidden_size is {self.d}: "
                                 "the checkpoint does not match its config")
        if self.gemma:
            x = x * np.asarray(math.sqrt(self.d), dtype=x.dtype)
        return x

    def _shape(self, name: str) -> tuple[int, ...]:
        """The shape config.json implies for tensor ``name`` (a stranger's checkpoint may disagree)."""
        h, kv, dh, d, i = self.heads, self.kv_heads, self.d_head, self.d, self.intermediate
        part, kind = name.split(".")[-2:]
        if part in ("input_layernorm", "post_attention_layernorm", "norm"):
            return (d,)
        out, inp = {"q_proj": (h * dh, d), "k_proj": (kv * dh, d), "v_proj": (kv * dh, d), "o_proj": (d, h * dh),
                    "qkv_proj": ((h + 2 * kv) * dh, d), "gate_proj": (i, d), "up_proj": (i, d), "down_proj": (d, i),
                    "gate_up_proj": (2 * i, d)}[part]
        return (out, inp) if kind == "weight" else (out,)

    def _get(self, name: str) -> np.ndarray:
        tensor = self.w.get(name)
        want = self._shape(name)
        if tensor.shape != want:
            raise RuntimeFailure(f"{name} has shape {tensor.shape}, config.json implies {want}: "
                                 "the checkpoint does not match its config")
        return tensor

    def _norm(self, name: str, x: np.ndarray) -> np.ndarray:
        return rms_norm(x, self._get(name), self.eps, 1.0 if self.gemma else 0.0)

    def _proj(self, name: str, x: np.ndarray, bias: bool) -> np.ndarray:
        return ops.linear(x, self._get(name + ".weight"), self._get(name + ".bias") if bias else None)

    def _qkv(self, p: str, a: np.ndarray, which: str = "qkv") -> tuple[np.ndarray, ...]:
        """The projections ``which`` names, in its order: q (B, T, h d_head), k and v (B, T, h_kv d_head)."""
        if self.model_type == "phi3":
            w = self._get(p + "self_attn.qkv_proj.weight")  # ((h + 2 h_kv) d_head, d): the rows of q | k | v
            nq, nk = self.heads * self.d_head, self.kv_heads * self.d_head
            rows = {"q": slice(0, nq), "k": slice(nq, nq + nk), "v": slice(nq + nk, None)}
            return tuple(ops.linear(a, w[rows[n]], None) for n in which)
        return tuple(self._proj(p + f"self_attn.{n}_proj", a, self.qkv_bias) for n in which)

    def _mlp(self, p: str, m: np.ndarray) -> np.ndarray:
        if self.model_type == "phi3":
            gate, up = np.split(self._proj(p + "mlp.gate_up_proj", m, False), 2, axis=-1)  # (B, T, i) each
        else:
            gate = self._proj(p + "mlp.gate_proj", m, self.mlp_bias)  # (B, T, i)
            up = self._proj(p + "mlp.up_proj", m, self.mlp_bias)
        hidden = self.act(gate)  # a new array (B, T, i), multiplied by up in place
        hidden *= up
        return self._proj(p + "mlp.down_proj", hidden, self.mlp_bias)  # (B, T, d)

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder,
              past: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """One decoder layer: x (B, T, d) -> the new x (B, T, d), its sites recorded by ``rec``:
        q (B, h, T, d_head), k, v (B, h, S, d_head) rotated and repeated per query head, the
        scores and pattern (B, h, T, S) float64. ``past`` holds k, v of the S - T tokens before (a
        cache, repeated per query head); ``mask`` is the caller's, this layer's window added.
        The sums go into arrays the layer owns, in place (never into the caller's x, which a trace
        may hold as resid_pre), so a long text holds x and one other (B, T, d) array between steps."""
        p = f"layers.{l}."
        resid = self._own(rec, l, "attn.out", rec("attn.out", l, self._attention(l, x, mask, rec, past)))
        resid += x  # (B, T, d) resid_mid
        resid = rec("resid_mid", l, resid)
        mlp = lambda rows: self._mlp(p, self._norm(p + "post_attention_layernorm.weight", rows))  # noqa: E731
        if rec.wants(f"blocks.{l}.mlp.out"):
            return resid + rec("mlp.out", l, ops.by_rows(mlp, resid, self.intermediate, ROW_BLOCK_BYTES))
        out = self._own(rec, l, "resid_mid", resid)  # (B, T, d)
        B, T, _ = out.shape
        c = max(1, ROW_BLOCK_BYTES // (B * self.intermediate * out.itemsize))
        for a in range(0, T, c):  # a row's MLP reads that row alone: each block's is added in place
            rows = out[:, a: a + c]
            rows += mlp(rows)
        return out

    @staticmethod
    def _own(rec: Recorder, l: int, name: str, x: np.ndarray) -> np.ndarray:
        """x to change in place: a copy when the trace keeps it as site ``name`` of layer l."""
        return x.copy() if rec.kept(f"blocks.{l}.{name}") else x

    def _attention(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder,
                   past: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
        """o_proj(z) (B, T, d), in a function of its own: what it allocates is let go before the MLP.
        The normed x is never held whole: k and v are made by blocks of rows, q chunk by chunk of
        the attention's query rows (``Queries``; whole when a site or an intervention asks)."""
        p = f"layers.{l}."
        B, T, _ = x.shape
        P = 0 if past is None else past[0].shape[2]  # tokens before these: positions P .. P+T-1
        normed = lambda rows: self._norm(p + "input_layernorm.weight", rows)  # noqa: E731

        def rope(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:  # cos, sin (b - a, r) of rows a..b-1
            angles = np.arange(P + a, P + b, dtype=np.float64)[:, None] * self.inv_freq[None]  # (c, r/2)
            angles = np.concatenate([angles, angles], axis=-1)  # (c, r)
            return np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)

        def heads(t: np.ndarray, n: int) -> np.ndarray:  # (B, c, n d_head) -> (B, n, c, d_head)
            return t.reshape(B, t.shape[1], n, self.d_head).transpose(0, 2, 1, 3)

        def queries(a: int, b: int) -> np.ndarray:  # query rows a..b-1, (B, h, b - a, d_head) rotated
            return rotate(heads(self._qkv(p, normed(x[:, a:b]), "q")[0], self.heads), *rope(a, b))

        c = max(1, ROW_BLOCK_BYTES // (B * self.d * x.itemsize))
        for a in range(0, max(T, 1), c):  # k, v by blocks of rows
            kc, vc = (heads(t, self.kv_heads) for t in self._qkv(p, normed(x[:, a: a + c]), "kv"))  # (B, h_kv, c, d_head)
            kc = rotate(kc, *rope(a, a + kc.shape[2]))
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
        return self._proj(p + "self_attn.o_proj", z, self.o_bias)  # (B, T, d)

    def output_weight(self, l: int) -> np.ndarray:
        """W_O (h d_head, d) as x @ W_O (rows h*d_head..(h+1)*d_head belong to query head h): o_proj,
        stored (out, in). Its bias (Llama with attention_bias) is b_O, the same for every token."""
        return self._get(f"layers.{l}.self_attn.o_proj.weight").T

    def final(self, x: np.ndarray) -> np.ndarray:
        return ops.by_rows(lambda rows: self._norm("norm.weight", rows), x, self.d, ROW_BLOCK_BYTES)  # (B, T, d)

    def final_norm_parts(self) -> tuple[str, np.ndarray, np.ndarray | None, float]:
        """The final norm as (kind, weight, bias, eps): an RMSNorm (Gemma's weight is 1 + w)."""
        return "rms", self._get("norm.weight") + (1.0 if self.gemma else 0.0), None, self.eps

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
        blocks = getattr(self.w, "head_blocks", None)  # a GGUF reader: the head dequantized by blocks of rows
        if blocks is None:
            return (hidden @ self.unembedding().T).astype(np.float64)  # (..., V)
        tied = not (self.w.has_exact("lm_head.weight") or not self.tied)
        out = None
        for start, rows in blocks("embed_tokens.weight" if tied else "/lm_head.weight"):  # rows (n, d)
            if rows.shape[1:] != (self.d,):
                raise RuntimeFailure(f"the LM head has rows of {rows.shape[1:]}, config.json's hidden_size is {self.d}: "
                                     "the checkpoint does not match its config")
            part = hidden @ rows.T  # (..., n)
            if out is None:
                out = np.empty(hidden.shape[:-1] + (self.w.head_rows(tied),), dtype=np.float64)  # (..., V)
            out[..., start: start + rows.shape[0]] = part
        return out
