"""``attn sinks --transformer gemma3``: massive activations, sink shares, secondary sinks and the
causal test (its default 20 sentences) over 100 held-out Brown sentences, timed as a user types it:
the whole process, its load included, wall clock and CPU (user + system, of the child).

Run from the repository root with the Brown corpus and Gemma-3-270M installed (README):

    python bench/bench_sinks.py                    # gemma3, 100 sentences, one run after a warm-up
    python bench/bench_sinks.py --model smollm2 --sentences 50 --runs 2
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time


def run_once(model: str, sentences: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``attn sinks --transformer model --sentences N --json``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attncli", "sinks", "--transformer", model, "--sentences", str(sentences),
                    "--json"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma3")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-warm-up", action="store_true", help="skip the warm-up run (the page cache)")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    if not args.no_warm_up:
        run_once(args.model, args.sentences)
    best = min(run_once(args.model, args.sentences) for _ in range(max(1, args.runs)))
    print(f"attn sinks --transformer {args.model} --sentences {args.sentences}: wall {best[0]:.1f} s, "
          f"CPU {best[1]:.1f} s")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
