"""attn's benchmark table: whole-process wall times and peak memory, medians after a warm-up.

Run from the repository root with the project installed:

    python bench/bench.py            # the full table (about 8 minutes: trains 3 times on Brown)
    python bench/bench.py --quick    # skip the training comparison (and attn heads --transformer)

Every figure is a whole process (`attn ...` as a user types it), measured with os.wait4 so the
peak resident memory is that process's own. Prints a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_lookup import make_dictionary  # noqa: E402
from bench_speed import compile_attn, words_text  # noqa: E402

ATTN = shutil.which("attn") or "attn"
PY = sys.executable


def run_once(argv: list[str], stdin: bytes | None = None, env: dict | None = None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    if stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def measure(argv: list[str], runs: int = 7, stdin: bytes | None = None, env: dict | None = None) -> dict:
    run_once(argv, stdin, env)  # warm-up: page cache, .pyc files
    walls, peaks = [], []
    for _ in range(runs):
        wall, peak, code = run_once(argv, stdin, env)
        if code != 0:
            raise SystemExit(f"benchmark command failed with exit {code}: {' '.join(argv)}")
        walls.append(wall)
        peaks.append(peak)
    return {"median_s": statistics.median(walls), "peak_mib": max(peaks)}


def startup_rows(runs: int) -> list[tuple[str, dict]]:
    rows = [
        ("python -c pass", [PY, "-c", "pass"]),
        ('python -c "import gensim"', [PY, "-c", "import gensim"]),
        ('python -c "import torch"', [PY, "-c", "import torch"]),
        ("attn --help", [ATTN, "--help"]),
        ("attn lookup colour --json", [ATTN, "lookup", "colour", "--json"]),
        ('attn matrix "time flies like an arrow" --causal --json', [ATTN, "matrix", "time flies like an arrow", "--causal", "--json"]),
        ("attn demo --json", [ATTN, "demo", "--json"]),
    ]
    return [(label, measure(argv, runs)) for label, argv in rows]


def matrix_rows(sizes: list[int], runs: int) -> list[tuple[str, dict]]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"t{n}.txt"
            path.write_text(words_text(n), encoding="utf-8")
            out.append((f"attn matrix --file ({n} tokens) --json", measure([ATTN, "matrix", "--file", str(path), "--json"], runs)))
    return out


def lookup_rows(sizes: list[int], runs: int) -> list[tuple[str, dict]]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"d{n}.json"
            path.write_text(json.dumps(make_dictionary(n)), encoding="utf-8")
            out.append((f"attn lookup colour --dict ({n:,} keys) --json", measure([ATTN, "lookup", "colour", "--dict", str(path), "--json"], runs)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="skip the training comparison and attn heads --transformer")
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    compile_attn()  # as pip does at install: every table measures the commands as installed

    print(f"attn benchmarks, {datetime.date.today()}, {platform.node() and 'this machine'}: "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}; "
          f"median of {args.runs} runs after a warm-up\n")
    startup = startup_rows(args.runs)
    base = dict(startup)
    print("| command | median wall (s) | x `python -c pass` | x `import gensim` | x `import torch` | peak RSS (MiB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, m in startup:
        ratios = [m["median_s"] / base[k]["median_s"] for k in ("python -c pass", 'python -c "import gensim"', 'python -c "import torch"')]
        print(f"| `{label}` | {m['median_s']:.3f} | {ratios[0]:.1f} | {ratios[1]:.2f} | {ratios[2]:.2f} | {m['peak_mib']:.0f} |")

    print("\n| attention matrix | median wall (s) | peak RSS (MiB) |\n|---|---:|---:|")
    sizes = [n for n in (16, 128, 512, 2048, 4096) if n <= args.max_tokens]
    for label, m in matrix_rows(sizes, max(3, args.runs // 2)):
        print(f"| `{label}` | {m['median_s']:.3f} | {m['peak_mib']:.0f} |")

    print("\n| dictionary lookup | median wall (s) | peak RSS (MiB) |\n|---|---:|---:|")
    for label, m in lookup_rows([10, 1000, 100000], max(3, args.runs // 2)):
        print(f"| `{label}` | {m['median_s']:.3f} | {m['peak_mib']:.0f} |")

    print("\nIssue 12's figures, each beside its reference (bench/bench_speed.py):\n")
    sys.stdout.flush()
    speed = [PY, str(HERE / "bench_speed.py"), "--runs", str(args.runs), "--big-runs", str(max(3, args.runs // 2))]
    subprocess.run(speed + (["--skip-heads"] if args.quick else []), check=True)

    if not args.quick:
        print("\nTraining: `attn train` (defaults, full Brown, cached corpus) vs the same gensim call on the same tokens:\n")
        sys.stdout.flush()
        subprocess.run([PY, str(HERE / "bench_train.py")], check=True)


if __name__ == "__main__":
    main()
