"""Gradients of a metric through a post-LN encoder and its masked-language-model head, in NumPy, at
every site of model/trace.py: BERT's family (BERT, RoBERTa), DistilBERT and MPNet.

The forward pass runs once more (in float64, or float32) from the embeddings, keeping what its
backward reads; then the backward runs from the metric down, layer by layer (the VJPs are
backward_ops.py's):

    logits = LN_h(act(x_L W_t + b_t)) E^T + b       d x_L[p] = W_t^T (act' * LN_h'^T (d logits[p] E))
    per layer, from the last:
      x_post = LN_2(x_mid + mlp(x_mid))              d u_2 = LN_2'^T d x_post                 (= d mlp.out)
                                                     d x_mid = d u_2 + mlp'^T d u_2
      x_mid = LN_1(x + o(attn(x)))                   d u_1 = LN_1'^T d x_mid                  (= d attn.out)
                                                     d x = d u_1 + attn'^T o'^T d u_1

Every LayerNorm sits on the residual stream itself (post-LN), so the stream a layer reads is its
input x, and ``blocks.{l}.qk_in`` (d x through the layer's own queries and keys) needs no norm.
``embed`` is layer 0's input (after the embeddings' LayerNorm); ``final_norm`` is the last layer's
output (an encoder has no final norm). MPNet adds a relative position bias B (h, T, T) to every
layer's scores: a constant of the pass, so the backward through the softmax is unchanged. Checked
against torch autograd through transformers' BertForMaskedLM, RobertaForMaskedLM,
DistilBertForMaskedLM and MPNetForMaskedLM in float64 (tests/hf/test_backward_encoder.py). Shapes: T tokens, d width,
h heads, d_head a head's width, I the MLP's width, V the vocabulary.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from attncli.errors import BadInput
from attncli.hf.kernels import ops
from attncli.hf.methods.backward_ops import DERIVATIVES, attention_back, layer_norm_back
from attncli.hf.methods.layer_weights import layer_weights
from attncli.model.trace import site
from attncli.numeric import softmax


def _affine(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray | None]) -> np.ndarray:
    return x @ wb[0] + (wb[1] if wb[1] is not None else 0.0)


class EncoderTape:
    """The forward pass of a post-LN encoder and its MLM head with what the backward reads (in ``dtype``),
    and the backward. The same fields as hf/methods/backward.py's DecoderTape where they mean the same: each
    layer's x (its input), q, k, v (h, T, d_head), p (h, T, T), z (T, h, d_head), W (its weights); and
    attn_out, mlp_out (T, d), the two sublayers' outputs before their residual add and LayerNorm."""
    post_ln = True  # the stream is normed after each sublayer: a later layer reads a node through LayerNorms

    def __init__(self, model: Any, dtype: Any = np.float64):
        arch = model.arch
        parts = arch.parts  # the description this tape reads (families/parts.py)
        if parts.place != "post" or parts.norm != "layer" or arch.causal:
            raise BadInput(f"gradients through an encoder on attn's NumPy pass are written for BERT's family, "
                           f"DistilBERT and MPNet; model '{model.name}' is {model.model_type}")
        self.model, self.arch, self.dtype = model, arch, np.dtype(dtype)
        self.head = model.mlm_head  # BadInput naming the model when it has none
        self.act = arch.act
        # the derivatives in the tape's dtype (the erf-based GELU's comes back in float64)
        self.d_act = lambda x: DERIVATIVES[arch.act](x).astype(x.dtype, copy=False)  # noqa: E731
        self.d_head_act = lambda x: DERIVATIVES[self.head.act](x).astype(x.dtype, copy=False)  # noqa: E731
        self.eps = parts.eps
        self.relative = parts.position == "relative"  # a position bias added to every layer's scores (MPNet)

    def _allowed(self, l: int, T: int) -> np.ndarray:
        return np.ones((T, T), dtype=bool)  # (T, T): an encoder's query reads every key of one text

    def scores(self, l: int, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """(h, T, T) layer l's scores from q and k (h, T, d_head): q k^T scale (+ MPNet's position bias)."""
        s = q @ k.swapaxes(-1, -2) * self.arch.scale(l)
        return s if self.position_bias is None else s + self.position_bias

    def forward_pair(self, other: "EncoderTape", ids: list[int], other_ids: list[int]) -> None:
        """This tape's pass of ``ids`` and ``other``'s of ``other_ids`` (one after the other)."""
        self.forward(ids)
        other.forward(other_ids)

    @staticmethod
    def forward_all(tapes: list["EncoderTape"], ids: list[list[int]]) -> None:
        """Each tape's pass of its ``ids``, two by two (clean and corrupted: forward_pair)."""
        for i in range(0, len(tapes), 2):
            tapes[i].forward_pair(tapes[i + 1], ids[i], ids[i + 1])

    @staticmethod
    def backward_all(tapes: list["EncoderTape"], positions: list[int], d_logits: list[np.ndarray]
                     ) -> list[dict[str, np.ndarray]]:
        """Each tape's ``backward(positions[i], d_logits[i])``, one by one."""
        return [tape.backward(position, d) for tape, position, d in zip(tapes, positions, d_logits)]

    def forward(self, ids: list[int]) -> None:
        arch, eps = self.arch, self.eps
        f = lambda a: np.asarray(a, dtype=self.dtype)  # noqa: E731
        arr = np.asarray([ids], dtype=np.int64)
        x = f(arch.embeddings(arr, np.zeros_like(arr), np.ones_like(arr, dtype=bool))[0])  # (T, d)
        T, h, dh = x.shape[0], arch.heads, arch.d_head
        self.position_bias = f(arch.position_bias_of(T)[0]) if self.relative else None  # (h, T, T)
        self.embed, self.layers = x, []
        for l in range(arch.layers):
            W = layer_weights(arch, l, self.dtype)
            q, k, v = (_affine(x, W[n]).reshape(T, h, dh).transpose(1, 0, 2) for n in "qkv")  # (h, T, d_head)
            p = softmax(self.scores(l, q, k))  # (h, T, T)
            z = (p @ v).transpose(1, 0, 2)  # (T, h, d_head)
            attn_out = _affine(z.reshape(T, -1), W["o"])  # (T, d)
            u1 = x + attn_out
            mid = ops.layer_norm(u1, *W["n1"], eps)  # (T, d)
            up = _affine(mid, W["up"])  # (T, I)
            mlp_out = _affine(self.act(up), W["down"])  # (T, d)
            u2 = mid + mlp_out
            post = ops.layer_norm(u2, *W["n2"], eps)  # (T, d)
            self.layers.append(dict(W=W, x=x, q=q, k=k, v=v, p=p, z=z, attn_out=attn_out, u1=u1, mid=mid, up=up,
                                    mlp_out=mlp_out, u2=u2, post=post))
            x = post
        w_t, b_t, ln_w, ln_b = (f(a) for a in self.head.transform_weights())
        self.transform = (w_t.T, b_t, ln_w, ln_b)  # W_t as x @ W_t (d, d)
        self.unembedding, self.bias = f(self.head.decoder()), f(self.head.bias())  # (V, d), (V,)

    def patterns(self, l: int, x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """(h, T, T) layer l's pattern with its queries and keys made from ``x`` (T, d) in place of the
        layer's input (its values untouched); ``rows``: only those positions' queries and keys change."""
        t, W, arch = self.layers[l], self.layers[l]["W"], self.arch
        T, h, dh = x.shape[0], arch.heads, arch.d_head
        at = np.arange(T) if rows is None else np.asarray(rows)
        qs, ks = t["q"].copy(), t["k"].copy()  # (h, T, d_head)
        qs[:, at], ks[:, at] = ((_affine(x[at], W[n]).reshape(len(at), h, dh).transpose(1, 0, 2)) for n in "qk")
        return softmax(self.scores(l, qs, ks))  # (h, T, T)

    def logits(self, position: int) -> np.ndarray:
        """(V,) the MLM head's logits at ``position``, in float64."""
        w_t, b_t, ln_w, ln_b = self.transform
        pre = self.layers[-1]["post"][position] @ w_t + b_t  # (d,)
        h = ops.layer_norm(self.act(pre), ln_w, ln_b, self.head.eps)  # (d,)
        return (self.unembedding @ h + self.bias).astype(np.float64)

    def backward(self, position: int, d_logits: np.ndarray) -> dict[str, np.ndarray]:
        """d metric / d site at every site of the trace but the scores, from d metric / d logits[position]
        (V,); and ``blocks.{l}.qk_in`` (T, d), d resid_pre through layer l's queries and keys alone."""
        arch, grads, eps = self.arch, {}, self.eps
        T = self.embed.shape[0]
        w_t, b_t, ln_w, _ = self.transform
        pre = self.layers[-1]["post"][position] @ w_t + b_t  # (d,) the transform's dense output
        g_h = d_logits.astype(self.dtype) @ self.unembedding  # (d,) d LN_h's output
        g_pre = layer_norm_back(g_h, self.act(pre), ln_w, self.head.eps) * self.d_head_act(pre)
        g = np.zeros_like(self.embed)  # (T, d)
        g[position] = g_pre @ w_t.T
        grads["final_norm"] = g
        for l in range(arch.layers - 1, -1, -1):
            t, W = self.layers[l], self.layers[l]["W"]
            grads[site(l, "resid_post")] = g
            g_u2 = layer_norm_back(g, t["u2"], W["n2"][0], eps)  # (T, d)
            grads[site(l, "mlp.out")] = g_u2
            g = g_u2 + ((g_u2 @ W["down"][0].T) * self.d_act(t["up"])) @ W["up"][0].T  # d resid_mid
            grads[site(l, "resid_mid")] = g
            g_u1 = layer_norm_back(g, t["u1"], W["n1"][0], eps)  # (T, d)
            grads[site(l, "attn.out")] = g_u1
            g_z = (g_u1 @ W["o"][0].T).reshape(T, arch.heads, -1)  # (T, h, d_head)
            grads[site(l, "attn.z")] = g_z
            dq, dk, dv, dp = attention_back(g_z.transpose(1, 0, 2), t["q"], t["k"], t["v"], t["p"], arch.scale(l))
            grads.update({site(l, "attn.pattern"): dp, site(l, "attn.q"): dq, site(l, "attn.k"): dk,
                          site(l, "attn.v"): dv})
            flat = lambda d: d.transpose(1, 0, 2).reshape(T, -1)  # noqa: E731  (h, T, d_head) -> (T, h d_head)
            g_qk = flat(dq) @ W["q"][0].T + flat(dk) @ W["k"][0].T  # (T, d)
            grads[f"blocks.{l}.qk_in"] = g_qk
            g = g_u1 + g_qk + flat(dv) @ W["v"][0].T  # d resid_pre
            grads[site(l, "resid_pre")] = g
        grads["embed"] = g
        return grads


def gradients(model: Any, ids: list[int], position: int,
              d_metric: Callable[[np.ndarray], np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(d metric / d site by name, the float64 MLM logits at ``position``) of token ids ``ids``;
    ``d_metric(logits (V,)) -> (V,)``: the metric's gradient with respect to the logits."""
    tape = EncoderTape(model)
    tape.forward(list(ids))
    logits = tape.logits(position)
    return tape.backward(position, d_metric(logits)), logits
