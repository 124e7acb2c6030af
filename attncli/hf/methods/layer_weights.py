"""One layer's weights of a NumPy family, by role, every projection as x @ W (+ b): the one reader
the backward passes (hf/methods/backward.py, hf/methods/backward_encoder.py), the contributions and the score split
(hf/methods/qk_attribution.py) share. It reads the family's description (``arch.parts``, families/parts.py),
which names each role's tensor, so no family is named here.

    norm          "layer" (LayerNorm) or "rms" (RMSNorm)
    post          False: pre-norm (n1 before attention, n2 before the MLP); True: post-LN (BERT's
                  family: n1 after attention's residual add, n2 after the MLP's)
    n1, n2        (weight (d,), bias (d,) or None)      an RMSNorm's weight with its offset added (Gemma: 1 + w)
    q             (W (d, h d_head), b or None)
    k, v          (W (d, h_kv d_head), b or None)
    o             (W (h d_head, d), b or None)
    gate, up      (W (d, I), b or None); gate None without a gated MLP
    down          (W (I, d), b or None)
    q_norm, k_norm (weight (d_head,), None), or None: the per-head norms of q and k (Qwen3)
    attn_out_norm, mlp_out_norm (weight (d,), bias or None), or None: a norm on a sublayer's output

A Conv1D weight (GPT-2) is stored (in, out), a Linear's (out, in); a fused tensor (GPT-2's c_attn,
Phi-3's qkv_proj and gate_up_proj) gives each role its share of the outputs. ``layer_weights``
reads only the roles asked for (a split of one head's score needs no MLP). Shapes: d width, h
heads, h_kv key-value heads, d_head a head's width, I the MLP's width.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from attncli.hf.families.parts import NORM_ROLES, Tensor

ROLES = ("n1", "n2", "q", "k", "v", "o", "gate", "up", "down", "q_norm", "k_norm", "attn_out_norm", "mlp_out_norm")
Pair = tuple[np.ndarray, "np.ndarray | None"]


def _read(arch: Any, t: Tensor, l: int, norm: bool, cast: Callable) -> Pair:
    """Role tensor ``t`` of layer l: a norm's (weight (+ offset), bias); a projection's (W, b) as x @ W + b."""
    name = t.at(l)
    w = cast(arch.tensor(name + ".weight"))
    b = cast(arch.tensor(name + ".bias")) if t.bias else None
    if norm:
        return (w + arch.parts.norm_offset if arch.parts.norm == "rms" else w), b
    if t.out is not None:
        share = slice(*t.out)
        w = w[:, share] if t.conv1d else w[share]
        b = None if b is None else b[share]
    return (w if t.conv1d else w.T), b


def layer_weights(arch: Any, l: int, dtype: Any = np.float64, parts: Iterable[str] = ROLES) -> dict[str, Any]:
    """Layer l's weights in ``dtype`` by role (the module docstring), only the roles in ``parts``
    (None for a role the family has not), with ``norm`` and ``post`` always."""
    cast = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    pt = arch.parts
    out: dict[str, Any] = {"norm": pt.norm, "post": pt.place == "post"}
    for role in parts:
        t = pt.roles.get(role)
        out[role] = None if t is None else _read(arch, t, l, role in NORM_ROLES, cast)
    return out
