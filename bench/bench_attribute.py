"""Attribution patching beside attn's own exact patching grid, on a SmolLM2-135M-shaped model.

Run from the repository root with the project and its [transformers] extra installed:

    python bench/bench_attribute.py              # build the model in a temp folder
    python bench/bench_attribute.py --keep DIR   # reuse (or write) it in DIR

The model is bench_llama.py's (30 layers x 9 heads, 3 key-value heads, hidden 576, random weights,
bfloat16 on disk); the clean and corrupted texts are ``--tokens`` (20) tokens each. For each site: the
wall time of ``attribute`` (plain AtP, and AtP* with the QK fix) and of ``grids.patch`` (one resumed
pass per cell, each layer's cells as one batch), best of ``--runs``, once the model is loaded and
warmed up; and plain AtP's CPU time (the least of the runs: the work, whatever the machine's load).
"""

from __future__ import annotations

import os

from bench_llama import best, best_wall_cpu, clean_corrupt, smol_folder, smol_parser  # first: this checkout's attncli
from attncli.causal import grids
from attncli.causal.attribution import attribute
from attncli.hf import load

def main() -> None:
    ap = smol_parser(__doc__, runs=3)
    ap.add_argument("--tokens", type=int, default=20, help="cut both texts to this many tokens")
    ap.add_argument("--sites", nargs="+", default=["head", "resid", "attn", "mlp"])
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with smol_folder(args.keep) as directory:
        model = load(str(directory), backend="numpy")
        clean, corrupt, target = clean_corrupt(model, args.tokens)
        n = len(clean)
        model.trace(clean, "logits")  # the warm-up: the weights widened once
        print(f"{'site':<6} {'tokens':>6} {'AtP s':>8} {'AtP cpu':>8} {'AtP* s':>8} {'exact s':>8} {'exact/AtP':>10} "
              f"{'exact/AtP*':>10}")
        for site in args.sites:
            plain, cpu = best_wall_cpu(lambda: attribute(model, clean, corrupt, target, where=site, qk_fix=False),
                                       args.runs)
            fixed = best(lambda: attribute(model, clean, corrupt, target, where=site), args.runs)
            exact = best(lambda: grids.patch(model, clean, corrupt, target, where=site), 1)
            print(f"{site:<6} {n:>6} {plain:>8.3f} {cpu:>8.3f} {fixed:>8.3f} {exact:>8.3f} {exact / plain:>10.1f} "
                  f"{exact / fixed:>10.1f}")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
