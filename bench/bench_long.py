"""Long inputs on attn's NumPy pass: the last 16 rows of every layer of a SmolLM2-135M-shaped Llama,
beside transformers' eager ``output_attentions`` as the reference, in one run.

Run from the repository root with the project and its [transformers] extra installed:

    python bench/bench_long.py                          # 1,024, 2,048 and 8,192 tokens, 30 layers
    python bench/bench_long.py --tokens 1024 --layers 4 --keep DIR

The model: hidden 576, 30 layers, 9 heads, 3 key-value heads, intermediate 1536, vocabulary 49152,
tied embeddings, 8,192 positions, random float32 weights written as model.safetensors
(tests/_long_fixtures.py), into a temporary folder or --keep DIR (reused when there). Random token
ids stand in for a text.

Each figure is a process of its own: it loads the model, runs a short pass (every weight read once),
then the timed pass over N tokens, and reports its peak resident memory (VmHWM) and how far that
rose above what it held just before the pass (``pass``). Rows:
- attn's NumPy pass keeping the last 16 rows of every layer's pattern, in float32 (as a view that
  shows them asks: Keep(float32=True)) and in float64 (the default Keep);
- transformers' eager attention with output_attentions=True (every layer's (h, T, T) float32) and
  the same 16 rows cut from it, skipped at a length whose attentions alone (layers x heads x T^2 x
  4 bytes) would pass --limit-gib (default 8 GiB);
- the largest difference between the two paths' rows at each length both ran.
Linux only (the peak is read from /proc/self/status).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _long_fixtures import build_smol, float32_bytes  # noqa: E402

LAST = 16
HEADS = 9

COMMON = """
import json, resource, sys, time
import numpy as np

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))

path, tokens, last, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ids = np.random.default_rng(0).integers(3, 49152, tokens).tolist()
"""

NUMPY = COMMON + """
from attncli.env import runtime
from attncli.hf import load
from attncli.model.trace import Keep

runtime.own_allocator()  # as the attn command line does for its own process (hf/kernels/heap.py)

model = load(path, backend="numpy")
model.trace([1, 5, 6, 7], "logits")  # every weight read once (the LM head is the tied embeddings)
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
start, cpu0 = time.perf_counter(), cpu()
tr = model.trace(ids, Keep(("blocks.*.attn.pattern",), rows=tuple(range(tokens - last, tokens)),
                           float32=sys.argv[5] == "float32"))
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu0
peak = status("VmHWM")
np.save(out, np.stack([tr[f"blocks.{l}.attn.pattern"] for l in range(model.layers)]))  # (L, h, last, T)
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "before": before, "peak": peak}))
"""

TORCH = COMMON + """
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
with torch.no_grad():
    model(torch.tensor([[1, 5, 6, 7]]), output_attentions=True)
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
start, cpu0 = time.perf_counter(), cpu()
with torch.no_grad():
    attentions = model(torch.tensor([ids]), output_attentions=True).attentions  # L x (1, h, T, T)
    rows = torch.stack([a[0, :, -last:] for a in attentions]).double().numpy()  # (L, h, last, T)
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu0
peak = status("VmHWM")
np.save(out, rows)
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "before": before, "peak": peak}))
"""


def run(script: str, directory: Path, tokens: int, out: Path, *extra: str) -> dict | str:
    """The child's figures, or why it failed."""
    done = subprocess.run([sys.executable, "-c", script, str(directory), str(tokens), str(LAST), str(out), *extra],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:120]
    return json.loads(done.stdout.strip().splitlines()[-1])


