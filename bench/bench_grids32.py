"""The causal grids' float32 pass beside the float64 pass, on GPT-2 small's shape (random weights):
the head-ablation grid (every head zeroed, the change in log p of a target at the last position of
a 20-token text) and the head-patching grid, each by ``attncli.causal.grids`` (float32, what
``attn ablate`` / ``attn patch`` run) and by the same interventions on the float64 pass
(grids.clean_run / grids.run_from on the model as loaded), with the time of each and the largest
difference, absolute and relative to the largest logit.

Run from the repository root with the [transformers] extra:

    python bench/bench_grids32.py                 # a temporary GPT-2-small-shaped model
    python bench/bench_grids32.py --keep DIR      # build it there once and reuse it
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_ablate_peer import build_gpt2_small  # noqa: E402
from bench_llama import SENTENCE  # noqa: E402
from attncli.env import runtime  # noqa: E402
from attncli.causal import grids  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention, site  # noqa: E402


def grid64(model, ids, target, per_layer):
    tr, clean = grids.clean_run(model, ids, target, [])
    return [grids.run_from(model, ids, l, tr[site(l, "resid_pre")], per_layer(l), target)
            for l in range(model.layers)], clean


def main() -> None:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="build the model under this folder (reused)")
    ap.add_argument("--threads", type=int, default=1, help="attn's BLAS threads (default 1)")
    args = ap.parse_args()
    runtime.choose_threads(args.threads)
    directory = (args.keep or Path(tempfile.mkdtemp(prefix="attn-bench-grids32-"))) / "gpt2-shaped"
    if not (directory / "config.json").is_file():
        build_gpt2_small(directory)
    model = load(str(directory), backend="numpy")
    ids = model.encode(SENTENCE).ids[:20]
    ids += [ids[-1]] * (20 - len(ids))
    bad = list(ids)
    bad[1], bad[3] = ids[3], ids[1]
    target = Target(len(ids) - 1, ids[5], "target")
    model.trace(ids, "logits")
    model.float32_pass().trace(ids, "logits")  # warm-ups: each pass's weights read once
    top = float(np.abs(model.trace(ids, "logits")["logits"]).max())
    print(f"GPT-2-small-shaped (12 layers x 12 heads, random weights), 20 tokens, BLAS threads {runtime.threads}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; largest logit {top:.3g}")
    print(f"{'grid':<16} {'float32 (s)':>11} {'float64 (s)':>11} {'largest |f32 - f64|':>20} {'/ largest logit':>16}")

    def zeroed(l):
        return [[Intervention(site(l, "attn.z"), "zero", head=h)] for h in range(model.heads)]

    t0 = time.perf_counter()
    fast = grids.ablate(model, ids, target).values
    t1 = time.perf_counter()
    rows, clean = grid64(model, ids, target, zeroed)
    t2 = time.perf_counter()
    diff = float(np.abs(fast - (np.stack(rows) - clean)).max())
    print(f"{'ablate (zero)':<16} {t1 - t0:>11.2f} {t2 - t1:>11.2f} {diff:>20.2e} {diff / top:>16.2e}")

    t0 = time.perf_counter()
    got = grids.patch(model, ids, bad, target, where="head")
    t1 = time.perf_counter()
    clean_tr, clean = grids.clean_run(model, ids, target, ["blocks.*.attn.z"])

    def patched(l):
        z = clean_tr[site(l, "attn.z")]
        return [[Intervention(site(l, "attn.z"), "replace", head=h, value=z[:, h])] for h in range(model.heads)]

    rows, corrupt = grid64(model, bad, target, patched)
    t2 = time.perf_counter()
    diff = float(np.abs(got.values * (got.clean - got.corrupt) - (np.stack(rows) - corrupt)).max())
    print(f"{'patch (head)':<16} {t1 - t0:>11.2f} {t2 - t1:>11.2f} {diff:>20.2e} {diff / top:>16.2e}"
          f"   (the patched metric's difference; load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
