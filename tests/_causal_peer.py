"""The head-ablation grid three ways, for the peer test (tests/causal/test_causal_peer.py) and the bench
(bench/bench_ablate_peer.py): for every layer l and head h, the change in log p(target) at the
last position when head h's z (its mix of values, before the output projection) is zeroed.

    trace_grid(model, ids, target)       any model with attn's ``trace`` (either backend), a loop of traces
    numpy_grid(model, ids, target)       attn's NumPy grid: attncli.causal.grids.ablate, what ``attn ablate`` runs
    lens_grid(bridge, ids, target)       TransformerLens 4: a TransformerBridge, hook_z zeroed per head
    hook_grid(hf_model, ids, target)     plain transformers: a forward pre-hook on each layer's output projection
    lens_atp(bridge, clean, corrupt, target)   attribution patching the TransformerLens way (Nanda's demo):
                                         run_with_cache on both texts, backward hooks on the corrupted one

Each returns (L, h) float64. Importing this module imports neither torch nor transformer_lens.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from attncli.model.trace import Intervention


def log_p(logits: np.ndarray, target: int) -> float:
    """log softmax(logits)[target] in float64, from one row of logits (V,)."""
    row = np.asarray(logits, dtype=np.float64)
    top = row.max()
    return float(row[target] - top - np.log(np.exp(row - top).sum()))


def trace_grid(model: Any, ids: Sequence[int], target: int, resume: bool = True,
               layers: int | None = None) -> np.ndarray:
    """(L, h) by ``model.trace``: one clean pass keeping every layer's resid_pre, then per head a
    pass with ``blocks.{l}.attn.z`` zeroed at that head, resumed at layer l from the clean stream
    (``resume``) or run whole. ``layers``: only the first that many layers' rows."""
    ids = list(ids)
    clean = model.trace(ids, ["logits", "blocks.*.resid_pre"])
    base = log_p(clean["logits"][-1], target)
    grid = np.zeros((layers or model.layers, model.heads))
    for l in range(len(grid)):
        start = (l, clean[f"blocks.{l}.resid_pre"]) if resume else None
        for h in range(model.heads):
            t = model.trace(ids, "logits", interventions=[Intervention(f"blocks.{l}.attn.z", head=h)], start=start)
            grid[l, h] = log_p(t["logits"][-1], target) - base
    return grid


def numpy_grid(model: Any, ids: Sequence[int], target: int) -> np.ndarray:
    """(L, h) by ``attncli.causal.grids.ablate`` (the core of ``attn ablate``; on a NumPy model its
    batched path: each layer's heads as one batch of copies of the cached stream)."""
    from attncli.causal import grids
    from attncli.causal.target import Target

    return grids.ablate(model, list(ids), Target(len(ids) - 1, int(target), "target")).values


def lens_grid(bridge: Any, ids: Sequence[int], target: int, layers: int | None = None) -> np.ndarray:
    """(L, h) with TransformerLens: ``run_with_hooks`` zeroing ``blocks.{l}.attn.hook_z[:, :, h]``
    (hook_z is (batch, T, h, d_head))."""
    import torch

    cfg = bridge.cfg
    tokens = torch.tensor([list(ids)])
    with torch.inference_mode():
        base = log_p(bridge(tokens)[0, -1].double().numpy(), target)
        grid = np.zeros((layers or cfg.n_layers, cfg.n_heads))
        for l in range(len(grid)):
            for h in range(cfg.n_heads):
                def zero(z, hook, h=h):
                    z = z.clone()
                    z[:, :, h] = 0
                    return z

                logits = bridge.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{l}.attn.hook_z", zero)])
                grid[l, h] = log_p(logits[0, -1].double().numpy(), target) - base
    return grid


# attn's attribution sites -> TransformerLens 4's hook names (hook_z, hook_q, hook_k: (batch, T, h, d_head))
LENS_SITES = {"resid": "hook_resid_pre", "attn": "hook_attn_out", "mlp": "hook_mlp_out", "head": "attn.hook_z",
              "key": "attn.hook_k", "query": "attn.hook_q"}


