"""Direct logit attribution: each head's and each MLP's direct part of one logit (decoders).

A pre-norm decoder's last residual stream is a sum: x = embed + sum_l (attn.out_l + mlp.out_l),
attn.out_l = sum_h z_h W_O^h + b_O (Gemma 3: attn.out_l = N(sum_h z_h W_O^h + b_O), its norm N frozen
at this run's scale, each head's part N's linear part of its z_h W_O^h). The final norm is linear in x once its scale is frozen at the
clean run's value s (LayerNorm: s = sqrt(var(x) + eps), y = (x - mean(x)) / s * w + b, and the
mean-centring is linear; RMSNorm: s = sqrt(mean(x^2) + eps), y = x / s * w), so the logit
u . y (u the target's row of the unembedding, or target minus contrast) splits into

    part(p) = (centre(p) / s * w) . u     for p = the embeddings, each head, each b_O, each MLP
    + b . u                               the final LayerNorm's bias

which add up to the logit. Per source token j through head h of layer l:
pattern[h, i, j] * part(f_h(x_j)), f_h(x_j) = v_j W_O^h the value vectors (``value_vectors``);
they add up to the head's part. Models with the "dla" capability only (attn's NumPy pass of a pre-norm decoder: the torch
trace holds no weights), refused by the model interface's sentence otherwise. Shapes: L layers, h heads, T tokens, d the model dimension.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from attncli.numeric import norm_scale
from attncli.causal.target import DLA, Target
from attncli.model.interface import require
from attncli.model.trace import site


def output_norm(norm: tuple | None, by_head: np.ndarray) -> Any:
    """The map each head's output (..., d) goes through before the residual add: the identity, or a
    norm on the attention's output (``model.output_norm_parts``: Gemma 3's) frozen at the layer's whole
    output o = the heads' sum + b_O at this position, linear then (its bias stays in attn_bias)."""
    if norm is None:
        return lambda p: p
    kind, w, _, eps, b_o = norm
    o = by_head.sum(axis=0) + (0.0 if b_o is None else np.asarray(b_o, dtype=np.float64))  # (d,)
    w = np.asarray(w, dtype=np.float64)
    if kind == "layer":
        s = norm_scale(o, eps, centred=True)[0]
        return lambda p: (p - p.mean(axis=-1, keepdims=True)) / s * w
    s = norm_scale(o, eps, centred=False)[0]
    return lambda p: p / s * w


def dla(model: Any, ids: Sequence[int], target: Target) -> dict[str, Any]:
    """The parts of the target's logit (or logit difference) at ``target.position``: a dict of
    "embed", "heads" (L, h), "attn_bias" (L,), "mlp" (L,), "norm_bias", "head_bias" (the output
    head's bias, the built-in LM's; 0 without one), "per_token" (L, h, T),
    "logit" (the model's own) and "sum" (of every part)."""
    require(model, "dla", DLA)
    require(model, "output_weight", DLA)
    L, H, i = model.layers, model.heads, target.position
    keep = ["embed", "blocks.*.attn.z", "blocks.*.attn.v", "blocks.*.attn.pattern", "blocks.*.attn.out",
            "blocks.*.mlp.out", site(L - 1, "resid_post"), "final_norm"]
    tr = model.trace(list(ids), keep, rows=[i])
    head = model.unembedding()  # (V, d)
    u = head[target.token].astype(np.float64)  # (d,)
    if target.contrast is not None:
        u = u - head[target.contrast].astype(np.float64)
    kind, w, b, eps = model.final_norm_parts()
    w = np.asarray(w, dtype=np.float64)
    x = tr[site(L - 1, "resid_post")][i].astype(np.float64)  # (d,)
    if kind == "layer":
        s = norm_scale(x, eps, centred=True)[0]  # the frozen LayerNorm scale
        part = lambda p: ((p - p.mean(axis=-1, keepdims=True)) / s * w) @ u  # noqa: E731  (..., d) -> (...)
    else:
        s = norm_scale(x, eps, centred=False)[0]  # the frozen RMSNorm scale
        part = lambda p: (p / s * w) @ u  # noqa: E731
    heads, attn_bias, mlp = np.zeros((L, H)), np.zeros(L), np.zeros(L)
    per_token = np.zeros((L, H, len(ids)))
    for l in range(L):
        w_o = model.output_weight(l).astype(np.float64)  # (h d_head, d)
        z = tr[site(l, "attn.z")][i].astype(np.float64)  # (h, d_head)
        by_head = np.einsum("hk,hkd->hd", z, w_o.reshape(H, z.shape[1], -1))  # (h, d)
        through = output_norm(model.output_norm_parts(l), by_head)  # Gemma 3's norm on the attention's output
        by_head = through(by_head)
        heads[l] = part(by_head)
        b_o = tr[site(l, "attn.out")][i].astype(np.float64) - by_head.sum(axis=0)  # (d,) b_O (0 without one)
        attn_bias[l] = part(b_o)
        mlp[l] = part(tr[site(l, "mlp.out")][i].astype(np.float64))
        v = tr[site(l, "attn.v")].astype(np.float64)  # (h, T, d_head)
        fx = through(np.einsum("htk,hkd->htd", v, w_o.reshape(H, v.shape[2], -1)))  # (h, T, d) value vectors
        pattern = tr[site(l, "attn.pattern")][:, 0].astype(np.float64)  # (h, T): row i only
        per_token[l] = pattern * part(fx)
    embed = float(part(tr["embed"][i].astype(np.float64)))
    norm_bias = float(np.asarray(b, dtype=np.float64) @ u) if b is not None else 0.0
    out = model.unembedding_bias()  # (V,) or None: a constant part, the output head's bias
    head_bias = 0.0 if out is None else float(out[target.token]) - (
        float(out[target.contrast]) if target.contrast is not None else 0.0)
    logit = float(tr["final_norm"][i].astype(np.float64) @ u) + head_bias
    total = embed + heads.sum() + attn_bias.sum() + mlp.sum() + norm_bias + head_bias
    return {"embed": embed, "heads": heads, "attn_bias": attn_bias, "mlp": mlp, "norm_bias": norm_bias, "head_bias": head_bias,
            "per_token": per_token, "logit": logit, "sum": float(total), "scale": float(s)}
