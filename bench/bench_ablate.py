"""The full head-ablation grid of a SmolLM2-135M-shaped model on attn's NumPy path.

Run from the repository root with the project and its [transformers] extra installed:

    python bench/bench_ablate.py                # build the model in a temp folder, time the grid twice
    python bench/bench_ablate.py --keep DIR     # reuse (or write) the model in DIR

The model is bench_llama.py's: SmolLM2-135M's shape (30 layers x 9 heads, 3 key-value heads, hidden
576, intermediate 1536, vocabulary 49152, tied embeddings) with random weights, saved by
save_pretrained in bfloat16. The text is 20 tokens. The figure is the wall time of
``attn_grid_seconds``: every head of every layer zeroed at every position, the change in log p of
a target at the last position (attncli.causal.grids.ablate: each layer's 9 heads as one batch,
rerunning only layers l..29 from the cached stream). The model's load (and its first pass, which
widens the bfloat16 weights once) is not counted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench_llama import SENTENCE, smol_folder, smol_parser  # first: this checkout's attncli
from attncli.causal import grids
from attncli.causal.target import Target
from attncli.hf import load


def attn_grid_seconds(model_dir: str | Path, ids: list[int], cpu: bool = False) -> float:
    """Wall seconds (``cpu``: this process's CPU seconds) for attn's head-ablation grid (zero, every
    position, log p of the last token's argmax) of token ids ``ids`` on the model in ``model_dir``:
    load and warm-up not counted."""
    import numpy as np


    model = load(str(model_dir), backend="numpy")
    logits = model.trace(list(ids), "logits")["logits"]  # the warm-up: the weights widened once
    target = Target(len(ids) - 1, int(np.argmax(logits[-1])), "argmax")
    clock = time.process_time if cpu else time.perf_counter
    start = clock()
    grids.ablate(model, list(ids), target)
    return clock() - start


def main() -> None:
    args = smol_parser(__doc__, runs=2).parse_args()
    with smol_folder(args.keep) as directory:
        ids = load(str(directory), backend="numpy").encode(SENTENCE).ids[:20]  # 20 tokens, <s> first
        print(f"{len(ids)} tokens; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        for run in range(args.runs):
            wall = attn_grid_seconds(directory, ids)
            cpu = attn_grid_seconds(directory, ids, cpu=True)
            print(f"run {run + 1}: full 30 x 9 head-ablation grid in {wall:.2f} s wall; "
                  f"{cpu:.2f} s of CPU in a second grid (what an idle machine's wall time comes near: one BLAS thread)")


if __name__ == "__main__":
    main()