def lens_atp(bridge: Any, clean: Sequence[int], corrupt: Sequence[int], target: int) -> dict[str, np.ndarray]:
    """Attribution patching of log p(target) at the last position with TransformerLens alone, as
    Neel Nanda's attribution-patching demo does it: the clean run's activations by ``run_with_cache``,
    the corrupted run's by ``run_with_cache`` with backward hooks keeping each site's gradient, then

        atp = sum (clean - corrupt) * grad|corrupt / (metric(clean) - metric(corrupt))

    summed over d (resid/attn/mlp: (L, T)), over T and d_head (head: (L, h)), over d_head (key,
    query: (L * h, T), rows layer-major). Float64 when the bridge is."""
    import torch

    L = bridge.cfg.n_layers
    names = {f"blocks.{l}.{hook}": (where, l) for where, hook in LENS_SITES.items() for l in range(L)}
    keep = lambda name: name in names  # noqa: E731
    tokens = [torch.tensor([list(ids)]) for ids in (clean, corrupt)]
    with torch.no_grad():
        logits, clean_cache = bridge.run_with_cache(tokens[0], names_filter=keep)
    m_clean = torch.log_softmax(logits[0, -1], dim=-1)[target].item()
    grads: dict[str, Any] = {}
    for name in names:
        bridge.add_hook(name, lambda g, hook, name=name: grads.__setitem__(name, g.detach()), "bwd")
    try:
        logits, corrupt_cache = bridge.run_with_cache(tokens[1], names_filter=keep)
        metric = torch.log_softmax(logits[0, -1], dim=-1)[target]
        metric.backward()
    finally:
        bridge.reset_hooks()
    m_corrupt = metric.item()
    out: dict[str, list] = {where: [None] * L for where in LENS_SITES}
    for name, (where, l) in names.items():
        change = (clean_cache[name] - corrupt_cache[name]).detach()[0]  # (T, d) or (T, h, d_head)
        prod = (change * grads[name][0]).double().numpy() / (m_clean - m_corrupt)
        out[where][l] = (prod.sum(axis=(0, 2)) if where == "head" else  # (h,)
                         prod.sum(axis=-1).T if where in ("key", "query") else prod.sum(axis=-1))  # (h, T), (T,)
    grids = {where: np.concatenate(rows) if where in ("key", "query") else np.stack(rows)
             for where, rows in out.items()}
    return grids | {"clean": np.float64(m_clean), "corrupt": np.float64(m_corrupt)}


def output_projections(hf_model: Any) -> list[Any]:
    """Each layer's attention output projection of a GPT-2 or Llama-family transformers model."""
    base = hf_model.base_model
    if hasattr(base, "h"):
        return [block.attn.c_proj for block in base.h]
    return [layer.self_attn.o_proj for layer in base.layers]


def hook_grid(hf_model: Any, ids: Sequence[int], target: int) -> np.ndarray:
    """(L, h) with plain transformers: a forward pre-hook on layer l's output projection zeroing
    the input columns of head h (the projection's input is z, (1, T, h d_head))."""
    import torch

    projections = output_projections(hf_model)
    heads = hf_model.config.num_attention_heads
    tokens = torch.tensor([list(ids)])
    with torch.inference_mode():
        base = log_p(hf_model(tokens).logits[0, -1].double().numpy(), target)
        grid = np.zeros((len(projections), heads))
        for l, proj in enumerate(projections):
            for h in range(heads):
                def zero(module, args, h=h):
                    x = args[0].clone()
                    d_head = x.shape[-1] // heads
                    x[..., h * d_head:(h + 1) * d_head] = 0
                    return (x,) + tuple(args[1:])

                handle = proj.register_forward_pre_hook(zero)
                try:
                    logits = hf_model(tokens).logits
                finally:
                    handle.remove()
                grid[l, h] = log_p(logits[0, -1].double().numpy(), target) - base
    return grid


def boot_lens(model_dir: str, dtype: Any = None) -> Any:
    """A TransformerBridge over the transformers model in the local folder ``model_dir``, offline."""
    import os

    import torch
    from transformer_lens.model_bridge import TransformerBridge

    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # for this load only: other tests read the variable too
    try:
        bridge = TransformerBridge.boot_transformers(str(model_dir), device="cpu", dtype=dtype or torch.float32)
    finally:
        if before is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = before
    bridge.eval()
    return bridge
