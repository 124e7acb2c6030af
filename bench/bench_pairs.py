"""Attribution patching over a dataset of prompt pairs: ``attn attribute --pairs`` beside a
TransformerLens loop doing the same AtP, in one run, on the SmolLM2-135M-shaped model.

Run from the repository root with the [transformers] extra and transformer-lens installed:

    python bench/bench_pairs.py --pairs 1000            # the full figure (most of it TransformerLens's loop)
    python bench/bench_pairs.py --pairs 100 --keep DIR  # fewer pairs; the model reused from DIR

The model is bench_llama.py's (30 layers x 9 heads, 3 key-value heads, hidden 576, random weights,
bfloat16 on disk). The pairs are made here, seeded: 12-word clean texts from a small vocabulary,
each corrupted by swapping one word, kept when both have the mode's token count (so the resid grid,
layers x positions, averages over one set of positions), the target and contrast two of the
tokenizer's own tokens (a logit difference). Both sides run float32 on the CPU with --threads
threads (1 by default; attn's BLAS held to them by threadpoolctl), the model loaded and warmed up before the clock starts:

- attn: ``compute_pairs(PairsRun(FILE, "attribute", site="resid", qk_fix=False))``, what
  ``attn attribute --pairs FILE --site resid --no-qk-fix`` runs in one process (plain AtP, the
  method TransformerLens users write; --workers 1, no --out): consecutive pairs of one token length
  run side by side through the tape, up to BATCH_ROWS tokens a batch (causal/pair_sums.pair_values);
- TransformerLens 4 (``TransformerBridge.boot_transformers``): per pair, ``run_with_cache`` of the
  clean text keeping ``blocks.{l}.hook_in`` (the residual stream into layer l), then the corrupted
  text under forward hooks keeping the same activations and backward hooks keeping their
  gradients, ``metric.backward()``, and (clean - corrupt) . grad summed over the width: its sum over
  the pairs divided by the sum of metric(clean) - metric(corrupt), and (the second grid) each
  pair's divided by its own difference, averaged.

The grids are compared (largest difference; both the fraction of the mean difference that attn
draws and the mean of each pair's fraction) so a fast wrong one shows, and the throughput of
each (pairs a second) is printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))
from bench_llama import build  # noqa: E402
from attncli.env import runtime  # noqa: E402
from attncli.causal.target import resolve  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.pipeline.pairs_compute import PairsRun, compute_pairs  # noqa: E402

WORDS = ("the quick brown fox jumps over lazy dog cat sat on mat and log time flies like an arrow fruit a banana "
         "attention is all you need").split()


def make_pairs(model, n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` pairs of 12-word texts of one token count (see the module docstring)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # the ids whose token string names them again (the model's vocab_size is SmolLM2's 49,152, its
    # small test tokenizer's far fewer: drawing from every id found a pair in tens of thousands of tries)
    named = np.array([i for i in range(3, model.vocab_size) if (s := model.token_strings([i])[0])
                      and model.vocab_id(s) == i])
    rows, length = [], None
    while len(rows) < n:
        words = [str(w) for w in rng.choice(WORDS, 12)]
        other = list(words)
        other[int(rng.integers(12))] = str(rng.choice(WORDS))
        clean, corrupt = " ".join(words), " ".join(other)
        c, k = model.encode(clean).ids, model.encode(corrupt).ids
        if len(c) != len(k) or c == k:
            continue
        length = length or len(c)
        if len(c) != length:
            continue
        a, b = (int(x) for x in rng.choice(named, 2, replace=False))
        target, contrast = model.token_strings([a, b])
        rows.append({"clean": clean, "corrupt": corrupt, "target": target, "contrast": contrast})
    return rows


def lens_atp(bridge, model, rows):
    """(L, T) twice: the plain-AtP resid grid over ``rows`` as the fraction of the mean difference
    (sum of the changes / sum of clean - corrupt, what attn draws) and as the mean of each pair's own
    fraction, by TransformerLens hooks (module docstring)."""
    import numpy as np
    import torch

    L = model.layers
    names = [f"blocks.{l}.hook_in" for l in range(L)]
    total, change, gap = None, None, 0.0
    for row in rows:
        clean, corrupt = model.encode(row["clean"]).ids, model.encode(row["corrupt"]).ids
        t = resolve(model, clean, target=row["target"], contrast=row["contrast"])
        with torch.no_grad():
            logits, cache = bridge.run_with_cache(torch.tensor([clean]), names_filter=lambda n: n in names)
        m_clean = float(logits[0, -1, t.token] - logits[0, -1, t.contrast])
        acts, grads = {}, {}

        def keep(x, hook):
            acts[hook.name] = x.detach()

        def keep_grad(g, hook):
            grads[hook.name] = g.detach()

        with bridge.hooks(fwd_hooks=[(n, keep) for n in names], bwd_hooks=[(n, keep_grad) for n in names]):
            out = bridge(torch.tensor([corrupt]))
            metric = out[0, -1, t.token] - out[0, -1, t.contrast]
            metric.backward()
        m_corrupt = float(metric.detach())
        moved = torch.stack([((cache[n] - acts[n]) * grads[n]).sum(-1)[0] for n in names]).double().numpy()  # (L, T)
        grid = moved / (m_clean - m_corrupt)
        total = grid if total is None else total + grid
        change = moved if change is None else change + moved
        gap += m_clean - m_corrupt
    return change / gap, total / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000, help="how many prompt pairs (default 1000)")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads and attn's BLAS threads (default 1)")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the model here")
    args = ap.parse_args()
    import numpy as np
    import torch

    from _causal_peer import boot_lens

    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    runtime.choose_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(args.threads):  # every BLAS on --threads
        directory = args.keep or Path(tmp) / "smol"
        if not (directory / "config.json").is_file():
            directory.mkdir(parents=True, exist_ok=True)
            build(directory)
        model = load(str(directory), backend="numpy")
        rows = make_pairs(model, args.pairs)
        path = Path(tmp) / "pairs.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        tokens = len(model.encode(rows[0]["clean"]).ids)
        bridge = boot_lens(directory)
        run = PairsRun(path, "attribute", site="resid", qk_fix=False, transformer=str(directory))
        model.trace(model.encode(rows[0]["clean"]).ids, "logits")  # warm-ups: attn's weights widened once
        lens_atp(bridge, model, rows[:1])
        print(f"{len(rows)} pairs of {tokens} tokens, SmolLM2-135M shape, plain AtP at resid (layers x positions), "
              f"threads {args.threads}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
        t0 = time.perf_counter()
        doc = compute_pairs(run, model)
        t_attn = time.perf_counter() - t0
        t0 = time.perf_counter()
        lens, lens_each = lens_atp(bridge, model, rows)
        t_lens = time.perf_counter() - t0
        diff = np.abs(np.asarray(doc["grid"]) - lens).max()
        diff_each = np.abs(np.asarray(doc["mean"]["grid"]) - lens_each).max()
        print(f"{'':<44} {'seconds':>8} {'pairs/s':>8}")
        print(f"{'attn attribute --pairs --no-qk-fix':<44} {t_attn:>8.1f} {len(rows) / t_attn:>8.2f}")
        print(f"{'TransformerLens loop (run_with_cache + bwd)':<44} {t_lens:>8.1f} {len(rows) / t_lens:>8.2f}")
        print(f"attn / TransformerLens throughput: {t_lens / t_attn:.2f}x; load {os.getloadavg()[0]:.1f}")
        print(f"largest difference of the grids: fraction of the mean difference (drawn) {diff:.2e} (of values up to "
              f"{np.abs(lens).max():.3g}); mean of each pair's fraction {diff_each:.2e} (of values up to "
              f"{np.abs(lens_each).max():.3g})")


if __name__ == "__main__":
    main()
