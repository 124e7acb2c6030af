"""What each head is, read from its weights alone (no text): the OV circuit's copying score, the
OV and QK matrices' top singular directions, and the Q-, K- and V-composition between heads
(Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits").

Row-vector convention, as attn's passes and TransformerLens: x @ W. Per query head h of layer l:

    W_Q, W_K, W_V  (d, d_head)      the head's query, key and value maps (grouped-query attention:
                                     a query head reads its key-value head's W_K, W_V, as
                                     TransformerLens' _expand_kv_heads does)
    W_O            (d_head, d)      its rows of the output projection
    QK = W_Q W_K^T (d, d)           OV = W_V W_O (d, d)       each kept as its two factors

The norms are folded as TransformerLens folds them (weight_processing.process_weights: fold_ln,
center_writing_weights, center_unembed). A LayerNorm (GPT-2): W_Q, W_K, W_V <- P diag(w_1) W (the
norm's weight folded in, then centred over d: P = I - 11^T/d); W_O <- W_O P, W_E <- W_E P (writing
weights centred); W_U <- P diag(w_f) W_U, then centred over the vocabulary. An RMSNorm (the Llama
family, Gemma's 1 + w): the weights folded in (W_Q, W_K, W_V, W_U), nothing centred over d, W_U
centred over the vocabulary. Biases play no part in these scores.

    copying(h) = Re(sum lambda) / sum |lambda|, lambda the eigenvalues of W_E W_V W_O W_U (V, V)
        (the paper's summary of the full OV circuit, as TransformerLens' demo computes it: 1 for a
        head whose OV circuit maps every token to itself with a positive gain, -1 for suppression).
        Its nonzero eigenvalues are those of the (d_head, d_head) W_O (W_U W_E) W_V, so the (V, V)
        matrix is never formed: one (d, d) product W_U W_E for every head.
    composition(A -> B) = ||M_A M_B||_F / (||M_A||_F ||M_B||_F), A in an earlier layer than B,
        M_A = OV_A and M_B = QK_B (Q-composition: A's output read by B's queries), QK_B^T
        (K-composition: by its keys), OV_B (V-composition): TransformerLens' all_composition_scores.
        Each norm is taken through the factors: ||W_1 X W_2^T||_F = ||R_1 X R_2^T||_F for any R with
        R^T R = W^T W (d_head, d_head), and ||U V||_F^2 = tr(U^T U V V^T), the dot product of two
        (d, d) Gram matrices (their upper triangles): no (d, d) product of two heads is formed.

Per-head norms of q and k (Qwen3) and a norm on the attention's output (Gemma 3): their weights
are folded into W_Q, W_K and W_O; their per-token scale cannot be, and is left out (stated).

RoPE (the Llama family): what is composed is the unrotated W_Q W_K^T. The rotation between a query
and a key depends on their distance, so the score is the content part of the bilinear form: the
QK circuit at distance 0. The QK directions read as tokens carry the same caveat.

Directions read as tokens: the top singular pair (u, v) of OV (u: what the head reads, v: what it
writes) and of QK (u: what its query looks for, v: what its key offers), each read through the
folded embedding (W_E u: the tokens whose embedding lies most along u) or, for OV's v, the folded
unembedding (v W_U: the tokens the head's write promotes). Exact for a layer-0 head reading the
embeddings; for a later head a hint, the residual stream being more than the embeddings.

Shapes: L layers, h query heads, d width, d_head a head's width, V the vocabulary.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.kernels import blas
from attncli.hf.methods.layer_weights import layer_weights

MODES = ("Q", "K", "V")


@dataclass
class HeadFactors:
    """Every head's folded factors (float64)."""

    W_Q: np.ndarray  # (L, h, d, d_head)
    W_K: np.ndarray  # (L, h, d, d_head) each query head's key-value head's
    W_V: np.ndarray  # (L, h, d, d_head)
    W_O: np.ndarray  # (L, h, d_head, d)
    norm: str  # "layer" or "rms"
    kv_heads: int
    folded_norms: tuple[str, ...] = ()  # the per-head q/k norms and output norms whose weights were folded in

    @property
    def layers(self) -> int:
        return self.W_Q.shape[0]

    @property
    def heads(self) -> int:
        return self.W_Q.shape[1]

    def QK(self) -> np.ndarray:
        """(L, h, d, d) W_Q W_K^T, formed (tests and small models only)."""
        return self.W_Q @ self.W_K.swapaxes(-1, -2)

    def OV(self) -> np.ndarray:
        """(L, h, d, d) W_V W_O, formed (tests and small models only)."""
        return self.W_V @ self.W_O


