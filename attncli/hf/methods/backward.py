"""Gradients of a metric through a decoder's forward pass, at every site of model/trace.py, in NumPy.

The forward pass runs once more (in float64, or float32 where that is exact enough) from the embeddings, keeping what its backward reads
(each layer's input, normed inputs, q, k, v, the pattern, the MLP's pre-activations), then the
backward runs layer by layer from the metric down (the VJPs are backward_ops.py's):

    metric = m(logits[p])           d logits[p] = m'(logits[p])            (V,)
    logits = n_f(x_L) U^T           d x_L = n_f'^T (e_p (d logits[p] U))    (T, d)
    per layer, from the last:       x_post = x_mid + mlp(n_2(x_mid))        d x_mid = d x_post + n_2'^T mlp'^T d x_post
                                    x_mid = x + o(attn(n_1(x)))             d x = d x_mid + n_1'^T attn'^T o'^T d x_mid

Any pre-norm decoder, as its description says (``arch.parts``, families/parts.py): GPT-2 (LayerNorm,
Conv1D c_attn / c_proj, gelu_new) and the Llama family (RMSNorm, RoPE as a fixed rotation per
position whose backward is the inverse rotation, grouped-query attention whose k and v gradients
sum over the query heads of a group, sliding windows, gated MLP, per-head RMSNorms on q and k before
RoPE where the family has them, whose backward is the RMSNorm's per head), and Gemma 3's norm on each
sublayer's output before its residual add (x_mid = x + n_a(o(...)), x_post = x_mid + n_m(mlp(...)):
their backward is the RMSNorm's) and capped logits (c tanh(raw / c): d raw = d logits (1 - tanh^2)). The gradients come
back by site name, per text, in the shapes of model/trace.py (attn.k and attn.v repeated per query
head, as the trace keeps them). Checked against torch autograd through transformers' own modules in
float64 (tests/hf/test_backward.py). Shapes: T tokens, d width, h heads, h_kv key-value heads,
d_head a head's width, I the MLP's width, V the vocabulary.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from attncli.errors import BadInput
from attncli.hf.kernels import blas, ops
from attncli.hf.methods.layer_weights import layer_weights
from attncli.hf.methods.backward_ops import DERIVATIVES, attention_back, layer_norm_back, rms_norm_back
from attncli.hf.checks.weight_check import check_finite
from attncli.model.trace import site
from attncli.numeric import rms_norm, softmax


def _weights(arch: Any, l: int, dtype: Any = np.float64) -> dict[str, Any]:
    """Layer l's weights in ``dtype``, every projection as x @ W (+ b) (hf/methods/layer_weights.py)."""
    return layer_weights(arch, l, dtype)


def _affine(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray | None]) -> np.ndarray:
    return x @ wb[0] + (wb[1] if wb[1] is not None else 0.0)


