"""The training loop of ``attn train-attention``: sentences encoded and batched by length, AdamW
with a warm-up and a cosine schedule over steps or time (whichever runs out first), gradient
clipping, a loss that goes to NaN stopped with a message, the held-out loss. torch is imported
only inside the functions.

Shapes: B sentences in a batch, T tokens, V_out output vocabulary size.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from attncli.errors import BadInput, RuntimeFailure
from attncli.tinylm.train_config import TrainConfig


def auto_threads() -> int:
    """The cores not already busy (by the 1-minute load average), at least 1.

    On a shared machine this matters: with both cores busy elsewhere, 2 torch threads ran a
    training step 3x slower than 1 thread (they wait on each other at every operation).
    """
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, int(cores - busy + 0.5)))


def encode(sentences, token_index, vocab):
    """Per sentence: input ids into the token table (n,) and target output ids (n,)."""
    return [(np.array([token_index[w] for w in s], dtype=np.int64), vocab.targets(s)) for s in sentences]


def _batches(encoded, batch_tokens: int, rng: np.random.Generator | None):
    """Sentences grouped by length (little padding), about ``batch_tokens`` tokens per batch."""
    order = np.argsort([len(x) for x, _ in encoded], kind="stable")
    batches, cur, longest = [], [], 0
    for i in order:
        longest = max(longest, len(encoded[i][0]))
        if cur and longest * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], len(encoded[i][0])
        cur.append(i)
    if cur:
        batches.append(cur)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def _pad(encoded, batch):
    import torch

    T = max(len(encoded[i][0]) for i in batch)
    ids = np.zeros((len(batch), T), dtype=np.int64)  # (B, T)
    tgt = np.full((len(batch), T), -100, dtype=np.int64)  # (B, T); -100 = padding, ignored
    for r, i in enumerate(batch):
        x, y = encoded[i]
        ids[r, : len(x)] = x
        tgt[r, : len(y)] = y
    return torch.from_numpy(ids), torch.from_numpy(tgt)


def evaluate(model, encoded, batch_tokens: int) -> tuple[float, int]:
    """Total negative log-likelihood (nats) and number of targets over ``encoded``."""
    import torch
    import torch.nn.functional as F

    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for batch in _batches(encoded, batch_tokens, None):
            ids, tgt = _pad(encoded, batch)
            logits = model(ids)  # (B, T, V_out)
            total += float(F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=-100, reduction="sum"))
            n += int((tgt != -100).sum())
    return total, n


def _lr_at(cfg: TrainConfig, step: int, progress: float) -> float:
    """Linear warm-up, then cosine decay to 10% over ``progress`` in [0, 1] (steps or time, whichever is further)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def diverged(cfg: TrainConfig, what: str) -> RuntimeFailure:
    """The error of a training run whose loss went to NaN or infinity (nothing is stored)."""
    return RuntimeFailure(
        f"training diverged: {what} (--lr {cfg.lr:g}); nothing was saved: try a lower --lr, "
        f"e.g. --lr {cfg.lr / 10:g} (the default is 3e-3)"
    )


def fit(model, train_set, cfg: TrainConfig, rng: np.random.Generator, on_progress) -> dict[str, Any]:
    """The training loop: AdamW, warm-up + cosine schedule over steps or time, gradient clipping."""
    import torch
    import torch.nn.functional as F

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))
    total_steps = len(_batches(train_set, cfg.batch_tokens, None)) * cfg.epochs
    budget = cfg.max_minutes * 60.0
    start = time.perf_counter()
    step, seen_tokens, stopped_early, loss_avg = 0, 0, False, None
    for epoch in range(cfg.epochs):
        model.train()
        for batch in _batches(train_set, cfg.batch_tokens, rng):
            elapsed = time.perf_counter() - start
            if elapsed > budget:
                stopped_early = True
                break
            for group in opt.param_groups:
                group["lr"] = _lr_at(cfg, step, max(step / total_steps, elapsed / budget))
            ids, tgt = _pad(train_set, batch)  # (B, T), (B, T)
            logits = model(ids)  # (B, T, V_out)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=-100)
            loss_now = float(loss.detach())
            if not math.isfinite(loss_now):
                raise diverged(cfg, f"the training loss became {loss_now} at step {step + 1}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            seen_tokens += int((tgt != -100).sum())
            loss_avg = loss_now if loss_avg is None else 0.95 * loss_avg + 0.05 * loss_now
            if on_progress:
                on_progress(step=step, total=total_steps, epoch=epoch + 1, loss=loss_avg,
                            tokens_per_s=seen_tokens / max(time.perf_counter() - start, 1e-9))
        if stopped_early:
            break
    if step == 0:
        raise BadInput("--max-minutes left no time for a single training step: give it more time")
    return {"steps": step, "seen_tokens": seen_tokens, "stopped_early": stopped_early,
            "seconds": time.perf_counter() - start, "parameters": int(sum(p.numel() for p in params))}