def matmul_rate(threads: int) -> float:
    """This machine's float32 matrix-product rate now (FLOP/s, the best of 5): a (2048, 576) x
    (576, 1536) product, the shape of the pass's MLP, on ``threads`` BLAS threads."""
    import time

    import numpy as np

    from attncli.hf.kernels import blas

    a = np.random.default_rng(0).standard_normal((2048, 576)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((576, 1536)).astype(np.float32)
    best = float("inf")
    with blas.limited(threads):
        for _ in range(5):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    return 2 * 2048 * 576 * 1536 / best


def pass_flops(tokens: int, layers: int, d: int = 576, kv: int = 192, d_ff: int = 1536) -> float:
    """The matrix products of a pass over ``tokens`` (the causal half of q k^T and of the mixing)."""
    per_layer = 2 * tokens * (2 * d * d + 2 * d * kv + 3 * d * d_ff) + 2 * tokens * tokens * d
    return layers * per_layer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 8192])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--limit-gib", type=float, default=8.0, help="skip transformers where its attentions pass this")
    ap.add_argument("--keep", type=Path, help="build the model here (reused if present) instead of a temp dir")
    ap.add_argument("--no-float64", action="store_true", help="skip attn's default float64 rows")
    args = ap.parse_args()
    if not Path("/proc/self/clear_refs").exists():
        sys.exit("bench_long.py reads the peak resident memory from /proc: Linux only")
    tmp = Path(tempfile.mkdtemp(prefix="attn-bench-long-"))
    try:
        directory = args.keep or tmp / "smollm2-shaped"
        if not (directory / "config.json").is_file() or json.loads((directory / "config.json").read_text()).get(
                "num_hidden_layers") != args.layers:
            build_smol(directory, args.layers)
        weights = float32_bytes(directory)
        mib = 2**20
        print(f"SmolLM2-135M-shaped Llama, {args.layers} layers: {weights / mib:.0f} MiB of float32 weights "
              f"(1.5x = {1.5 * weights / mib:.0f} MiB); the last {LAST} rows of every layer\n")
        print(f"{'tokens':>6}  {'path':<44} {'time':>8} {'cpu':>8} {'peak RSS':>10} {'pass':>9} {'pass/weights':>13}")
        for tokens in args.tokens:
            rows = {}
            paths = [("attn numpy, rows in float32", NUMPY, ("float32",))]
            if not args.no_float64:
                paths.append(("attn numpy, rows in float64 (default)", NUMPY, ("float64",)))
            need = args.layers * HEADS * tokens * tokens * 4
            if need <= args.limit_gib * 2**30:
                paths.append(("transformers eager, output_attentions", TORCH, ()))
            for label, script, extra in paths:
                out = tmp / f"{tokens}-{len(rows)}.npy"
                got = run(script, directory, tokens, out, *extra)
                if isinstance(got, str):
                    print(f"{tokens:>6}  {label:<44} {got}")
                    continue
                rows[label] = out
                extra_bytes = got["peak"] - got["before"]
                print(f"{tokens:>6}  {label:<44} {got['seconds']:>7.1f}s {got['cpu']:>7.1f}s {got['peak'] / mib:>7.0f} MiB "
                      f"{extra_bytes / mib:>5.0f} MiB {extra_bytes / weights:>12.2f}x")
            from attncli.hf.kernels import blas

            threads = blas.threads_for(tokens)  # what the pass's policy gives this length now
            rate = matmul_rate(threads)
            print(f"{tokens:>6}  {'floor: its products at this machine`s rate':<44} "
                  f"{pass_flops(tokens, args.layers) / rate:>7.1f}s   ({rate / 1e9:.1f} GFLOP/s float32 on {threads} "
                  f"thread(s), load {os.getloadavg()[0]:.1f})")
            if need > args.limit_gib * 2**30:
                print(f"{tokens:>6}  {'transformers eager, output_attentions':<44} skipped: its attentions alone "
                      f"take {need / 2**30:.1f} GiB (limit {args.limit_gib:g} GiB)")
            import numpy as np

            arrays = {label: np.load(path) for label, path in rows.items()}
            ref = arrays.pop("transformers eager, output_attentions", None)
            for label, a in arrays.items():
                if ref is not None:
                    print(f"{tokens:>6}  max |{label} - transformers| = {np.abs(a - ref).max():.2e}")
        print("\ntime: wall clock of the pass; cpu: its user + system time over every thread (steadier on a busy "
              "machine); pass: the peak resident memory above what the process held just before the pass (the "
              "weights already read); peak RSS: the whole process's")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