def _centred_in(W: np.ndarray) -> np.ndarray:
    """P W for W (..., d, n): each column's mean over d removed (a reading weight after a LayerNorm)."""
    return W - W.mean(axis=-2, keepdims=True)


def head_factors(arch: Any) -> HeadFactors:
    """Every head's folded W_Q, W_K, W_V, W_O from ``arch`` (attn's NumPy family), read through
    layer_weights; BadInput for a post-LN encoder (no norm in front of the heads to fold, and the
    norm after them mixes the heads' outputs: TransformerLens does not fold it either)."""
    L, h = int(arch.layers), int(arch.heads)
    Q, K, V, O = [], [], [], []
    norm = "layer"
    kv_heads = h
    folded: set[str] = set()
    for l in range(L):
        W = layer_weights(arch, l, np.float64, parts=("n1", "q", "k", "v", "o", "q_norm", "k_norm", "attn_out_norm"))
        if W["post"]:
            raise BadInput("--weights reads pre-norm decoders (GPT-2, the Llama family); this model is a post-LN "
                           "encoder, whose norms after each block mix the heads' outputs and cannot be folded")
        norm = W["norm"]
        w1 = W["n1"][0]  # (d,)
        wq, wk, wv, wo = W["q"][0], W["k"][0], W["v"][0], W["o"][0]  # (d, h dh), (d, kv dh), (d, kv dh), (h dh, d)
        d = wq.shape[0]
        dh = wq.shape[1] // h
        kv_heads = wk.shape[1] // dh
        if dh * h != wq.shape[1] or kv_heads < 1 or kv_heads * dh != wk.shape[1] or h % kv_heads or wo.shape != (h * dh, d):
            raise RuntimeFailure(f"layer {l}'s projections have shapes {wq.shape}, {wk.shape}, {wo.shape}: "
                                 f"not {h} heads of one width")
        expand = np.arange(h) // (h // kv_heads)  # (h,) each query head's key-value head
        split = lambda m, n: m.reshape(d, n, dh).transpose(1, 0, 2)  # noqa: E731  (d, n dh) -> (n, d, dh)
        q, k, v = (w1[None, :, None] * split(m, n) for m, n in ((wq, h), (wk, kv_heads), (wv, kv_heads)))
        k, v = k[expand], v[expand]  # (h, d, dh)
        o = wo.reshape(h, dh, d)  # (h, dh, d)
        for role, heads_w in (("q_norm", [q]), ("k_norm", [k])):  # Qwen3: a per-head RMSNorm of q, k (d_head,)
            if W.get(role) is not None:
                heads_w[0] *= W[role][0][None, None, :]
                folded.add(role)
        if W.get("attn_out_norm") is not None:  # Gemma 3: a norm on the attention's output, before the add
            o = o * W["attn_out_norm"][0][None, None, :]
            folded.add("attn_out_norm")
        if norm == "layer":
            q, k, v = _centred_in(q), _centred_in(k), _centred_in(v)
            o = o - o.mean(axis=-1, keepdims=True)  # writing weights centred over d
        Q.append(q), K.append(k), V.append(v), O.append(o)
    out = HeadFactors(np.stack(Q), np.stack(K), np.stack(V), np.stack(O), norm, kv_heads,
                      tuple(r for r in ("q_norm", "k_norm", "attn_out_norm") if r in folded))
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        if not np.isfinite(getattr(out, name)).all():
            raise RuntimeFailure(f"the model's {name} holds NaN or infinity: the checkpoint is damaged")
    return out


def token_embedding(arch: Any) -> np.ndarray:
    """(V, d) the token embedding as stored (GPT-2's wte, the Llama family's embed_tokens; Gemma's
    sqrt(d) gain left out: a positive factor changes neither score nor direction)."""
    name = "wte.weight" if "wte.weight" in arch.w else "embed_tokens.weight"
    E = arch.w.get(name)
    if E.ndim != 2 or E.shape[1] != arch.d:
        raise RuntimeFailure(f"{name} has shape {E.shape}, not (vocabulary, {arch.d}): the checkpoint does not match "
                             "its config")
    return E


