"""Attribution patching: every cell of ``attn patch``'s grid estimated from one forward and one
backward pass of the corrupted text (Nanda 2023, "Attribution Patching: Activation Patching At
Industrial Scale"; Kramar et al. 2024, "AtP*").

    atp[l, x] = (site_clean - site_corrupt) . d metric / d site |corrupt  / (metric(clean) - metric(corrupt))

read as ``patch``'s restored fraction, so the two grids compare cell for cell. Sites as ``patch``'s:
resid (blocks.l.resid_pre at position x), attn (blocks.l.attn.out at x), mlp (blocks.l.mlp.out at
x), head (head x's blocks.l.attn.z at every position); and a head's key or query at one position
(rows layer x head, columns positions). The linear estimate through a softmax fails when attention
saturates; AtP*'s QK fix (on by default, ``qk_fix=False`` turns it off) computes that path exactly:
a key or query node's head's pattern recomputed with the clean key (query) put in, and for the
other nodes every later layer's pattern recomputed from the stream the node changes (its direct
path into those queries and keys), each change times d metric / d pattern, in place of the linear
estimate of the same path.
On a post-LN encoder (BERT's family, DistilBERT, MPNet: the target at a mask, read by the MLM head) every
later layer reads a node's change through the LayerNorms after it, so the QK fix's direct path is
only a resid node's own layer (its input) and the key and query nodes; elsewhere the linear estimate
stays. The gradients are hf/methods/backward.py's (GPT-2 and the Llama family on attn's NumPy pass) and
hf/methods/backward_encoder.py's (the encoders), read from their tapes; a model with gradients but no tape
(the torch backend: torch's autograd through transformers' own modules, hf/backends/torch_grad.py, any decoder
transformers runs) gives them through ``model.site_gradients``: plain AtP at the resid, attn, mlp and
head sites (the QK fix and the key and query sites recompute patterns on the tape).
Shapes: L layers, h heads, T tokens, d width, d_head a head's width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from attncli.causal.grids import PATCH_SITES, check_same_length
from attncli.causal.target import Target
from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.kernels import blas
from attncli.model.interface import Tape, has, require
from attncli.model.trace import Intervention, site
from attncli.numeric import softmax
from attncli.io.textio import visible

SITE_NAMES = {**PATCH_SITES, "key": "attn.k", "query": "attn.q"}  # --site -> the trace's site in a layer
SITES = tuple(SITE_NAMES)


@dataclass
class Attribution:
    values: np.ndarray  # (L, C) resid/attn/mlp: C = T; head: C = h; (L * h, T) key/query
    clean: float
    corrupt: float
    where: str
    qk_fix: bool
    row_labels: list[str]
    verified: list[dict[str, Any]] | None = None  # the --verify cells: layer/row, column, estimate, exact


def _sites(tape: Tape) -> dict[str, np.ndarray]:
    """resid/attn/mlp (L, T, d), head (L, T, h, d_head), key/query (L, h, T, d_head) of a tape's forward."""
    layers = tape.layers
    post_ln = tape.post_ln  # its sublayers' outputs are kept: the stream is normed between them
    attn = [t["attn_out"] if post_ln else t["mid"] - t["x"] for t in layers]
    mlp = [t["mlp_out"] if post_ln else t["post"] - t["mid"] for t in layers]
    return {"resid": np.stack([t["x"] for t in layers]), "attn": np.stack(attn),
            "mlp": np.stack(mlp), "head": np.stack([t["z"] for t in layers]),
            "key": np.stack([t["k"] for t in layers]), "query": np.stack([t["q"] for t in layers])}