class DecoderTape:
    """The forward pass of a pre-norm decoder with what its backward reads (in ``dtype``), and the backward."""
    post_ln = False  # the stream is a plain sum of the sublayers' outputs (hf/methods/backward_encoder.py's is normed)
    position_bias = None  # no relative position bias added to the scores (MPNet's, on the encoder tape)

    def __init__(self, model: Any, dtype: Any = np.float64, weights: list[dict[str, Any]] | None = None,
                 unembedding: np.ndarray | None = None):
        """``weights``: another tape's ``[t["W"] for t in tape.layers]`` of the same model and dtype, reused
        (not read and widened again); ``unembedding``: its ``tape.unembedding`` (V, d), likewise."""
        arch = model.arch
        self.shared, self.unembedding = weights, unembedding
        parts = arch.parts  # the description this tape reads (families/parts.py)
        if parts.place != "pre" or not arch.causal:
            raise BadInput(f"gradients on attn's NumPy pass are written for GPT-2 and the Llama family; model "
                           f"'{model.name}' is {model.model_type}")
        self.model, self.arch, self.parts, self.dtype = model, arch, parts, np.dtype(dtype)
        self.act = arch.act
        self.d_act = DERIVATIVES[arch.act]
        self.eps = parts.eps
        self.rope = parts.position == "rotary"
        self.qk_norm = parts.qk_norm is not None  # per-head RMSNorm on q and k, before RoPE
        self.group = parts.group

    def _norm(self, kind: str, x: np.ndarray, wb: tuple) -> np.ndarray:
        return ops.layer_norm(x, wb[0], wb[1], self.eps) if kind == "layer" else rms_norm(x, wb[0], self.eps)

    def _norm_back(self, kind: str, g: np.ndarray, x: np.ndarray, wb: tuple) -> np.ndarray:
        return layer_norm_back(g, x, wb[0], self.eps) if kind == "layer" else rms_norm_back(g, x, wb[0], self.eps)

    def _cos_sin(self, T: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per layer, RoPE's cos and sin (T, r) at positions 0..T-1 (made once per distinct frequencies)."""
        made: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for inv_freq in self.parts.inv_freq:
            if id(inv_freq) not in made:
                angles = np.arange(T, dtype=np.float64)[:, None] * np.asarray(inv_freq, dtype=np.float64)[None]
                angles = np.concatenate([angles, angles], axis=-1)  # (T, r)
                made[id(inv_freq)] = np.cos(angles).astype(self.dtype), np.sin(angles).astype(self.dtype)
        return [made[id(inv_freq)] for inv_freq in self.parts.inv_freq]

    def _qk_normed(self, W: dict[str, Any], q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q (h, T, d_head) and k (h_kv, T, d_head) through their per-head RMSNorms (when the family has them)."""
        if not self.qk_norm:
            return q, k
        return rms_norm(q, W["q_norm"][0], self.eps), rms_norm(k, W["k_norm"][0], self.eps)

    def _allowed(self, l: int, T: int) -> np.ndarray:
        i, j = np.arange(T)[:, None], np.arange(T)[None]
        ok = j <= i
        window = self.parts.window(l)
        return ok & ((i - j) < window) if window is not None else ok  # (T, T)

    def forward(self, ids: list[int], embed: np.ndarray | None = None) -> None:
        """The pass of token ids ``ids``, or of the embeddings ``embed`` (T, d) given in their place."""
        forward_together([self], [ids], [embed])

    def forward_pair(self, other: "DecoderTape", ids: list[int], other_ids: list[int]) -> None:
        """This tape's pass of ``ids`` and ``other``'s of ``other_ids``, side by side (each weight read once)."""
        forward_together([self, other], [ids, other_ids])

    @staticmethod
    def forward_all(tapes: list["DecoderTape"], ids: list[list[int]]) -> None:
        """Each tape's pass of its ``ids``, all side by side (forward_together)."""
        forward_together(tapes, ids)

    @staticmethod
    def backward_all(tapes: list["DecoderTape"], positions: list[int], d_logits: list[np.ndarray]
                     ) -> list[dict[str, np.ndarray]]:
        """Each tape's ``backward(positions[i], d_logits[i])``, all in one (backward_together: as many tokens each)."""
        return backward_together(tapes, positions, d_logits)

    def _begin(self, ids: list[int], embed: np.ndarray | None) -> None:
        """The embeddings (T, d) of the pass, before its first layer."""
        arch = self.arch
        if embed is None:
            arr = np.asarray([ids], dtype=np.int64)
            x = arch.embeddings(arr, np.zeros_like(arr), np.ones_like(arr, dtype=bool))[0]  # (T, d)
        else:
            x = embed
        self.embed, self.layers = np.asarray(x, dtype=self.dtype), []
        self.cos_sin = self._cos_sin(self.embed.shape[0]) if self.rope else None

    def _attend(self, l: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, W: dict[str, Any]) -> tuple:
        """Layer l's attention on this pass's q (T, h * d_head), k and v (T, h_kv * d_head), before the
        q / k norms and the rotation: (q, k, v) as kept (h, T, d_head; k and v repeated per query head),
        p (h, T, T), z (T, h, d_head), and q (h, T, d_head), k (h_kv, T, d_head) before their norms."""
        arch = self.arch
        T, dh = q.shape[0], arch.d_head
        q_pre = q.reshape(T, -1, dh).transpose(1, 0, 2)  # (h, T, d_head)
        k_pre, v = (t.reshape(T, -1, dh).transpose(1, 0, 2) for t in (k, v))  # (h_kv, T, d_head)
        q, k = self._qk_normed(W, q_pre, k_pre)
        if self.rope:
            q, k = (ops.rotate(t, *self.cos_sin[l]) for t in (q, k))
        k, v = np.repeat(k, self.group, axis=0), np.repeat(v, self.group, axis=0)  # (h, T, d_head)
        s = np.where(self._allowed(l, T), q @ k.swapaxes(-1, -2) * arch.scale(l), -np.inf)  # (h, T, T)
        p = softmax(s)  # (h, T, T)
        return q, k, v, p, (p @ v).transpose(1, 0, 2), q_pre, k_pre  # z: (T, h, d_head)

    def _end(self) -> None:
        f = lambda a: np.asarray(a, dtype=self.dtype)  # noqa: E731
        kind, w, b, eps = self.arch.final_norm_parts()
        self.final = (kind, f(w), None if b is None else f(b), eps)
        if self.unembedding is None:
            self.unembedding = f(self.arch.unembedding())  # (V, d), widened once per tape

    def patterns(self, l: int, x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """(h, T, T) layer l's pattern with its queries and keys made from ``x`` (T, d) in place of the
        layer's input (its values untouched); ``rows``: only the rows and columns of those positions
        change (the rest are the run's)."""
        t, W, arch = self.layers[l], self.layers[l]["W"], self.arch
        T, h, dh = x.shape[0], arch.heads, arch.d_head
        at = np.arange(T) if rows is None else np.asarray(rows)
        a = self._norm(W["norm"], x[at], W["n1"])  # (R, d)
        q = _affine(a, W["q"]).reshape(len(at), h, dh).transpose(1, 0, 2)  # (h, R, d_head)
        k = _affine(a, W["k"]).reshape(len(at), -1, dh).transpose(1, 0, 2)  # (h_kv, R, d_head)
        q, k = self._qk_normed(W, q, k)
        if self.rope:
            cos, sin = self.cos_sin[l]
            q, k = (ops.rotate(m, cos[at], sin[at]) for m in (q, k))
        qs, ks = t["q"].copy(), t["k"].copy()  # (h, T, d_head)
        qs[:, at], ks[:, at] = q, np.repeat(k, self.group, axis=0)
        s = np.where(self._allowed(l, T), qs @ ks.swapaxes(-1, -2) * arch.scale(l), -np.inf)  # (h, T, T)
        return softmax(s)  # (h, T, T)

    def logits(self, position: int) -> np.ndarray:
        """(V,) the logits at ``position``, in float64 (capped, c tanh(raw / c), where the family caps them)."""
        raw, cap = self._raw_logits(position), self.parts.logit_cap
        return raw if cap is None else cap * np.tanh(raw / cap)

    def _raw_logits(self, position: int) -> np.ndarray:
        """(V,) the unembedding's output at ``position`` before any cap, float64."""
        kind, w, b, eps = self.final
        x = self.layers[-1]["post"][position]
        with np.errstate(over="ignore", invalid="ignore"):
            y = ops.layer_norm(x, w, b, eps) if kind == "layer" else rms_norm(x, w, eps)
            out = (self.unembedding @ y).astype(np.float64)
        check_finite(out, f"the logits on the {self.dtype} gradient tape")
        return out

    def _uncapped(self, position: int, d_logits: np.ndarray) -> np.ndarray:
        """d metric / d raw logits (V,) from d metric / d the (capped) logits: times 1 - tanh(raw / c)^2."""
        cap = self.parts.logit_cap
        return d_logits if cap is None else d_logits * (1.0 - np.tanh(self._raw_logits(position) / cap) ** 2)

    def backward(self, position: int, d_logits: np.ndarray, inputs: bool = False) -> dict[str, np.ndarray]:
        """d metric / d site at every site, from d metric / d logits[position] (V,). ``inputs``: also
        d metric / d each reader's own input, the residual stream as that reader alone reads it
        (through the frozen norm's Jacobian): ``blocks.l.head_in.q`` / ``.k`` / ``.v`` (h, T, d) each
        head's query, key and value input (k and v per query head, before a group's sum),
        ``blocks.l.mlp_in`` (T, d) and ``final_in`` (T, d), the unembedding's."""
        return backward_together([self], [position], [d_logits], inputs)[0]

    def _head_inputs(self, l: int, dq: np.ndarray, dk: np.ndarray, dv: np.ndarray) -> np.ndarray:
        """(3, h, T, d) each query head's q, k and v input gradient in the normed input's space, from d q,
        d k, d v per query head (h, T, d_head): each back through the rotation (q, k) and that head's
        own rows of W_Q^T / W_K^T / W_V^T (k and v: its key-value head's), the heads of a key-value
        group stacked in one product (no copy of the weights); through the q / k norms first, if any."""
        t, W, h = self.layers[l], self.layers[l]["W"], self.arch.heads
        T, width = dq.shape[1], self.embed.shape[1]
        if self.rope:
            cos, sin = self.cos_sin[l]
            dq, dk = (ops.rotate(d, cos, -sin) for d in (dq, dk))
        if self.qk_norm:  # k per query head: its key-value head's input, repeated
            dq = rms_norm_back(dq, t["q_pre"], W["q_norm"][0], self.eps)
            dk = rms_norm_back(dk, np.repeat(t["k_pre"], self.group, axis=0), W["k_norm"][0], self.eps)
        out = np.empty((3, h, T, width), dtype=self.dtype)
        for i, (n, d) in enumerate((("q", dq), ("k", dk), ("v", dv))):
            kv = h if n == "q" else h // self.group  # the projection's heads
            w = head_projections(W[n][0], kv).swapaxes(-1, -2)  # (kv, d_head, d)
            out[i] = (d.reshape(kv, -1, d.shape[-1]) @ w).reshape(h, T, width)  # (kv, group T, d) -> (h, T, d)
        return out


def forward_together(tapes: list[DecoderTape], ids: list[list[int]],
                     embeds: list[np.ndarray | None] | None = None) -> None:
    """Each tape's pass of its ``ids`` (or its ``embeds`` entry, (T, d)), run layer by layer side by
    side, so that each layer's weights are read (and widened) once for all of them, and used while
    they are still in the cache. The tapes are of one model and dtype; the first one's weights
    (its ``shared`` list, else read here) become every tape's."""
    embeds = embeds if embeds is not None else [None] * len(tapes)
    first = _one_model(tapes, ids, embeds)
    for tape, i, e in zip(tapes, ids, embeds):
        tape._begin(list(i), e)
    rows = max(t.embed.shape[0] for t in tapes) * len(tapes)
    # 20 tokens: one thread; two that spin on a busy machine cost 10x (blas.py); an overflow is damage
    # (check_finite per layer, as the model's own pass), not a RuntimeWarning
    with blas.for_rows(rows), np.errstate(over="ignore", invalid="ignore"):
        for l in range(first.arch.layers):
            W = first.shared[l] if first.shared is not None else _weights(first.arch, l, first.dtype)
            _layer(tapes, l, W)
    first._end()
    for tape in tapes[1:]:
        tape.unembedding = first.unembedding if tape.unembedding is None else tape.unembedding
        tape._end()


def _one_model(tapes: list[DecoderTape], *per_tape: list[Any]) -> DecoderTape:
    """The first of ``tapes``, once they are one or more of one model and dtype with an entry each in
    every list of ``per_tape`` (the first tape's weights serve them all: another model's tape would
    take them silently, and zip would drop a tape without its entry)."""
    if not tapes or any(len(entries) != len(tapes) for entries in per_tape):
        raise ValueError(f"{len(tapes)} tapes with {[len(entries) for entries in per_tape]} entries: give one each")
    first = tapes[0]
    if any(t.model is not first.model or t.dtype != first.dtype for t in tapes[1:]):
        raise ValueError("the tapes run side by side are of one model and dtype (the first one's weights serve all)")
    return first


def _layer(tapes: list[DecoderTape], l: int, W: dict[str, Any]) -> None:
    """Layer l of every tape's pass, with its weights ``W``, what the backward reads kept. The tapes'
    rows are stacked (R = the sum of their T) for the projections and the MLP, so each weight matrix
    is streamed from memory once for all of them (at a sentence's few rows that is what a product
    costs); attention runs per tape."""
    first, at = tapes[0], np.cumsum([0] + [t.embed.shape[0] for t in tapes])
    x = np.concatenate([t.embed if l == 0 else t.layers[-1]["post"] for t in tapes])  # (R, d)
    a = first._norm(W["norm"], x, W["n1"])  # (R, d)
    q, k, v = (_affine(a, W[n]) for n in "qkv")  # (R, h * d_head), (R, h_kv * d_head) x 2
    kept = [tape._attend(l, q[i:j], k[i:j], v[i:j], W) for tape, i, j in zip(tapes, at, at[1:])]
    z = np.concatenate([c[4] for c in kept])  # (R, h, d_head)
    o = _affine(z.reshape(len(x), -1), W["o"])  # (R, d)
    mid = x + (o if W["attn_out_norm"] is None else first._norm(W["norm"], o, W["attn_out_norm"]))  # (R, d)
    m = first._norm(W["norm"], mid, W["n2"])
    up = _affine(m, W["up"])  # (R, I)
    gate = _affine(m, W["gate"]) if W["gate"] is not None else None
    inner = first.act(gate) * up if gate is not None else first.act(up)
    f = _affine(inner, W["down"])  # (R, d)
    post = mid + (f if W["mlp_out_norm"] is None else first._norm(W["norm"], f, W["mlp_out_norm"]))  # (R, d)
    check_finite(post, f"layer {l}'s output on the {first.dtype} gradient tape")  # finite weights that overflow
    for tape, (q_, k_, v_, p_, z_, q_pre, k_pre), i, j in zip(tapes, kept, at, at[1:]):
        rows = slice(i, j)
        tape.layers.append(dict(W=W, x=x[rows], a=a[rows], q=q_, k=k_, v=v_, p=p_, z=z_, mid=mid[rows], m=m[rows],
                                up=up[rows], gate=None if gate is None else gate[rows], post=post[rows],
                                q_pre=q_pre, k_pre=k_pre, o=o[rows], f=f[rows]))


def backward_together(tapes: list[DecoderTape], positions: list[int], d_logits: list[np.ndarray],
                      inputs: bool = False) -> list[dict[str, np.ndarray]]:
    """Each tape's ``backward(positions[i], d_logits[i], inputs)``, the tapes (of one model and dtype,
    as many tokens T each, layer l's weights the first tape's) side by side: their B T rows go
    through each weight product at once (forward_together's stacking, for the backward), attention
    per tape as a batch. A tape alone is the same arithmetic as one tape's backward.
    Arrays carry the tapes first: (B, T, d) rows, (B, h, T, d_head) heads."""
    first, B = _one_model(tapes, positions, d_logits), len(tapes)
    arch, dtype = first.arch, first.dtype
    T, width = first.embed.shape
    if any(t.embed.shape != (T, width) for t in tapes[1:]):
        raise ValueError("backward_together takes tapes of as many tokens")
    R, h = B * T, arch.heads
    rows = lambda l, key: np.concatenate([t.layers[l][key] for t in tapes])  # noqa: E731  (R, ...)
    heads = lambda l, key: np.stack([t.layers[l][key] for t in tapes])  # noqa: E731  (B, h, T, ...)
    kind, w, _, eps = first.final
    g_final = np.zeros((B, T, width), dtype=dtype)
    for i, (tape, position, d) in enumerate(zip(tapes, positions, d_logits)):
        g_final[i, position] = tape._uncapped(position, d).astype(dtype) @ tape.unembedding  # (d,)
    grads = {"final_norm": g_final}
    g_final, post = g_final.reshape(R, width), rows(-1, "post")
    g = layer_norm_back(g_final, post, w, eps) if kind == "layer" else rms_norm_back(g_final, post, w, eps)  # (R, d)
    by_tape = lambda x: x.reshape(B, T, *x.shape[1:])  # noqa: E731  (R, ...) -> (B, T, ...)
    if inputs:
        grads["final_in"] = by_tape(g)
    with blas.for_rows(R), np.errstate(over="ignore", invalid="ignore"):  # a sentence's rows: one thread (blas.py)
        for l in range(arch.layers - 1, -1, -1):
            W, gate, x = first.layers[l]["W"], None, rows(l, "x")
            grads[site(l, "resid_post")] = grads[site(l, "mlp.out")] = by_tape(g)
            g_f = g if W["mlp_out_norm"] is None else first._norm_back(W["norm"], g, rows(l, "f"), W["mlp_out_norm"])
            g_inner = g_f @ W["down"][0].T  # (R, I)
            if first.layers[l]["gate"] is not None:
                gate, up = rows(l, "gate"), rows(l, "up")
                g_m = (g_inner * up * first.d_act(gate)) @ W["gate"][0].T + (g_inner * first.act(gate)) @ W["up"][0].T
            else:
                g_m = (g_inner * first.d_act(rows(l, "up"))) @ W["up"][0].T  # (R, d)
            g_mlp = first._norm_back(W["norm"], g_m, rows(l, "mid"), W["n2"])  # (R, d) through the MLP alone
            if inputs:
                grads[f"blocks.{l}.mlp_in"] = by_tape(g_mlp)
            g = g + g_mlp  # d resid_mid
            grads[site(l, "resid_mid")] = grads[site(l, "attn.out")] = by_tape(g)
            g_o = g if W["attn_out_norm"] is None else first._norm_back(W["norm"], g, rows(l, "o"), W["attn_out_norm"])
            g_z = (g_o @ W["o"][0].T).reshape(B, T, h, -1)  # (B, T, h, d_head)
            grads[site(l, "attn.z")] = g_z
            dq, dk, dv, dp = attention_back(g_z.transpose(0, 2, 1, 3), heads(l, "q"), heads(l, "k"), heads(l, "v"),
                                            heads(l, "p"), arch.scale(l))  # (B, h, T, d_head) x 3, (B, h, T, T)
            grads.update({site(l, "attn.pattern"): dp, site(l, "attn.q"): dq, site(l, "attn.k"): dk, site(l, "attn.v"): dv})
            if inputs:  # each head's q, k, v input apart (the layer's sums below stay as without them)
                g_in = np.stack([t._norm_back(W["norm"], t._head_inputs(l, dq[i], dk[i], dv[i]), t.layers[l]["x"],
                                              W["n1"]) for i, t in enumerate(tapes)])  # (B, 3, h, T, d)
                grads.update({f"blocks.{l}.head_in.{n}": g_in[:, i] for i, n in enumerate("qkv")})
            dk, dv = (d.reshape(B, -1, first.group, T, d.shape[-1]).sum(axis=2) for d in (dk, dv))  # (B, h_kv, T, d_head)
            if first.rope:  # the inverse rotation
                cos, sin = first.cos_sin[l]
                dq, dk = (ops.rotate(d, cos, -sin) for d in (dq, dk))
            if first.qk_norm:  # back through the per-head RMSNorms (B, h, T, d_head), (B, h_kv, T, d_head)
                dq = rms_norm_back(dq, heads(l, "q_pre"), W["q_norm"][0], first.eps)
                dk = rms_norm_back(dk, heads(l, "k_pre"), W["k_norm"][0], first.eps)
            g_qk, g_v = (sum(d.transpose(0, 2, 1, 3).reshape(R, -1) @ W[n][0].T for n, d in pairs)
                         for pairs in ((("q", dq), ("k", dk)), (("v", dv),)))  # (R, d) each, in the normed input's space
            g_qk = first._norm_back(W["norm"], g_qk, x, W["n1"])  # the norm's backward is linear in g: split
            grads[f"blocks.{l}.qk_in"] = by_tape(g_qk)  # d resid_pre through this layer's queries and keys alone
            g = g + g_qk + first._norm_back(W["norm"], g_v, x, W["n1"])  # d resid_pre
            check_finite(g, f"layer {l}'s gradient on the {dtype} gradient tape")
            grads[site(l, "resid_pre")] = by_tape(g)
    grads["embed"] = by_tape(g)
    return [{name: value[i] for name, value in grads.items()} for i in range(B)]


def head_projections(w: np.ndarray, heads: int) -> np.ndarray:
    """(heads, d, d_head) each head's columns of a projection ``w`` (d, heads * d_head), as a view
    (``heads``: the query heads, or a key or value projection's key-value heads)."""
    return w.reshape(w.shape[0], heads, -1).transpose(1, 0, 2)


def gradients(model: Any, ids: list[int], position: int,
              d_metric: Callable[[np.ndarray], np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(d metric / d site by name, the float64 logits at ``position``) of token ids ``ids``;
    ``d_metric(logits (V,)) -> (V,)`` is the metric's gradient with respect to the logits. Besides
    the sites, ``blocks.{l}.qk_in`` is the part of d resid_pre that comes through layer l's own
    queries and keys (AtP*'s QK fix replaces that path's linear estimate)."""
    tape = DecoderTape(model)
    tape.forward(list(ids))
    logits = tape.logits(position)
    return tape.backward(position, d_metric(logits)), logits
