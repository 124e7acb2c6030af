"""Head ablation and activation patching as interventions on a traced forward pass (either backend).

Shapes: L layers, h heads, T tokens, d the model dimension, d_head a head's, V the vocabulary.

    ablate   grid[l, h] = metric(head h of layer l zeroed, or set to its mean) - metric(clean)
             the head's output is its slice of blocks.{l}.attn.z (T, h, d_head), at every position
             or at one; the mean is over every position of every reference text
    patch    grid[l, x] = (metric(corrupt, site x of layer l set to clean's) - metric(corrupt))
                          / (metric(clean) - metric(corrupt))             the restored fraction
             resid: blocks.{l}.resid_pre at position x;  attn: blocks.{l}.attn.out at x;
             mlp: blocks.{l}.mlp.out at x;  head: blocks.{l}.attn.z head x at every position

Each intervention at layer l reruns only layers l..L-1, from the cached residual stream into
layer l (``start``). On attn's NumPy pass (the fast path) one layer's heads (or positions) run as
one batch: B copies of the stream, each with its own intervention, and the final-norm rows of a
whole grid are unembedded at once, in float32 (``in_float32``: GPT-2, BERT and MPNet's float64 pass
gives way to its float32 twin; docs/transformers.md states the difference). Any other model with ``trace`` (the torch backend: transformers'
own modules under hooks, one text per pass) runs one resumed ``trace`` per intervention and reads
its logits: the same interventions, the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from attncli.causal.target import CAUSAL, DLA, GRADIENTS, ON_ENCODER, Target
from attncli.errors import BadInput
from attncli.model.interface import has, refusal
from attncli.io.textio import visible
from attncli.model.trace import Intervention, site

MODES = ("zero", "mean")
PATCH_SITES = {"resid": "resid_pre", "attn": "attn.out", "mlp": "mlp.out", "head": "attn.z"}
UNEMBED_ROWS = 512  # final-norm rows unembedded per product: (512, V) logits at a time


@dataclass
class Grid:
    values: np.ndarray  # (L, C) the effect of each intervention
    clean: float  # the metric of the clean run
    corrupt: float | None = None  # patching: the metric of the corrupted run


def batched(model: Any) -> bool:
    """The model reruns B interventions as one batch (``rerun``; else one resumed ``trace`` each)."""
    return has(model, "rerun")


def in_float32(model: Any) -> Any:
    """The model whose passes a grid runs: a batched one's float32 pass (GPT-2, BERT and MPNet
    otherwise run in float64; the Llama family and the built-in LM in float32 already: within
    float32 rounding of float64, twice as fast), any other model itself (the torch backend: float32)."""
    return model.float32_pass() if batched(model) else model


def missing(model: Any, kind: str = "ablate") -> str | None:
    """The refusal ``attn {kind}`` ("ablate", "patch", "dla", "attribute", "circuit") and explore's G, P, D and E give
    ``model``, before any pass, or None when it runs: the capabilities each needs, in order
    (dla: a pre-norm decoder's parts; every test: a trace to resume, and an encoder's MLM head)."""
    if kind in ("attribute", "circuit"):  # gradients of the metric (a tape's or torch's autograd), no resumed trace
        needs = ([] if model.is_decoder else [("mlm", ON_ENCODER)]) + [("grad", GRADIENTS)]
    else:
        needs = [("dla", DLA), ("output_weight", DLA)] if kind == "dla" else []
        needs += [("resume", CAUSAL)] + ([] if model.is_decoder else [("mlm", ON_ENCODER)])
    for capability, doing in needs:
        if not has(model, capability):
            return refusal(model, capability, doing)
    return None


def check_traced(model: Any, kind: str = "ablate") -> None:
    """BadInput with ``missing(model, kind)`` when there is one: an encoder-decoder, a family the
    torch backend's trace does not map, an encoder without an MLM head, dla off a pre-norm decoder."""
    reason = missing(model, kind)
    if reason is not None:
        raise BadInput(reason)


def final_rows(model: Any, ids: Sequence[int], layer: int, resid: np.ndarray,
               per_batch: list[list[Intervention]], position: int) -> np.ndarray:
    """(B, d) the final norm's output at ``position`` of B passes of ``ids`` from ``layer`` on (the
    model's batched ``rerun``): what every grid is made of. The logits are left to ``measure``."""
    return model.rerun(list(ids), layer, resid, per_batch, position)


def measure(model: Any, target: Target, rows: np.ndarray) -> np.ndarray:
    """(N,) the metric of N final-norm rows (N, d): the unembedding (49152 x 576 floats for a
    SmolLM2: 113 MB, read from memory once per call) applied UNEMBED_ROWS rows at a time."""
    return np.concatenate([target.metric(model.unembed(rows[s: s + UNEMBED_ROWS]))
                           for s in range(0, len(rows), UNEMBED_ROWS)])


def traced_metrics(model: Any, ids: Sequence[int], layer: int, resid: np.ndarray,
                   per_batch: list[list[Intervention]], target: Target) -> np.ndarray:
    """(B,) the metric of B passes as ``final_rows``'s, one ``trace`` each, resumed at ``layer``
    from ``resid`` (T, d): the generic path, for a model without attn's batched NumPy pass."""
    out = np.empty(len(per_batch))
    for b, ivs in enumerate(per_batch):
        tr = model.trace(list(ids), "logits", interventions=ivs, start=(layer, resid))
        out[b] = target.metric(tr["logits"][target.position])
    return out