@dataclass
class Unembedded:
    """The folded embedding and unembedding, kept as the raw matrices and what folding does to them."""

    E: np.ndarray  # (V, d) raw token embedding (float32 as stored)
    U: np.ndarray  # (V, d) raw LM head (rows: tokens)
    w_f: np.ndarray  # (d,) the final norm's weight (folded into W_U)
    centred: bool  # LayerNorm: W_E and W_U centred over d

    def gram(self) -> np.ndarray:
        """(d, d) folded W_U W_E = [P] diag(w_f) U^T (I - 11^T/V) E [P] (P only for a LayerNorm)."""
        V = self.E.shape[0]
        G = (self.U.T @ self.E).astype(np.float64)  # (d, d) the one (d, V) x (V, d) product (tied: E^T E, syrk)
        G -= np.outer(self.U.sum(axis=0, dtype=np.float64), self.E.sum(axis=0, dtype=np.float64)) / V
        G = self.w_f[:, None] * G
        if self.centred:
            G = G - G.mean(axis=0, keepdims=True)
            G = G - G.mean(axis=1, keepdims=True)
        return G

    def read_in(self, dirs: np.ndarray) -> np.ndarray:
        """(n, V) dirs^T @ folded W_E^T for dirs (d, n): how much each token's embedding lies along each."""
        if self.centred:
            dirs = dirs - dirs.mean(axis=0, keepdims=True)  # W_E P u = W_E (P u)
        return dirs.T.astype(self.E.dtype) @ self.E.T  # (n, V)

    def read_out(self, dirs: np.ndarray) -> np.ndarray:
        """(n, V) dirs^T @ folded W_U for dirs (d, n): each direction's logit on each token."""
        if self.centred:
            dirs = dirs - dirs.mean(axis=0, keepdims=True)
        logits = (self.w_f[:, None] * dirs).T.astype(self.U.dtype) @ self.U.T  # (n, V)
        return logits - logits.mean(axis=1, keepdims=True)  # centred over the vocabulary


def unembedded(model: Any, norm: str) -> Unembedded:
    """``model``'s embedding, LM head and final norm weight (a decoder with an LM head)."""
    kind, w_f, _, _ = model.final_norm_parts()
    if hasattr(model.arch.w, "hold_widened"):  # the widened table kept (within the budget): a tied head read once
        model.arch.w.hold_widened()
    U = model.unembedding()  # (V, d)
    E = token_embedding(model.arch)
    if U is not E and U.shape == E.shape and np.array_equal(U, E):
        U = E  # tied (a GGUF reads the tensor twice): one array, and W_U W_E a symmetric product
    if U.shape != E.shape:
        raise RuntimeFailure(f"the LM head has shape {U.shape} and the embedding {E.shape}: the checkpoint does not "
                             "match its config")
    for name, a in (("the embedding", E), ("the LM head", U), ("the final norm", w_f)):
        if not np.isfinite(a).all():
            raise RuntimeFailure(f"{name} holds NaN or infinity: the checkpoint is damaged")
    return Unembedded(E, U, np.asarray(w_f, dtype=np.float64), centred=norm == "layer")


def copying_scores(f: HeadFactors, G: np.ndarray) -> np.ndarray:
    """(L, h) Re(sum lambda) / sum |lambda| over the eigenvalues of W_O G W_V (d_head, d_head), G
    the folded W_U W_E (d, d): the full OV circuit's nonzero eigenvalues."""
    L, h, dh, d = f.W_O.shape
    small = (f.W_O.reshape(L * h * dh, d) @ G).reshape(L, h, dh, d) @ f.W_V  # (L, h, dh, dh): one gemm for W_O G
    lam = np.linalg.eigvals(small)  # (L, h, dh)
    total = np.abs(lam).sum(axis=-1)
    return np.divide(lam.sum(axis=-1).real, total, out=np.zeros(total.shape), where=total > 0)


