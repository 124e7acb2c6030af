"""attn beside its peers, one command: each bench below in turn, the machine printed first and each
figure's line with the 1-minute load average it ran under. Every ratio is measured in one run of
one bench, both sides with the same threads (--threads, 1 by default: torch's and attn's BLAS).

Run from the repository root with the [transformers] extra, transformer-lens and all-MiniLM-L6-v2's
package installed:

    python bench/bench_peers.py                 # everything (tens of minutes on a busy 2-core machine)
    python bench/bench_peers.py --quick         # fewer texts, 4 layers of the grids, 2,048 tokens

- attn stats beside a plain transformers loop (eager, output_attentions, the same inputs, one a
  pass and in attn's own batches; wall clock and CPU time): bench_stats.py, all-MiniLM-L6-v2 and
  the SmolLM2-135M shape;
- the head-ablation grid beside TransformerLens: bench_ablate_peer.py, GPT-2 small and the
  SmolLM2-135M shape;
- an 8,192-token pass on the SmolLM2-135M shape beside this machine's matrix-product rate:
  bench_long.py (its last row per length: the pass's products at that rate);
- the BLAS thread policy beside 1 and 2 threads (a short pass, a long pass, the grid, a corpus):
  bench_threads.py (its own threads: the policy is what it measures);
- start-up: bench.py --quick.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def step(title: str, argv: list[str]) -> None:
    print(f"\n## {title}  (load {os.getloadavg()[0]:.1f} at start)\n$ {' '.join(argv)}", flush=True)
    subprocess.run([sys.executable, *argv], cwd=HERE.parent, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs of each bench")
    ap.add_argument("--threads", type=int, default=1, help="threads for both sides of every ratio")
    ap.add_argument("--keep", type=Path, help="a folder to build the models in (reused)")
    ap.add_argument("--skip-startup", action="store_true", help="leave out bench.py --quick")
    args = ap.parse_args()
    keep = ["--keep", str(args.keep)] if args.keep else []
    print(f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    stats = ["--texts", "32", "--llama-texts", "8"] if args.quick else []
    step("attn stats vs a transformers loop", ["bench/bench_stats.py", "--threads", str(args.threads), *stats,
                                                *[a for a in keep]])
    grid = ["--layers", "4"] if args.quick else []
    step("head-ablation grid vs TransformerLens", ["bench/bench_ablate_peer.py", "--threads", str(args.threads),
                                                   *grid, *keep])
    tokens = ["2048"] if args.quick else ["8192"]
    long_keep = ["--keep", str(args.keep / "long")] if args.keep else []
    step("a long pass beside the machine's product rate", ["bench/bench_long.py", "--tokens", *tokens,
                                                           "--no-float64", *long_keep])
    rounds = ["--rounds", "1", "--tokens", "1024", "--texts", "48", "--short", "5"] if args.quick else []
    step("the thread policy beside 1 and 2 threads", ["bench/bench_threads.py", *rounds, *keep])
    if not args.skip_startup:
        step("start-up", ["bench/bench.py", "--quick"])


if __name__ == "__main__":
    main()
