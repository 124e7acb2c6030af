"""Why a head attends from query i to key j: the score split into pairs of components.

With every norm's scale frozen at the clean run (as direct logit attribution freezes the final
norm's), the residual stream at a position is a sum of components, and a head's query and key are
affine in it, so the score is bilinear in the components:

    x_i = sum_c x_i^c          c: the embeddings, each earlier head's output z^h W_O^h, each earlier
                               layer's b_O and MLP, and (post-LN models) each earlier LayerNorm's bias
    pre-norm  n(x)  = (x - mean x) / s * w + b   (LayerNorm; RMSNorm: x / s * w), s frozen at x_i
    q_i = R_i( n_i(x_i) W_Q + b_Q ) = sum_c R_i( n_i^lin(x_i^c) W_Q )  +  R_i( b W_Q + b_Q )
    k_j = R_j( n_j(x_j) W_K + b_K ) = sum_c R_j( n_j^lin(x_j^c) W_K )  +  R_j( b W_K + b_K )
    score(i, j) = scale * q_i . k_j = sum_{c, c'} scale * q_i^c . k_j^{c'}      the parts

A norm on the attention's output before its residual add (Gemma 3's) is frozen the same way, at
the whole output's scale at each position, so each head's part is its share of what the layer adds.
R_p is RoPE's rotation at position p (a fixed linear map: the identity without RoPE); the last
component ("bias") holds the constant terms. A post-LN encoder (BERT's family) has no pre-norm: its
stream is carried through each earlier layer's two LayerNorms, frozen the same way, each adding its
bias as a component. The parts add up to the score exactly (in float64, up to rounding); the model's
own score is the trace's ``attn.scores``. MPNet adds a relative position bias to q k^T and is
refused (its queries and keys alone do not give its attention).

Shapes: C components (the same list on both sides), d the model dimension, d_head a head's width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.kernels import ops
from attncli.hf.methods.contributions import layer_norms
from attncli.hf.methods.layer_weights import layer_weights
from attncli.model.trace import Keep, site
from attncli.model.interface import has
from attncli.io.textio import visible
from attncli.numeric import norm_scale


@dataclass
class QKParts:
    layer: int
    head: int
    query: int  # position i
    key: int  # position j
    labels: list[str]  # (C,) the components, the last one "bias"
    parts: np.ndarray  # (C, C) parts[a, b]: query side's component a with key side's component b
    score: float  # the model's own score(i, j) (the trace's attn.scores)

    @property
    def total(self) -> float:
        return float(self.parts.sum())


def _pre_norm(arch: Any, l: int) -> tuple[str, np.ndarray, np.ndarray | None, float] | None:
    """Layer l's norm before attention as (kind, weight, bias, eps); None for a post-LN encoder."""
    W = layer_weights(arch, l, np.float64, parts=("n1",))
    return None if W["post"] else (W["norm"], *W["n1"], arch.parts.eps)


def _qk_weights(arch: Any, l: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any, Any]:
    """W_Q (d, d_head), b_Q (d_head,), W_K (d, d_head), b_K (d_head,) of query head ``head`` (its
    key-value head's W_K under grouped-query attention), as x @ W + b; and the per-head q and k
    norms' weights (d_head,) (None without: the description's qk_norm)."""
    W = layer_weights(arch, l, np.float64, parts=("q", "k", "q_norm", "k_norm"))
    dh = arch.parts.d_head
    kv = arch.parts.kv_head(head)
    (wq, bq), (wk, bk) = W["q"], W["k"]  # (d, h d_head), (d, h_kv d_head)
    q_cols, k_cols = slice(head * dh, (head + 1) * dh), slice(kv * dh, (kv + 1) * dh)
    zero = np.zeros(dh)
    norms = (W["q_norm"][0], W["k_norm"][0]) if arch.parts.qk_norm else (None, None)
    return (wq[:, q_cols], zero if bq is None else bq[q_cols], wk[:, k_cols], zero if bk is None else bk[k_cols],
            *norms)


def _centre(x: np.ndarray) -> np.ndarray:
    return x - x.mean(axis=-1, keepdims=True)


