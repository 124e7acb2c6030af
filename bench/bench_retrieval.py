"""``attn retrieval --transformer smollm2``: retrieval heads on 20 needles x 4 depths at 2,048 tokens
(SmolLM2-135M-Instruct, the Q4_1 GGUF), timed as a user types it: the whole process, its load and
the held-out Brown text included, wall clock and CPU (user + system, of the child).

Run from the repository root with the Brown corpus and SmolLM2 installed (README):

    python bench/bench_retrieval.py                       # 20 needles, one run
    python bench/bench_retrieval.py --extrapolate 1,3     # runs of 1 and 3 needles, and 20 extrapolated

A needle's prompts cost about the same whatever their number, but a depth's first needle runs its
whole prompt and the others only what follows the haystack they share (the cache keeps it): so
``--extrapolate A,B`` runs A and B needles and gives N needles as run(A) + (N - A) x the cost of
one more needle, (run(B) - run(A)) / (B - A), wall and CPU each.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time


def run_once(model: str, needles: int, lengths: str, depths: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``attn retrieval ... --json`` (the children's peak RSS: peak_mib())."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attncli", "retrieval", "--transformer", model, "--needles", str(needles),
                    "--lengths", lengths, "--depths", str(depths), "--json"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def peak_mib() -> float:
    """The largest resident set of any child so far, MiB (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--needles", type=int, default=20)
    ap.add_argument("--lengths", default="2048")
    ap.add_argument("--depths", type=int, default=4)
    ap.add_argument("--extrapolate", metavar="A,B", help="run A and B needles and extrapolate to --needles")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    what = f"attn retrieval --transformer {args.model} --lengths {args.lengths} --depths {args.depths}"
    if args.extrapolate:
        a, b = (int(n) for n in args.extrapolate.split(","))
        ra, rb = run_once(args.model, a, args.lengths, args.depths), run_once(args.model, b, args.lengths, args.depths)
        for n, r in ((a, ra), (b, rb)):
            print(f"{what} --needles {n}: wall {r[0]:.1f} s, CPU {r[1]:.1f} s")
        more = [(rb[i] - ra[i]) / (b - a) for i in (0, 1)]
        print(f"one more needle: wall {more[0]:.1f} s, CPU {more[1]:.1f} s")
        print(f"{what} --needles {args.needles}, extrapolated: wall {ra[0] + (args.needles - a) * more[0]:.0f} s, "
              f"CPU {ra[1] + (args.needles - a) * more[1]:.0f} s")
    else:
        wall, cpu = run_once(args.model, args.needles, args.lengths, args.depths)
        print(f"{what} --needles {args.needles}: wall {wall:.1f} s, CPU {cpu:.1f} s")
    print(f"peak RSS of a run {peak_mib():.0f} MiB; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