def _r(W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(R, s, V) for W (..., n, k): W^T W = V diag(s^2) V^T (eigh of the (k, k) Gram, cheaper than
    a QR of each (n, k) W) and R = diag(s) V^T, so R^T R = W^T W and ||W X||_F = ||R X||_F."""
    lam, V = np.linalg.eigh(W.swapaxes(-1, -2) @ W)  # (..., k), (..., k, k)
    s = np.sqrt(np.maximum(lam, 0.0))
    return s[..., :, None] * V.swapaxes(-1, -2), s, V


def _packed(S: np.ndarray, weighted: bool) -> np.ndarray:
    """(h, d, d) symmetric -> (h, d (d + 1) / 2): the upper triangle, its off-diagonal entries
    doubled when ``weighted``, so that packed(P, False) . packed(Q, True) = sum_ij P_ij Q_ij = tr(P Q)."""
    d = S.shape[-1]
    flat, doubled = _upper(d)
    out = np.take(S.reshape(S.shape[0], d * d), flat, axis=1)  # (h, m)
    if weighted:
        out *= doubled.astype(out.dtype)
    return out


@functools.lru_cache(maxsize=4)
def _upper(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The upper triangle of a (d, d) matrix: its flat indices and the weight of each (1 on the diagonal, else 2)."""
    i, j = np.triu_indices(d)
    return i * d + j, np.where(i == j, 1.0, 2.0)


def composition_scores(f: HeadFactors, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """{"Q", "K", "V": (L, h, L, h)} score of head (l1, h1) writing into head (l2, h2); 0 unless
    l1 < l2. With R^T R = W^T W (R (d_head, d_head), _r) each side is one (d_head, d) or (d, d_head)
    factor: ||OV_A Y_B||_F = ||U_A V_B||_F, U_A = R_V W_O, V_B = W_Q R_K^T (Q), W_K R_Q^T (K),
    W_V R_O^T (V); and ||U V||_F^2 = tr(U^T U V V^T), the dot product of two packed (d, d) Gram
    matrices, so a pair costs d (d + 1) / 2 products, not d d_head^2. Grams and their products run
    in ``dtype`` (float32: the cost), every factor and norm in float64."""
    L, h = f.layers, f.heads
    with blas.one_thread():  # many small factorizations: a second thread only waits
        RV, RK, RQ, RO = (_r(W)[0] for W in (f.W_V, f.W_K, f.W_Q, f.W_O.swapaxes(-1, -2)))  # each (L, h, dh, dh)
        left = RV @ f.W_O  # (L, h, dh, d): ||W_V W_O Y|| = ||R_V W_O Y||
        right = {"Q": f.W_Q @ RK.swapaxes(-1, -2),  # (L, h, d, dh): ||X W_Q W_K^T|| = ||X W_Q R_K^T||
                 "K": f.W_K @ RQ.swapaxes(-1, -2),  # X W_K W_Q^T
                 "V": f.W_V @ RO.swapaxes(-1, -2)}  # X W_V W_O = X W_V R_O^T Q_O^T
    left_norm = np.linalg.norm(left, axis=(-2, -1))  # (L, h) ||OV||_F
    right_norm = {m: np.linalg.norm(r, axis=(-2, -1)) for m, r in right.items()}  # (L, h)
    out = {m: np.zeros((L, h, L, h)) for m in MODES}
    d = left.shape[-1]
    sources = np.empty(((L - 1) * h, d * (d + 1) // 2), dtype=dtype)  # (rows, m) packed U_A^T U_A, layer by layer
    with blas.for_rows(h * d):
        for l2 in range(1, L):
            U = left[l2 - 1].astype(dtype)  # (h, dh, d)
            sources[(l2 - 1) * h: l2 * h] = _packed(U.swapaxes(-1, -2) @ U, False)  # (h, m)
            P = sources[: l2 * h]  # (l2 h, m) every head before layer l2
            R = np.concatenate([right[m][l2] for m in MODES]).astype(dtype)  # (3 h, d, dh) every mode's readers
            num2 = (P @ _packed(R @ R.swapaxes(-1, -2), True).T).astype(np.float64)  # (l2 h, 3 h) ||U_A V_B||^2
            for i, m in enumerate(MODES):  # P read once for the three modes
                num = np.sqrt(np.maximum(num2[:, i * h: (i + 1) * h], 0.0)).reshape(l2, h, h)
                den = left_norm[:l2, :, None] * right_norm[m][l2][None, None, :]  # (l2, h, h)
                out[m][:l2, :, l2] = np.divide(num, den, out=np.zeros(num.shape), where=den > 0)
    return out


def top_direction(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top singular pair of A @ B^T for A, B (..., d, k), through the factors: (u (..., d),
    s (...), v (..., d)), the sign chosen so that v's largest entry in magnitude is positive.
    With A = Q_a R_a (R_a = diag(s_a) V_a^T from _r, Q_a = A V_a / s_a), A B^T = Q_a (R_a R_b^T) Q_b^T."""
    (Ra, sa, Va), (Rb, sb, Vb) = _r(A), _r(B)
    U, S, Vt = np.linalg.svd(Ra @ Rb.swapaxes(-1, -2))  # (..., k, k)

    def lift(W, s, V, x):  # Q x = W V (x / s), the directions with s = 0 dropped (x is 0 there)
        keep = s > s.max(axis=-1, keepdims=True) * 1e-12
        y = np.divide(x, s, out=np.zeros_like(x), where=keep)  # (..., k)
        out = (W @ (V @ y[..., None]))[..., 0]  # (..., d)
        norm = np.linalg.norm(out, axis=-1, keepdims=True)
        return np.divide(out, norm, out=np.zeros_like(out), where=norm > 0)

    u, v = lift(A, sa, Va, U[..., :, 0]), lift(B, sb, Vb, Vt[..., 0, :])
    at = np.abs(v).argmax(axis=-1)[..., None]
    sign = np.sign(np.take_along_axis(v, at, axis=-1))
    sign[sign == 0] = 1
    return u * sign, S[..., 0], v * sign


def top_tokens(scores: np.ndarray, k: int) -> np.ndarray:
    """(n, k) the ids of the k largest entries of each row of ``scores`` (n, V), largest first
    (equal scores: the smaller id first). Each row's k largest lie among its entries >= t, t the
    k-th largest of the row's block maxima (TOP_BLOCK columns a block: k blocks hold k entries >= t),
    so only those few candidates are sorted, not the whole row partitioned (13x faster on GPT-2's
    (576, 50257) read-outs); a NaN, or k past the blocks, takes a sort of the whole rows."""
    n, V = scores.shape
    k = min(k, V)
    blocks = np.maximum.reduceat(scores, np.arange(0, V, TOP_BLOCK), axis=1)  # (n, nb) each block's max
    nb = blocks.shape[1]
    if nb > k > 0 and n:
        t = np.partition(blocks, nb - k, axis=1)[:, nb - k]  # (n,) k-th largest block max
        rows, cols = np.nonzero(scores >= t[:, None])  # the candidates, by row then id
        if np.isfinite(t).all() and (np.bincount(rows, minlength=n) >= k).all():
            order = np.lexsort((cols, -scores[rows, cols], rows))  # by row, score (largest first), id
            rows, cols = rows[order], cols[order]
            return cols[np.searchsorted(rows, np.arange(n))[:, None] + np.arange(k)]  # (n, k)
    return _top_sorted(scores, k)


def _top_sorted(scores: np.ndarray, k: int) -> np.ndarray:
    """top_tokens by a stable sort of each whole row (k <= V; NaN last)."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (n, k)


TOP_BLOCK = 64  # columns a block of top_tokens's maxima covers


@dataclass
class WeightScores:
    copying: Optional[np.ndarray]  # (L, h), None without an LM head
    composition: dict[str, np.ndarray]  # mode -> (L, h, L, h)
    directions: dict[str, np.ndarray]  # "ov_in", "ov_out", "qk_query", "qk_key" -> (L, h, k) token ids
    factors: HeadFactors


def weight_scores(model: Any, *, top_k: int = 5, dtype: Any = np.float32) -> WeightScores:
    """Every weights-only score of ``model`` (attn's NumPy decoder: GPT-2, the Llama family, GGUF)."""
    f = head_factors(model.arch)
    comp = composition_scores(f, dtype)
    lm = unembedded(model, f.norm)
    L, h, d = f.layers, f.heads, f.W_Q.shape[-2]
    with blas.for_rows(lm.E.shape[0]):
        G = lm.gram()  # (d, d)
    with blas.one_thread():  # many small factorizations
        copying = copying_scores(f, G)
        u_ov, _, v_ov = top_direction(f.W_V, f.W_O.swapaxes(-1, -2))  # OV = W_V W_O: (L, h, d) each
        u_qk, _, v_qk = top_direction(f.W_Q, f.W_K)  # QK = W_Q W_K^T
    flat = lambda x: x.reshape(L * h, d).T  # noqa: E731  (d, L h)
    with blas.for_rows(lm.E.shape[0]):
        read_in = lm.read_in(np.concatenate([flat(u_ov), flat(u_qk), flat(v_qk)], axis=1))  # (3 L h, V)
        read_out = lm.read_out(flat(v_ov))  # (L h, V)
    ids_in = top_tokens(read_in, top_k).reshape(3, L, h, -1)  # read_in (3 L h, V)
    ids_out = top_tokens(read_out, top_k).reshape(L, h, -1)
    directions = {"ov_in": ids_in[0], "ov_out": ids_out, "qk_query": ids_in[1], "qk_key": ids_in[2]}
    return WeightScores(copying, comp, directions, f)