@blas.one_thread()  # thousands of (h, T, T) patterns: small products (blas.py)
def _qk_fixed(tape: Tape, clean: np.ndarray, where: str, grads: dict[str, np.ndarray]) -> np.ndarray:
    """(L, h, T) AtP*: head h's pattern recomputed with position t's clean key (query) put in, its
    change times d metric / d pattern."""
    L, h, T = len(tape.layers), tape.arch.heads, tape.embed.shape[0]
    out = np.zeros((L, h, T))
    bias = tape.position_bias  # (h, T, T) MPNet's, in every layer
    bias = np.zeros((h, T, T)) if bias is None else bias
    for l, t in enumerate(tape.layers):
        allowed = tape._allowed(l, T)  # (T, T)
        scale, dA = tape.arch.scale(l), grads[site(l, "attn.pattern")]  # (h, T, T)
        for head in range(h):
            q, k, A = t["q"][head], t["k"][head], t["p"][head]  # (T, d_head), (T, d_head), (T, T)
            for pos in range(T):
                if where == "key":
                    k2 = k.copy()
                    k2[pos] = clean[l, head, pos]
                    new = softmax(np.where(allowed, q @ k2.T * scale + bias[head], -np.inf))  # (T, T)
                    out[l, head, pos] = ((new - A) * dA[head]).sum()
                else:
                    row = np.where(allowed[pos], clean[l, head, pos] @ k.T * scale + bias[head, pos], -np.inf)  # (T,)
                    out[l, head, pos] = ((softmax(row) - A[pos]) * dA[head, pos]).sum()
    return out


@blas.one_thread()
def _direct_qk_fix(tape: Tape, where: str, delta: np.ndarray, grads: dict[str, np.ndarray]) -> np.ndarray:
    """(L, C) AtP*'s QK fix for resid/attn/mlp/head nodes: for every later layer whose queries and
    keys read the node's change of the residual stream directly, the linear estimate of that path
    (the change . d metric / d resid_pre through those queries and keys) swapped for the exact one
    (the layer's pattern recomputed from the changed stream, its change . d metric / d pattern).
    ``delta``: (L, T, d) the change at each position (one node per position) or (L, h, T, d) each
    head's change at every position."""
    L = len(tape.layers)
    # a post-LN encoder's later layers read a node's change through the LayerNorms after it: no direct
    # path, the linear estimate stays; a resid node is its own layer's input, read directly
    reach = (lambda l: l + 1) if tape.post_ln else (lambda l: L)  # noqa: E731
    cols = delta.shape[1]
    out = np.zeros((L, cols))
    for l in range(L):
        for c in range(cols):
            if where == "head":
                dr, rows = delta[l, c], None  # (T, d): the head's output changes every position
            else:
                dr = np.zeros_like(tape.layers[l]["x"])
                dr[c], rows = delta[l, c], [c]
            for m in range(l if where == "resid" else l + 1, reach(l)):
                A = tape.layers[m]["p"]  # (h, T, T)
                exact = ((tape.patterns(m, tape.layers[m]["x"] + dr, rows) - A) * grads[site(m, "attn.pattern")]).sum()
                out[l, c] += exact - (dr * grads[f"blocks.{m}.qk_in"]).sum()
    return out


def attribute(model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: Target, *,
              where: str = "resid", qk_fix: bool = True) -> Attribution:
    """The attribution-patching grid of ``where`` (see the module docstring)."""
    return attribute_together(model, [(clean_ids, corrupt_ids, target)], where=where, qk_fix=qk_fix)[0]