def _frozen_layer_norm(comps: np.ndarray, total: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Each component through a LayerNorm whose scale is frozen at ``total``'s: comps (C, P, d), total (P, d)."""
    s = norm_scale(total, eps, centred=True)[..., 0]  # (P,)
    return _centre(comps) / s[None, :, None] * w  # (C, P, d)


def supported(model: Any) -> str | None:
    """Why ``attn qk`` cannot split this model's scores, or None when it can."""
    arch = model.arch if model.backend == "numpy" else None
    if arch is None:
        return f"runs on attn's NumPy pass, which reads the weights; model '{model.name}' runs on {model.backend}"
    if not has(model, "qk"):
        return (f"model '{model.name}' ({model.model_type}) adds a relative position bias to q k^T: its queries "
                "and keys alone do not give its scores")
    return None


def qk_parts(model: Any, enc: Any, layer: int, head: int, query: int, key: int) -> QKParts:
    """The score of (query, key) in head ``head`` of ``layer`` split into (query component) x (key
    component) parts: see the module docstring."""
    why = supported(model)
    if why:
        raise BadInput(f"attn qk {why}")
    arch = model.arch
    model.check_layer(layer)
    if not 0 <= head < model.heads:
        raise BadInput(f"head {head} is out of range: model '{model.name}' has heads 0..{model.heads - 1}")
    T = len(enc.ids)
    for name, pos in (("query", query), ("key", key)):
        if not 0 <= pos < T:
            raise BadInput(f"--{name} {pos} is out of range: the text has tokens 0..{T - 1}")
    keep = Keep.of(["embed", "blocks.*.attn.z", "blocks.*.attn.out", "blocks.*.mlp.out", "blocks.*.resid_pre",
                    "blocks.*.resid_mid", site(layer, "attn.scores")], rows=[query], heads=[head])
    tr = model.trace(enc, keep)
    score = float(tr[site(layer, "attn.scores")][0, 0, key])
    if not np.isfinite(score):
        raise BadInput(f"key {key} is masked for query {query} in layer {layer} (causal or outside the window): "
                       "the head gives it no score")
    at = [query, key]  # the two positions, P = 2
    f64 = lambda name: np.asarray(tr[name], dtype=np.float64)[at]  # noqa: E731  (P, ...)
    labels, comps = ["embed"], [f64("embed")]  # (P, d) each
    post = _pre_norm(arch, 0) is None
    H, dh = model.heads, arch.d_head
    for m in range(layer):
        w_o = np.asarray(arch.output_weight(m), dtype=np.float64).reshape(H, dh, -1)  # (h, d_head, d)
        z = f64(site(m, "attn.z"))  # (P, h, d_head)
        by_head = _through_output_norm(arch, m, np.einsum("phk,hkd->hpd", z, w_o))  # (h, P, d)
        labels += [f"L{m}.H{h}" for h in range(H)] + [f"L{m}.attn_bias"]
        comps += list(by_head) + [f64(site(m, "attn.out")) - by_head.sum(axis=0)]
        if post:  # x = LN1(x + attn.out); x = LN2(x + mlp.out), each frozen at this run's scale
            (w1, b1), (w2, b2), eps = layer_norms(arch, m)
            stack = _frozen_layer_norm(np.stack(comps), f64(site(m, "resid_pre")) + f64(site(m, "attn.out")), w1, eps)
            comps = list(stack) + [np.broadcast_to(b1, stack.shape[1:]).copy()]
            labels.append(f"L{m}.ln1_bias")
        labels.append(f"L{m}.mlp")
        comps.append(f64(site(m, "mlp.out")))
        if post:
            stack = _frozen_layer_norm(np.stack(comps), f64(site(m, "resid_mid")) + f64(site(m, "mlp.out")), w2, eps)
            comps = list(stack) + [np.broadcast_to(b2, stack.shape[1:]).copy()]
            labels.append(f"L{m}.ln2_bias")
    comps = np.stack(comps)  # (C, P, d)
    const = np.zeros(comps.shape[1:])  # (P, d) the layer's own norm bias, before W_Q / W_K
    norm = _pre_norm(arch, layer)
    if norm is not None:
        kind, w, b, eps = norm
        x = f64(site(layer, "resid_pre"))  # (P, d) the stream as the model ran it (its scale is the frozen one)
        if kind == "layer":
            comps = _frozen_layer_norm(comps, x, w, eps)
            const = np.broadcast_to(b, const.shape).copy()
        else:
            s = norm_scale(x, eps, centred=False)[..., 0]  # (P,)
            comps = comps / s[None, :, None] * w
    wq, bq, wk, bk, nq, nk = _qk_weights(arch, layer, head)
    q = np.concatenate([comps[:, 0] @ wq, (const[0] @ wq + bq)[None]])  # (C + 1, d_head) at the query
    k = np.concatenate([comps[:, 1] @ wk, (const[1] @ wk + bk)[None]])  # (C + 1, d_head) at the key
    if arch.parts.qk_norm:  # the per-head RMSNorm, its scale frozen at the whole q (k) of this run: linear
        q, k = _frozen_rms(q, nq, arch.parts.eps), _frozen_rms(k, nk, arch.parts.eps)
    if arch.parts.position == "rotary":  # RoPE: a fixed rotation at each position
        q, k = _rotate(arch, layer, q, query), _rotate(arch, layer, k, key)
    parts = arch.scale(layer) * (q @ k.T)  # (C + 1, C + 1)
    _check_sum(model, parts, score)
    return QKParts(layer, head, query, key, labels + ["bias"], parts, score)


def _through_output_norm(arch: Any, m: int, by_head: np.ndarray) -> np.ndarray:
    """Each head's output (h, P, d) as layer m adds it to the stream: through the norm on the
    attention's output (Gemma 3's attn_out_norm) with its scale frozen at the whole output o = the
    heads' sum + b_O at each position (linear then, so the heads' parts add up to attn.out); unchanged
    without such a norm."""
    W = layer_weights(arch, m, np.float64, parts=("attn_out_norm", "o"))
    if W["attn_out_norm"] is None:
        return by_head
    (w, _), b_o = W["attn_out_norm"], W["o"][1]  # a LayerNorm's bias is the constant part, no head's
    o = by_head.sum(axis=0) + (0.0 if b_o is None else b_o)  # (P, d) the attention's output before its norm
    if W["norm"] == "layer":
        return _frozen_layer_norm(by_head, o, w, arch.parts.eps)
    s = norm_scale(o, arch.parts.eps, centred=False)[..., 0]  # (P,)
    return by_head / s[None, :, None] * w  # (h, P, d)


ADD_UP = 64 * float(np.finfo(np.float32).eps)  # per layer: the parts' sum vs the pass's score, by the parts' sizes


def _check_sum(model: Any, parts: np.ndarray, score: float) -> None:
    """The parts add up to the score the pass computed, to float32 rounding of their sizes through
    2 (layers + 1) matrix products and norms; a model whose activations leave float32's range or
    precision (weights of 1e19) would otherwise get a split that silently does not add up
    (RuntimeFailure, exit 1)."""
    total, size = float(parts.sum()), float(np.abs(parts).sum())
    tol = ADD_UP * (model.layers + 1) * max(size, abs(score), 1.0)
    if not (np.isfinite(total) and np.isfinite(size)) or abs(total - score) > tol:
        raise RuntimeFailure(f"model '{visible(str(model.name))}': the parts of the score do not add up to it "
                             f"(their sum {total:.6g}, the score {score:.6g}): its activations are beyond float32's "
                             "range or precision, so no split of this score would be right")


def _frozen_rms(parts: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Rows ``parts`` (C, d_head) that add up to one head's q (or k) through its RMSNorm with the
    scale of their sum frozen: each part / s * w, s = sqrt(mean(q^2) + eps) of q = the parts' sum."""
    s = norm_scale(parts.sum(axis=0), eps, centred=False)  # (1,)
    return parts / s * w  # (C, d_head)


def _rotate(arch: Any, layer: int, x: np.ndarray, position: int) -> np.ndarray:
    """RoPE at ``position`` on rows x (C, d_head), in float64 (the layer's frequencies)."""
    angles = position * np.asarray(arch.parts.inv_freq[layer], dtype=np.float64)  # (r/2,)
    angles = np.concatenate([angles, angles])[None]  # (1, r)
    return ops.rotate(x, np.cos(angles), np.sin(angles))  # (C, d_head)


def document(model: Any, enc: Any, r: QKParts, top: int) -> dict[str, Any]:
    """The --json document of ``attn qk``: every part, and the ``top`` largest by size first."""
    C = len(r.labels)
    order = np.argsort(-np.abs(r.parts), axis=None, kind="stable")[:top]  # flat indices, largest first
    texts = enc.texts if getattr(enc, "texts", None) is not None else enc.tokens  # each token's text (hf.text.token_text)
    at = lambda p: {"position": p, "token": enc.tokens[p], "text": texts[p]}  # noqa: E731
    return {
        "command": "qk", "model": str(model.name), "layer": r.layer, "head": r.head,
        "query": at(r.query), "key": at(r.key), "score": r.score, "sum": r.total,
        "components": list(r.labels),
        "top": [{"query_side": r.labels[k // C], "key_side": r.labels[k % C], "value": float(r.parts.flat[k])}
                for k in order],
        "query_side": [float(v) for v in r.parts.sum(axis=1)],  # (C,) each query-side component, over every key side
        "key_side": [float(v) for v in r.parts.sum(axis=0)],  # (C,)
        "parts": [[float(v) for v in row] for row in r.parts],  # (C, C)
    }
