"""The long views of one text as a user types them: wall time and peak resident memory of whole
``attn matrix --transformer`` processes on a tiny random Llama (2 layers, 4 heads, 8,192 positions:
tests/_llama_fixtures.py) and a text of about --tokens tokens of ten-word sentences. What grows
here is what the view computes and keeps and draws, not the model: the one layer (and head) a view
shows, the pooling, a file's drawing.

    python bench/bench_long_views.py [--tokens 4000] [--keep DIR]

Each row is a process of its own (``os.wait4``: wall time and ru_maxrss).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _llama_fixtures import build_decoder  # noqa: E402

VIEWS = {
    "the default view (the last layer, 4 heads, drawn pooled)": [],
    "one head (--head 1)": ["--head", "1"],
    "--pool 20 --json": ["--pool", "20", "--json"],
    "--svg of the default view": ["--svg", "{tmp}/view.svg"],
}


def text_of(tokens: int, model) -> str:
    rng = random.Random(0)
    words = "the cat sat on mat a dog and she sells sea shells time flies like an arrow".split()
    sentences = []
    while len(model.encode(" ".join(sentences) or "a").ids) < tokens:
        sentences += [" ".join(rng.choice(words) for _ in range(10)) + "." for _ in range(20)]
    return " ".join(sentences)


def run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... failed")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--keep", type=Path, help="build the model here (reused when there)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model_dir = args.keep or tmp / "llama"
    if not (model_dir / "config.json").is_file():
        build_decoder("llama", model_dir, max_position_embeddings=8192)
    sys.path.insert(0, str(ROOT))
    from attncli.hf import load

    text = text_of(args.tokens, load(str(model_dir), backend="numpy"))
    print(f"| view ({args.tokens:,}-token text) | seconds | peak MiB |")
    print("|---|---:|---:|")
    for name, opts in VIEWS.items():
        argv = [sys.executable, "-m", "attncli", "matrix", text, "--transformer", str(model_dir),
                *[o.format(tmp=tmp) for o in opts]]
        seconds, mib = run(argv)
        print(f"| {name} | {seconds:.1f} | {mib:,.0f} |")


if __name__ == "__main__":
    main()
