"""Timing of the hostile sizes tests/end_to_end/test_bounded_work.py checks by counting work (issue 24: no
wall-clock assertion in a test). Each case runs at size n and 4n in this process, the reference
beside it: linear work takes about 4x as long at 4x the size, quadratic work about 16x.

    python bench/bench_bounded_work.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from attncli.cli.main import app  # noqa: E402
from attncli.attention.long_view import pool_matrices  # noqa: E402
from attncli.vectors.tokenize import tokenize  # noqa: E402


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    os.environ.setdefault("ATTN_HOME", tempfile.mkdtemp())
    from typer.testing import CliRunner


    runner = CliRunner()
    tmp = Path(tempfile.mkdtemp())

    def key_of(n: int):
        words = " ".join(["colour", "speedy", "zzqx"] * n)
        path = tmp / f"d{n}.json"
        path.write_text(json.dumps({words: "long", "speed": "fast", "colour": "red"}), encoding="utf-8")
        return lambda: runner.invoke(app, ["lookup", "velocity", "--dict", str(path), "--json"])

    def pooled(n: int, chunk: int):
        mats = np.random.default_rng(0).random((2, n, n))  # (k, T, T): one head and the mean
        ids = np.arange(n) // chunk
        return lambda: pool_matrices(mats, ids, ids)

    cases = {
        "--pool 20 of an n-token matrix": (400, lambda n: pooled(n, 20)),
        "--pool 1 of an n-token matrix": (400, lambda n: pooled(n, 1)),
        "combining marks (2n on one letter)": (100_000, lambda n: lambda: tokenize("a" + "\u0301\u0327" * n + " b")),
        "a key of 3n words": (32_500, key_of),
        "a query of 3n words, --explain": (25_000, lambda n: lambda: runner.invoke(
            app, ["lookup", " ".join(["colour", "speed", "zzqx"] * n), "--explain"])),
        "one token of n letters": (500_000, lambda n: lambda: runner.invoke(app, ["lookup", "q" * n])),
    }
    print("| case | n | seconds at n | seconds at 4n | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, (n, make) in cases.items():
        make(n)()  # warm-up (the mark class, the model)
        small, large = seconds(make(n)), seconds(make(4 * n))
        print(f"| {name} | {n:,} | {small:.3f} | {large:.3f} | {large / small:.1f} |")


if __name__ == "__main__":
    main()
