"""``attn heads --transformer M --weights``: every weights-only score (the copying score and top
OV / QK tokens of every head, the Q-, K- and V-composition of every pair of heads in different
layers), timed as a user types it: the whole process, its load included, wall clock and CPU
(user + system, of the child).

Run from the repository root with the [transformers] extra:

    python bench/bench_head_weights.py                       # GPT-2 small's shape, SmolLM2-135M's shape
    python bench/bench_head_weights.py --keep DIR            # build the models there once and reuse them
    python bench/bench_head_weights.py --gguf FILE.gguf      # also a real GGUF file (SmolLM2-135M-Instruct)

Shapes, random weights written by save_pretrained: GPT-2 small (12 layers x 12 heads, width 768,
vocabulary 50,257, float32) and SmolLM2-135M (30 layers x 9 heads, 3 key-value heads, width 576,
vocabulary 49,152, bfloat16; bench_llama.py's build). Each is run --runs times after one warm-up
run (the page cache); the best wall clock and its CPU time are printed, with the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_ablate_peer import build_gpt2_small  # noqa: E402
from bench_llama import build as build_smollm2  # noqa: E402


def run_once(model: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``attn heads --transformer model --weights --json``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attncli", "heads", "--transformer", model, "--weights", "--json"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="build the models under this folder (reused)")
    ap.add_argument("--gguf", type=Path, help="also time this GGUF file")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="attn-bench-heads-"))
    models = []
    for name, build in (("gpt2-small-shaped", build_gpt2_small), ("smollm2-135m-shaped", build_smollm2)):
        directory = root / name
        if not (directory / "config.json").is_file():
            directory.mkdir(parents=True, exist_ok=True)
            build(directory)
        models.append((name, str(directory)))
    if args.gguf is not None:
        models.append((args.gguf.name, str(args.gguf)))
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"{'model':<40} {'wall (s)':>9} {'CPU (s)':>9}")
    for name, model in models:
        run_once(model)  # warm-up: the page cache
        best = min(run_once(model) for _ in range(max(1, args.runs)))
        print(f"{name:<40} {best[0]:>9.2f} {best[1]:>9.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
