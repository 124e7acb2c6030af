"""One layer's weights of a NumPy family, by role, every projection as x @ W (+ b): the one reader
the backward passes (hf/backward.py, hf/backward_encoder.py) and the score split (hf/qk_attribution.py)
share, so each family's weight layout is written once.

    norm          "layer" (LayerNorm) or "rms" (RMSNorm)
    post          False: pre-norm (n1 before attention, n2 before the MLP); True: post-LN (BERT's
                  family: n1 after attention's residual add, n2 after the MLP's)
    n1, n2        (weight (d,), bias (d,) or None)      Gemma's RMSNorm weight with its +1 added
    q             (W (d, h d_head), b or None)
    k, v          (W (d, h_kv d_head), b or None)
    o             (W (h d_head, d), b or None)
    gate, up      (W (d, I), b or None); gate None without a gated MLP
    down          (W (I, d), b or None)

GPT-2 stores Conv1D weights (in, out) and one c_attn (d, 3d) with columns q | k | v; the Llama
family, BERT, DistilBERT and MPNet store Linear weights (out, in); Phi-3 fuses qkv_proj (rows
q | k | v) and gate_up_proj (rows gate | up). ``parts`` reads only the roles asked for (a split
of one head's score needs no MLP). Shapes: d width, h heads, h_kv key-value heads, d_head a head's
width, I the MLP's width.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from attncli.errors import BadInput
from attncli.hf.families import bert, distilbert, gpt2, llama, mpnet

ROLES = ("n1", "n2", "q", "k", "v", "o", "gate", "up", "down")
Pair = tuple[np.ndarray, "np.ndarray | None"]


def _gpt2(arch: Any, l: int, cast: Callable) -> dict[str, Callable[[], Any]]:
    p, d = f"h.{l}.", arch.d
    get = lambda name: cast(arch.w.get(p + name))  # noqa: E731

    def qkv(i: int) -> Pair:
        cols = slice(i * d, (i + 1) * d)
        return get("attn.c_attn.weight")[:, cols], get("attn.c_attn.bias")[cols]  # (d, d), (d,)

    return {"n1": lambda: (get("ln_1.weight"), get("ln_1.bias")), "n2": lambda: (get("ln_2.weight"), get("ln_2.bias")),
            "q": lambda: qkv(0), "k": lambda: qkv(1), "v": lambda: qkv(2),
            "o": lambda: (get("attn.c_proj.weight"), get("attn.c_proj.bias")),
            "up": lambda: (get("mlp.c_fc.weight"), get("mlp.c_fc.bias")),
            "down": lambda: (get("mlp.c_proj.weight"), get("mlp.c_proj.bias")), "gate": lambda: None}


def _llama(arch: Any, l: int, cast: Callable) -> dict[str, Callable[[], Any]]:
    p, off = f"layers.{l}.", 1.0 if arch.gemma else 0.0

    def lin(name: str, bias: bool, rows: slice = slice(None)) -> Pair:
        wt = cast(arch._get(p + name + ".weight"))[rows]  # (out, in)
        return wt.T, (cast(arch._get(p + name + ".bias"))[rows] if bias else None)

    out = {"n1": lambda: (cast(arch._get(p + "input_layernorm.weight")) + off, None),
           "n2": lambda: (cast(arch._get(p + "post_attention_layernorm.weight")) + off, None),
           "o": lambda: lin("self_attn.o_proj", arch.o_bias), "down": lambda: lin("mlp.down_proj", arch.mlp_bias)}
    if arch.model_type == "phi3":
        nq, nk, i = arch.heads * arch.d_head, arch.kv_heads * arch.d_head, arch.intermediate
        out.update(q=lambda: lin("self_attn.qkv_proj", False, slice(0, nq)),
                   k=lambda: lin("self_attn.qkv_proj", False, slice(nq, nq + nk)),
                   v=lambda: lin("self_attn.qkv_proj", False, slice(nq + nk, None)),
                   gate=lambda: lin("mlp.gate_up_proj", False, slice(0, i)),
                   up=lambda: lin("mlp.gate_up_proj", False, slice(i, None)))
    else:
        out.update({n: (lambda n=n: lin(f"self_attn.{n}_proj", arch.qkv_bias)) for n in "qkv"},
                   gate=lambda: lin("mlp.gate_proj", arch.mlp_bias), up=lambda: lin("mlp.up_proj", arch.mlp_bias))
    return out


# a post-LN encoder's module names per role: (prefix of layer l, {role: module})
_ENCODERS = {
    bert.BertFamily: ("encoder.layer.{l}.", dict(
        q="attention.self.query", k="attention.self.key", v="attention.self.value", o="attention.output.dense",
        n1="attention.output.LayerNorm", n2="output.LayerNorm", up="intermediate.dense", down="output.dense")),
    distilbert.DistilBert: ("transformer.layer.{l}.", dict(
        q="attention.q_lin", k="attention.k_lin", v="attention.v_lin", o="attention.out_lin",
        n1="sa_layer_norm", n2="output_layer_norm", up="ffn.lin1", down="ffn.lin2")),
    mpnet.MPNet: ("encoder.layer.{l}.", dict(
        q="attention.attn.q", k="attention.attn.k", v="attention.attn.v", o="attention.attn.o",
        n1="attention.LayerNorm", n2="output.LayerNorm", up="intermediate.dense", down="output.dense")),
}


def _encoder(arch: Any, l: int, cast: Callable) -> dict[str, Callable[[], Any]]:
    prefix, names = next(v for k, v in _ENCODERS.items() if isinstance(arch, k))
    p = prefix.format(l=l)
    get = lambda name: cast(arch.w.get(p + name))  # noqa: E731
    out: dict[str, Callable[[], Any]] = {
        role: (lambda m=m: (get(m + ".weight").T, get(m + ".bias"))) for role, m in names.items() if role[0] != "n"}
    out.update({role: (lambda m=names[role]: (get(m + ".weight"), get(m + ".bias"))) for role in ("n1", "n2")})
    out["gate"] = lambda: None
    return out


def encoder_eps(arch: Any) -> float:
    """A post-LN encoder's LayerNorm epsilon (DistilBERT's is fixed in its code)."""
    return distilbert.EPS if isinstance(arch, distilbert.DistilBert) else arch.eps


def layer_weights(arch: Any, l: int, dtype: Any = np.float64, parts: Iterable[str] = ROLES) -> dict[str, Any]:
    """Layer l's weights in ``dtype`` by role (the module docstring), only the roles in ``parts``,
    with ``norm`` and ``post`` always; BadInput for a family this reader does not know."""
    cast = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    if isinstance(arch, gpt2.GPT2):
        readers, norm, post = _gpt2(arch, l, cast), "layer", False
    elif isinstance(arch, llama.Llama):
        readers, norm, post = _llama(arch, l, cast), "rms", False
    elif isinstance(arch, tuple(_ENCODERS)):
        readers, norm, post = _encoder(arch, l, cast), "layer", True
    else:
        raise BadInput(f"attn reads the layer weights of GPT-2, the Llama family, BERT, DistilBERT and MPNet; not "
                       f"of a {type(arch).__name__}")
    out: dict[str, Any] = {"norm": norm, "post": post}
    for role in parts:
        out[role] = readers[role]()
    return out
