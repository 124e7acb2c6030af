"""Trained attention benchmarks: the NumPy inference path (no torch) as a user meets it.

Run from the repository root with the project installed:

    python bench/bench_attention.py [--model NAME] [--repeat 5]

Prints a Markdown table: whole-process wall time of `attn heads --json` (median), whether that
process imported torch, and in-process times of one learned layer's attention for a 2,048-token
text and of the full trace of a 20-token sentence.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from attncli.tinylm.model import load_trained

PY = sys.executable


def wall(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat + 1):  # the first run warms the page cache and is dropped
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model with trained attention (default: the built-in one)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    model = ["--model", args.model] if args.model else []

    heads_s = wall([PY, "-m", "attncli", "heads", "--json", *model], args.repeat)
    probe = (
        "import sys; from attncli.cli.main import app\n"
        f"try: app(['heads', '--json', *{model!r}])\n"
        "except SystemExit: pass\n"
        "sys.stderr.write(str('torch' in sys.modules))\n"
    )
    proc = subprocess.run([PY, "-c", probe], capture_output=True, text=True, check=True)
    torch_loaded = proc.stderr.strip().splitlines()[-1]


    att = load_trained(args.model)
    words = [w for s in att.heldout_sentences() for w in s]
    long_text = (words * (2048 // max(len(words), 1) + 1))[:2048]
    start = time.perf_counter()
    att.attention(long_text, att.layers - 1)
    long_s = time.perf_counter() - start
    short = long_text[:20]
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        att.trace(short)
        times.append(time.perf_counter() - start)

    rows = [
        ("`attn heads --json` (whole process, median)", f"{heads_s:.2f} s"),
        ("torch imported by `attn heads`", torch_loaded),
        (f"last layer's attention, 2,048 tokens ({att.layers} layers x {att.heads} heads, d={att.d_model})", f"{long_s:.2f} s"),
        ("full trace of a 20-token sentence (median)", f"{statistics.median(times) * 1000:.1f} ms"),
    ]
    print(f"| trained attention, model '{att.model}', {os.cpu_count()} cores | figure |")
    print("| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