def rerun(model: Any, ids: Sequence[int], layer: int, resid: np.ndarray, per_batch: list[list[Intervention]],
          target: Target) -> np.ndarray:
    """One layer's part of a grid: NumPy, (B, d) final-norm rows (``measured`` unembeds them);
    otherwise (B,) metrics."""
    if batched(model):
        return final_rows(model, ids, layer, resid, per_batch, target.position)
    return traced_metrics(model, ids, layer, resid, per_batch, target)


def measured(model: Any, target: Target, parts: list[np.ndarray]) -> np.ndarray:
    """(N,) the metrics of ``rerun``'s parts, in order."""
    return measure(model, target, np.concatenate(parts)) if batched(model) else np.concatenate(parts)


def run_from(model: Any, ids: Sequence[int], layer: int, resid: np.ndarray, per_batch: list[list[Intervention]],
             target: Target) -> np.ndarray:
    """(B,) the metric of B passes of ``ids`` from ``layer`` on, each with its own interventions."""
    return measured(model, target, [rerun(model, ids, layer, resid, per_batch, target)])


def clean_run(model: Any, ids: Sequence[int], target: Target, keep: list[str]) -> tuple[Any, float]:
    if not batched(model):
        tr = model.trace(list(ids), keep + ["blocks.*.resid_pre", "logits"])
        return tr, float(target.metric(tr["logits"][target.position]))
    tr = model.trace(list(ids), keep + ["blocks.*.resid_pre", "final_norm"])
    return tr, float(target.metric(model.unembed(tr["final_norm"][target.position])))


def head_means(model: Any, texts_ids: list[list[int]]) -> np.ndarray:
    """(L, h, d_head) each head's output (attn.z) averaged over every position of every text."""
    if not texts_ids:
        raise BadInput("the --reference file holds no text: mean ablation needs at least one")
    total, count = None, 0
    for ids in texts_ids:
        tr = model.trace(ids, "blocks.*.attn.z")
        z = tr.stack("attn.z", model.layers).astype(np.float64)  # (L, T, h, d_head)
        total = z.sum(axis=1) if total is None else total + z.sum(axis=1)
        count += z.shape[1]
    return total / count  # (L, h, d_head)


def ablate(model: Any, ids: Sequence[int], target: Target, *, mode: str = "zero", means: np.ndarray | None = None,
           position: int | None = None, progress=None) -> Grid:
    """grid (L, h): the change in the metric when each head's output is zeroed or set to its mean
    (``means`` (L, h, d_head)), at every position or at ``position``."""
    check_traced(model)
    if mode not in MODES:
        raise BadInput(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    if mode == "mean" and means is None:
        raise BadInput("--mode mean needs --reference FILE: the texts a head's mean output is taken over")
    if position is not None and not -len(ids) <= position < len(ids):
        raise BadInput(f"--position {position} is outside the text's {len(ids)} tokens (0..{len(ids) - 1})")
    model = in_float32(model)
    tr, clean = clean_run(model, ids, target, [])
    rows = []
    for l in range(model.layers):
        per = [[Intervention(site(l, "attn.z"), mode, head=h, position=position,
                             value=None if mode == "zero" else means[l, h])] for h in range(model.heads)]
        rows.append(rerun(model, ids, l, tr[site(l, "resid_pre")], per, target))  # (h, d) or (h,)
        if progress is not None:
            progress()
    grid = measured(model, target, rows).reshape(model.layers, model.heads) - clean
    return Grid(grid, clean)


def check_same_length(model: Any, clean_ids: list[int], corrupt_ids: list[int]) -> None:
    if len(clean_ids) == len(corrupt_ids):
        return
    show = lambda ids: " ".join(repr(t) for t in model.token_strings(ids))  # noqa: E731
    raise BadInput(f"the clean and corrupted texts must have the same number of tokens (patching copies "
                   f"position by position): clean has {len(clean_ids)}: {visible(show(clean_ids))}; corrupted "
                   f"has {len(corrupt_ids)}: {visible(show(corrupt_ids))}")


def patch(model: Any, clean_ids: list[int], corrupt_ids: list[int], target: Target, *, where: str = "resid",
          progress=None) -> Grid:
    """grid (L, T) (resid, attn, mlp) or (L, h) (head): the restored fraction of the metric when
    clean's value of that site is copied into the corrupted run."""
    check_traced(model)
    if where not in PATCH_SITES:
        raise BadInput(f"--site {where!r}: choose one of {', '.join(PATCH_SITES)}")
    check_same_length(model, clean_ids, corrupt_ids)
    name = PATCH_SITES[where]
    model = in_float32(model)
    clean_tr, clean = clean_run(model, clean_ids, target, [f"blocks.*.{name}"])
    corrupt_tr, corrupt = clean_run(model, corrupt_ids, target, [])
    if abs(clean - corrupt) < 1e-9:
        raise BadInput(f"the clean and corrupted texts give the same {target.describe()} ({clean:.6g}): the "
                       "restored fraction (patched - corrupt) / (clean - corrupt) is undefined; choose texts "
                       "that differ in it")
    cols = model.heads if where == "head" else len(clean_ids)
    rows = []
    for l in range(model.layers):
        value = clean_tr[site(l, name)]  # (T, d) or (T, h, d_head)
        if where == "head":
            per = [[Intervention(site(l, name), "replace", head=h, value=value[:, h])] for h in range(cols)]
        else:
            per = [[Intervention(site(l, name), "replace", position=t, value=value[t])] for t in range(cols)]
        rows.append(rerun(model, corrupt_ids, l, corrupt_tr[site(l, "resid_pre")], per, target))
        if progress is not None:
            progress()
    patched = measured(model, target, rows).reshape(model.layers, cols)
    return Grid((patched - corrupt) / (clean - corrupt), clean, corrupt)
