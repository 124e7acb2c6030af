"""Edge attribution patching over every edge of a SmolLM2-135M-shaped model, and one edge-patched pass.

Run from the repository root with the project and its [transformers] extra installed:

    python bench/bench_circuit.py              # build the model in a temp folder
    python bench/bench_circuit.py --keep DIR   # reuse (or write) it in DIR

The model is bench_llama.py's (30 layers x 9 heads, 3 key-value heads, hidden 576, random weights,
bfloat16 on disk); the clean and corrupted texts are 20 tokens each. Timed, best of ``--runs``, once
the model is loaded and warmed up (with the least CPU time of the runs beside): ``edge_scores`` (EAP: the clean and corrupted passes in float64,
one backward with every reader's input gradient, and the (U, D) score matrix), EAP-IG with
``--steps`` points, and one edge-patched forward (every edge kept at random with probability 1/2),
which is what each step of the circuit search costs; for ``attn circuit --pairs``, what one pair
adds to each step beyond that pass: its two float64 tapes made again (when they are past the
search's TAPE_BYTES) and the bytes they hold when kept.
"""

from __future__ import annotations

import os

import numpy as np

from bench_llama import best, best_wall_cpu, clean_corrupt, smol_folder, smol_parser  # first: this checkout's attncli
from attncli.causal.circuit import record_tape, edge_scores
from attncli.causal.pairs_circuit import TAPE_BYTES, _tapes, held_bytes
from attncli.hf import load
from attncli.hf.methods.edges import edge_mask, edge_patched_logits, node_outputs

def main() -> None:
    ap = smol_parser(__doc__, runs=3)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with smol_folder(args.keep) as directory:
        model = load(str(directory), backend="numpy")
        clean, corrupt, target = clean_corrupt(model, 20)
        n = len(clean)
        mask = edge_mask(model.layers, model.heads)
        print(f"{model.layers} layers x {model.heads} heads, {n} tokens: {mask.shape[0]} writers, "
              f"{mask.shape[1]} readers, {int(mask.sum())} edges")
        scores, ct, kt = edge_scores(model, clean, corrupt, target)  # warm-up
        print(f"{target.describe()}: clean {target.metric(ct.logits(target.position)):.4f}, "
              f"corrupt {target.metric(kt.logits(target.position)):.4f}")
        wall, cpu = best_wall_cpu(lambda: edge_scores(model, clean, corrupt, target), args.runs)
        print(f"EAP, every edge: {wall:.2f} s ({cpu:.2f} s CPU)")
        wall, cpu = best_wall_cpu(lambda: edge_scores(model, clean, corrupt, target, steps=args.steps), args.runs)
        print(f"EAP-IG, {args.steps} steps: {wall:.2f} s ({cpu:.2f} s CPU)")
        corr = node_outputs(kt)
        w = (np.random.default_rng(0).random(mask.shape) < 0.5).astype(np.float64)
        one = best(lambda: edge_patched_logits(ct, kt, w, target.position, corr), args.runs)
        print(f"one edge-patched forward: {one:.2f} s")
        shared, item = record_tape(model, clean), [(clean, corrupt, target)]
        remade = best(lambda: next(_tapes(model, item, shared)), args.runs)
        held = held_bytes(next(_tapes(model, item, shared)))
        steps = int(np.ceil(np.log2(int(mask.sum()) + 1)))
        print(f"--pairs: a pair's two tapes made again {remade:.2f} s; kept they hold {held / 2**20:.0f} MiB "
              f"({TAPE_BYTES // held} pairs fit TAPE_BYTES); at most {steps} search steps")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
