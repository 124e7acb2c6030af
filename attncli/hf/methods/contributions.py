"""How much of token j ends up in token i, accounting for the residual stream, the norms and the
values: three contribution methods, each a (T, T) row-stochastic matrix per layer.

One layer's attention block, per query i, as a sum over the key tokens j (f^h_j = v^h_j W_O^h, the
value vectors of Kobayashi et al. 2020, computed from the normed x_j in a pre-norm decoder):

    pre-norm decoder (GPT-2, Llama family)  y_i = x_i + sum_j sum_h A^h_ij f^h_j + b_O           (resid_mid)
    post-LN encoder (BERT family, MPNet)    y_i = LN1( x_i + sum_j sum_h A^h_ij f^h_j + b_O )    (resid_mid)

With LN1's scale frozen at this run (s_i = sqrt(var(u_i) + eps) of its input u_i), LN1 is affine:
LN1(u) = L_i(u) + beta, L_i(u) = (u - mean(u)) / s_i * gamma. The transformed vector of j at i is

    T_i(x_j) = L_i( sum_h A^h_ij f^h_j + delta_ij x_i )     (L_i the identity in a pre-norm decoder)

A norm on the attention's output before its residual add (Gemma 3's) is frozen the same way, at
query i's whole output o_i: T_i(x_j) = N_i( sum_h A^h_ij f^h_j ) + delta_ij x_i.

so that y_i = sum_j T_i(x_j) + L_i(b_O) + beta.

    alti           ALTI (Ferrando, Gallego & Costa-jussa 2022, "Measuring the Mixing of Contextual
                   Information in the Transformer", EMNLP): c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1),
                   each row divided by its sum
    globenc        GlobEnc (Modarressi et al. 2022, "GlobEnc: Quantifying Global Token Attribution by
                   Incorporating the Whole Encoder Layer in Transformers", NAACL): N_ij = ||L2_i(T_i(x_j))||_2,
                   L2_i the second LayerNorm's linear part frozen at its input (resid_mid + mlp.out);
                   the FFN itself is left out, as in the paper (pre-norm decoders: ||T_i(x_j)||_2); rows
                   divided by their sums
    value-zeroing  Value Zeroing (Mohebbi et al. 2023, "Quantifying Context Mixing in Transformers",
                   EACL): for each key token j, its values zeroed in every head of the layer and the
                   layer's output recomputed (x~^{-j}); d_ij = 1 - cos(x~^{-j}_i, x_i), each row
                   divided by its sum

Rolled out over layers (``rollout``), each method's matrices multiply as attention rollout's do,
R = C_L ... C_1, with no added identity: the residual is already in each C_l.
Shapes: L layers, h heads, T tokens, d the model dimension.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from attncli.errors import BadInput
from attncli.hf.kernels import ops
from attncli.hf.methods.layer_weights import layer_weights
from attncli.model.interface import require
from attncli.numeric import norm_scale, rms_norm
from attncli.model.trace import Trace, site
from attncli.rules.option_conflicts import CONTRIBUTIONS

METHODS = CONTRIBUTIONS  # ("alti", "globenc", "value-zeroing"): --show's names, declared with the option table
ZEROING_ROWS = 4096  # (query, key) rows per batched rerun of value zeroing's MLP


def post_ln(arch: Any) -> bool:
    """The model normalises after each block (BERT's family, DistilBERT, MPNet): its description's place."""
    return arch.parts.place == "post"


def layer_norms(arch: Any, l: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], float]:
    """A post-LN encoder's layer l: the LayerNorm after attention and after the MLP, (gamma, beta)
    each in float64, and eps."""
    W = layer_weights(arch, l, np.float64, parts=("n1", "n2"))
    return W["n1"], W["n2"], arch.parts.eps


def frozen_ln(x: np.ndarray, at: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """The linear part of a LayerNorm frozen at inputs ``at`` (T, d): x (T, ..., d) ->
    (x - mean x) / s_i * gamma, s_i = sqrt(var(at_i) + eps) for the i of x's first axis."""
    s = np.sqrt(at.var(axis=-1) + eps)  # (T,)
    s = s.reshape(s.shape + (1,) * (x.ndim - 1))
    return (x - x.mean(axis=-1, keepdims=True)) / s * gamma


SITES = ("resid_pre", "attn.out", "resid_mid", "mlp.out", "resid_post", "attn.pattern", "attn.v")


def sites(layers: Iterable[int]) -> list[str]:
    """What a trace keeps for the methods at ``layers``: each one's streams around the attention
    block, its pattern and its values."""
    return [site(l, name) for l in layers for name in SITES]


def transformed(model: Any, tr: Any, l: int) -> tuple[np.ndarray, np.ndarray]:
    """(T_i(x_j) (T, T, d), y (T, d)): each key token's transformed vector at each query, and the
    block's output they add up to (with L_i(b_O) + beta), in float64."""
    f64 = lambda name: np.asarray(tr[name], dtype=np.float64)  # noqa: E731
    A, fx = model.value_vectors_of(tr, l)  # (h, T, T), (h, T, d)
    A, fx = np.asarray(A, dtype=np.float64), np.asarray(fx, dtype=np.float64)
    # sum_h A^h_ij f^h_j as T products over j, (T_i, h) @ (h, d), a view of (T, T, d): einsum took 10x longer
    mixed = (A.transpose(2, 1, 0) @ fx.transpose(1, 0, 2)).transpose(1, 0, 2)  # (j, i, d) -> (T, T, d)
    norm = output_norm(model.arch, l)
    if norm is not None:  # Gemma 3: L_i the norm on the attention's output, frozen at query i's whole output
        w, b_o = norm
        o = mixed.sum(axis=1) + (0.0 if b_o is None else b_o)  # (T, d) each query's output before the norm
        mixed = frozen_norm(model.arch, mixed, o, w)
    x = f64(site(l, "resid_pre"))  # (T, d)
    T = x.shape[0]
    mixed[np.arange(T), np.arange(T)] += x  # the residual: delta_ij x_i
    if post_ln(model.arch):
        (gamma, _), _, eps = layer_norms(model.arch, l)
        mixed = frozen_ln(mixed, x + f64(site(l, "attn.out")), gamma, eps)
    return mixed, f64(site(l, "resid_mid"))


def _rows(c: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (a row of zeros stays zeros)."""
    total = c.sum(axis=-1, keepdims=True)
    return np.divide(c, total, out=np.zeros_like(c), where=total > 0)


def alti_layer(model: Any, tr: Any, l: int) -> np.ndarray:
    t, y = transformed(model, tr, l)  # (T, T, d), (T, d)
    c = np.abs(y).sum(axis=-1)[:, None] - np.abs(y[:, None] - t).sum(axis=-1)  # (T, T)
    return _rows(np.maximum(c, 0.0))


def globenc_layer(model: Any, tr: Any, l: int) -> np.ndarray:
    t, _ = transformed(model, tr, l)  # (T, T, d)
    if post_ln(model.arch):
        _, (gamma2, _), eps = layer_norms(model.arch, l)
        at = np.asarray(tr[site(l, "resid_mid")], dtype=np.float64) + np.asarray(tr[site(l, "mlp.out")], dtype=np.float64)
        t = frozen_ln(t, at, gamma2, eps)
    return _rows(np.linalg.norm(t, axis=-1))


def _affine(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray | None]) -> np.ndarray:
    return x @ wb[0] + (wb[1] if wb[1] is not None else 0.0)


def output_norm(arch: Any, l: int) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Layer l's norm on the attention's output before its residual add (the description's
    attn_out_norm: Gemma 3's post_attention_layernorm) as (weight (d,), b_O or None), float64; None
    without one."""
    W = layer_weights(arch, l, np.float64, parts=("attn_out_norm", "o"))
    return None if W["attn_out_norm"] is None else (W["attn_out_norm"][0], W["o"][1])


def frozen_norm(arch: Any, x: np.ndarray, at: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The family's norm's linear part frozen at inputs ``at`` (T, d): x (T, ..., d) -> x / s_i * w
    (RMSNorm; a LayerNorm's centres x too), s_i the norm's scale of at_i."""
    if arch.parts.norm == "layer":
        return frozen_ln(x, at, w, arch.parts.eps)
    s = norm_scale(at, arch.parts.eps, centred=False)[..., 0]  # (T,)
    return x / s.reshape(s.shape + (1,) * (x.ndim - 1)) * w


def after_attention(arch: Any, l: int, u: np.ndarray) -> np.ndarray:
    """Layer l's output from u (..., d) = x + attn.out, the residual sum before any norm after it:
    what follows the attention, each row on its own (the family's norms and MLP, as its description
    names them, in u's dtype)."""
    pt = arch.parts
    W = layer_weights(arch, l, u.dtype, parts=("n1", "n2", "gate", "up", "down", "mlp_out_norm"))

    def norm(x: np.ndarray, wb: tuple) -> np.ndarray:
        return ops.layer_norm(x, wb[0], wb[1], pt.eps) if pt.norm == "layer" else rms_norm(x, wb[0], pt.eps)

    def mlp(m: np.ndarray) -> np.ndarray:  # (..., d) -> (..., d)
        up = _affine(m, W["up"])  # (..., I)
        inner = arch.act(_affine(m, W["gate"])) * up if W["gate"] is not None else arch.act(up)
        return _affine(inner, W["down"])

    if pt.place == "pre":  # a norm on the MLP's output before its residual add: Gemma 3's
        out = mlp(norm(u, W["n2"]))
        return u + (out if W["mlp_out_norm"] is None else norm(out, W["mlp_out_norm"]))
    m = norm(u, W["n1"])
    return norm(m + mlp(m), W["n2"])


def value_zeroing_layer(model: Any, tr: Any, l: int) -> np.ndarray:
    """Layer l's output with key token j's values zeroed in every head, for each j: the softmax does
    not read the values, so the attention output loses exactly j's value vectors,

        attn.out_i^{-j} = attn.out_i - sum_h A^h_ij f^h_j          (f^h_j = v^h_j W_O^h)

    (Gemma 3 norms the attention's output o before its residual add: attn.out_i^{-j} = norm(o_i -
    sum_h A^h_ij f^h_j), the norm run again),

    and only what follows the attention reruns, on the rows j reaches (A_ij > 0: in a causal model
    i >= j); every other row keeps its output (cosine distance 0)."""
    arch = model.arch
    A, fx = model.value_vectors_of(tr, l)  # (h, T, T), (h, T, d)
    A, fx = np.asarray(A, dtype=np.float64), np.asarray(fx, dtype=np.float64)
    u = np.asarray(tr[site(l, "resid_pre")], dtype=np.float64) + np.asarray(tr[site(l, "attn.out")], dtype=np.float64)
    out = np.asarray(tr[site(l, "resid_post")], dtype=np.float64)  # (T, d)
    T = u.shape[0]
    i, j = np.nonzero((A > 0).any(axis=0))  # (N,) each: the (query, key) pairs that change
    d = np.zeros((T, T))
    norm = output_norm(arch, l)
    if norm is not None:  # Gemma 3: the attention's output is normed before its residual add; rerun the norm
        w, b_o = norm
        x = np.asarray(tr[site(l, "resid_pre")], dtype=np.float64)
        o = np.einsum("hij,hjd->id", A, fx) + (0.0 if b_o is None else b_o)  # (T, d) before the norm
        eps = arch.parts.eps

        def stream(rows: np.ndarray, lost: np.ndarray) -> np.ndarray:  # x_i + norm(o_i - lost) (n, d)
            return x[rows] + rms_norm(o[rows] - lost, w, eps) if arch.parts.norm == "rms" else \
                x[rows] + ops.layer_norm(o[rows] - lost, w, None, eps)
    else:
        def stream(rows: np.ndarray, lost: np.ndarray) -> np.ndarray:  # (n, d)
            return u[rows] - lost
    step = max(1, ZEROING_ROWS)
    with model.running(min(len(i), step)):
        for a in range(0, len(i), step):
            ii, jj = i[a: a + step], j[a: a + step]
            lost = np.einsum("hn,hnd->nd", A[:, ii, jj], fx[:, jj])  # (n, d) j's value vectors at i
            zeroed = after_attention(arch, l, stream(ii, lost).astype(arch.w.dtype)[None])[0].astype(np.float64)  # (n, d)
            cos = (zeroed * out[ii]).sum(-1) / (np.linalg.norm(zeroed, axis=-1) * np.linalg.norm(out[ii], axis=-1))
            d[ii, jj] = 1.0 - cos
    return _rows(np.maximum(d, 0.0))  # rounding may give -1e-16 where zeroing changes nothing


PER_LAYER = {"alti": alti_layer, "globenc": globenc_layer, "value-zeroing": value_zeroing_layer}


def check(model: Any, method: str) -> None:
    """BadInput for an unknown method, or a model whose layers attn's NumPy pass does not hold (the
    "contributions" capability: the torch backend, encoder-decoders, the built-in LM)."""
    if method not in METHODS:
        raise BadInput(f"no contribution method '{method}': choose one of {', '.join(METHODS)}")
    require(model, "contributions", f"--show {method}")


def of_trace(model: Any, tr: Trace, method: str, layers: Iterable[int]) -> np.ndarray:
    """(len(layers), T, T) as :func:`contributions`, from a trace that kept ``sites(layers)``."""
    check(model, method)
    return np.stack([PER_LAYER[method](model, tr, l) for l in layers])


def contributions(model: Any, enc: Any, method: str, layers: list[int] | None = None) -> np.ndarray:
    """(len(layers), T, T): ``method``'s row-stochastic matrix of each of ``layers`` (default: all)."""
    check(model, method)
    layers = list(range(model.layers)) if layers is None else layers
    for l in layers:
        model.check_layer(l)
    return of_trace(model, model.trace(enc, sites(layers)), method, layers)


def rolled_out(per_layer: np.ndarray, upto: int | None = None) -> np.ndarray:
    """(T, T) R = C_upto ... C_0 over the per-layer matrices (L, T, T): no identity added."""
    last = per_layer.shape[0] - 1 if upto is None else upto
    R = np.eye(per_layer.shape[-1])
    for l in range(last + 1):
        R = per_layer[l] @ R  # (T, T)
    return R