def attribute_together(model: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int], Target]], *,
                       where: str = "resid", qk_fix: bool = True) -> list[Attribution]:
    """``attribute`` of each (clean ids, corrupted ids, target) of ``pairs``, every pair of as many
    tokens: the clean and corrupted passes of all of them run side by side and one backward for all
    the corrupted ones (the tape's forward_all and backward_all: a decoder's weight products take
    every pair's rows at once), for attn attribute --pairs. Equal to one pair at a time to float
    rounding. No pairs: no grids."""
    if where not in SITES:
        raise BadInput(f"--site {where!r}: choose one of {', '.join(SITES)}")
    if not pairs:
        return []
    for clean_ids, corrupt_ids, _ in pairs:
        check_same_length(model, list(clean_ids), list(corrupt_ids))
    if len({len(clean) for clean, _, _ in pairs}) > 1:
        raise BadInput("attribute_together takes pairs of as many tokens")
    if not has(model, "tape"):  # gradients without a tape (the torch backend's autograd): one pair at a time
        return [attribute_by_gradients(model, clean, corrupt, target, where=where, qk_fix=qk_fix)
                for clean, corrupt, target in pairs]
    # float32 where the model's own pass runs in it (the Llama family): twice as fast, and AtP is an estimate
    dtype = np.float32 if model.pass_dtype == np.float32 else np.float64
    tapes = [model.tape(dtype) for _ in range(2 * len(pairs))]  # clean, corrupted, clean, corrupted, ...
    tapes[0].forward_all(tapes, [list(ids) for clean, corrupt, _ in pairs for ids in (clean, corrupt)])  # each weight read once
    metrics, d_logits = [], []
    for (_, _, target), clean_tape, corrupt_tape in zip(pairs, tapes[::2], tapes[1::2]):
        m_clean = float(target.metric(clean_tape.logits(target.position)))
        logits = corrupt_tape.logits(target.position)
        m_corrupt = float(target.metric(logits))
        if abs(m_clean - m_corrupt) < 1e-9:
            raise BadInput(f"the clean and corrupted texts give the same {target.describe()} ({m_clean:.6g}): the "
                           "restored fraction is undefined; choose texts that differ in it")
        metrics.append((m_clean, m_corrupt))
        d_logits.append(target.gradient(logits))
    corrupt_tapes = tapes[1::2]
    all_grads = corrupt_tapes[0].backward_all(corrupt_tapes, [t.position for _, _, t in pairs], d_logits)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is damage (_estimate), not a RuntimeWarning
        return [_estimate(model, clean_tape, corrupt_tape, grads, where, qk_fix, *m)
                for clean_tape, corrupt_tape, grads, m in zip(tapes[::2], corrupt_tapes, all_grads, metrics)]


def attribute_by_gradients(model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: Target, *,
                           where: str = "resid", qk_fix: bool = True) -> Attribution:
    """The plain AtP grid of ``where`` from ``model.site_gradients`` (capability "grad"): the clean
    pass's site values, the corrupted pass's values and gradients."""
    if qk_fix:
        require(model, "tape", "AtP*'s QK fix (add --no-qk-fix: plain AtP runs on torch's autograd)")
    if where in ("key", "query"):
        require(model, "tape", f"--site {where} (a head's {where}, its pattern recomputed)")
    require(model, "grad", "attribution patching")
    name = SITE_NAMES[where]
    L = model.layers
    clean_values, _, clean_logits = model.site_gradients(list(clean_ids), target.position)
    values, grads, logits = model.site_gradients(list(corrupt_ids), target.position, target.gradient)
    missing = [n for n in (site(0, name), site(L - 1, name)) if n not in grads]
    if missing:
        raise BadInput(f"--site {where} needs the modules of each layer's attention and MLP, which attn names for "
                       f"GPT-2 and the Llama family; model '{visible(str(model.name))}' "
                       f"({visible(str(model.model_type))}, {model.backend} backend) is attributed at --site resid")
    m_clean, m_corrupt = float(target.metric(clean_logits)), float(target.metric(logits))
    if abs(m_clean - m_corrupt) < 1e-9:
        raise BadInput(f"the clean and corrupted texts give the same {target.describe()} ({m_clean:.6g}): the "
                       "restored fraction is undefined; choose texts that differ in it")
    before = np.stack([values[site(l, name)] for l in range(L)])  # (L, T, d) or (L, T, h, d_head)
    after = np.stack([clean_values[site(l, name)] for l in range(L)])
    g = np.stack([grads[site(l, name)] for l in range(L)])
    est = np.einsum("lthk,lthk->lh", after - before, g) if where == "head" else np.einsum("ltd,ltd->lt", after - before, g)
    if not np.isfinite(est).all():
        raise RuntimeFailure(f"damaged model: NaN or infinity in the --site {where} attribution")
    return Attribution(est / (m_clean - m_corrupt), m_clean, m_corrupt, where, False, [f"L{l}" for l in range(L)])


def _estimate(model: Any, clean_tape: Tape, corrupt_tape: Tape, grads: dict[str, np.ndarray], where: str,
              qk_fix: bool, m_clean: float, m_corrupt: float) -> Attribution:
    """One pair's grid from its two tapes and the corrupted one's gradients."""
    before, after = _sites(corrupt_tape)[where], _sites(clean_tape)[where]
    L, h = model.layers, model.heads
    g = np.stack([grads[site(l, SITE_NAMES[where])] for l in range(L)])
    if where == "head":  # (L, T, h, d_head): each head over every position
        est = np.einsum("lthk,lthk->lh", after - before, g)
        if qk_fix:  # each head's change of the stream, (L, h, T, d): z's change through its rows of W_O
            w_o = np.stack([t["W"]["o"][0].reshape(h, -1, corrupt_tape.embed.shape[1]) for t in corrupt_tape.layers])
            est = est + _direct_qk_fix(corrupt_tape, where, np.einsum("lthk,lhkd->lhtd", after - before, w_o), grads)
    elif where in ("key", "query"):  # (L, h, T, d_head) -> (L, h, T)
        est = _qk_fixed(corrupt_tape, after, where, grads) if qk_fix else np.einsum("lhtk,lhtk->lht", after - before, g)
        est = est.reshape(L * h, -1)
    else:  # (L, T, d)
        est = np.einsum("ltd,ltd->lt", after - before, g)
        if qk_fix:
            est = est + _direct_qk_fix(corrupt_tape, where, after - before, grads)
    if not np.isfinite(est).all():  # the QK fix's patterns, recomputed with clean keys or queries, overflowed
        raise RuntimeFailure(f"damaged model: NaN or infinity in the --site {where} attribution (an overflow "
                             f"on the {corrupt_tape.dtype} gradient tape)")
    rows = [f"L{l}H{x}" for l in range(L) for x in range(h)] if where in ("key", "query") else [f"L{l}" for l in range(L)]
    return Attribution(est / (m_clean - m_corrupt), m_clean, m_corrupt, where, qk_fix, rows)


def verify(model: Any, clean_ids: Sequence[int], corrupt_ids: Sequence[int], target: Target, res: Attribution,
           k: int) -> Attribution:
    """``res`` with its ``k`` largest cells (by size) also patched exactly: one traced pass of the
    corrupted text each, clean's value put in by an intervention."""
    if k < 0:
        raise BadInput("--verify takes a count of cells, 0 or more")
    where = res.where
    name = SITE_NAMES[where]
    clean_tr = model.trace(list(clean_ids), [f"blocks.*.{name}"])
    order = np.argsort(-np.abs(res.values), axis=None, kind="stable")[:k]
    cells = []
    for flat in order:
        r, c = np.unravel_index(flat, res.values.shape)
        if where in ("key", "query"):
            l, head = divmod(int(r), model.heads)
            value = clean_tr[site(l, name)][head, c]
            iv = Intervention(site(l, name), "replace", head=head, position=int(c), value=value)
        elif where == "head":
            l = int(r)
            iv = Intervention(site(l, name), "replace", head=int(c), value=clean_tr[site(l, name)][:, c])
        else:
            l = int(r)
            iv = Intervention(site(l, name), "replace", position=int(c), value=clean_tr[site(l, name)][c])
        tr = model.trace(list(corrupt_ids), "logits", interventions=[iv])
        exact = (float(target.metric(tr["logits"][target.position])) - res.corrupt) / (res.clean - res.corrupt)
        cells.append({"row": res.row_labels[int(r)], "column": int(c), "estimate": float(res.values[r, c]),
                      "exact": exact})
    res.verified = cells
    return res
