"""Benchmark and quality table of ``attn lookup``.

Run from the repository root with the project installed (uses the default model, or --model):

    python bench/bench_lookup.py              # speed: whole processes, median of --runs
    python bench/bench_lookup.py --quality    # accuracy and winner weights on tests/lookup_eval.json

Speed rows: ``python -c pass``, ``python -c "import gensim"`` (what the lookup must not pay),
``attn lookup colour --json`` on the shipped dictionary, and on generated dictionaries of 10,
1,000 and 100,000 keys. Two kinds of generated keys: ``words`` (pairs of vocabulary words, the
usual case: a few thousand distinct tokens) and ``codes`` (every key has its own made-up token
such as ``item48213``, so each one needs a fastText subword vector: the worst case).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # the checkout's attncli
from attncli.lookup.dictionary import softmax  # noqa: E402
from attncli.lookup.keyindex import KeyIndex  # noqa: E402
from attncli.lookup.params import NGRAM_WEIGHT  # noqa: E402
from attncli.vectors.model import load_vectors  # noqa: E402

PY = sys.executable
ATTN = shutil.which("attn") or "attn"

_WORDS = (
    "color price speed weight range battery power engine seat door wheel window light sound "
    "size shape length height width depth age name city town street country state river lake "
    "mountain forest tree flower water fire stone metal wood glass paper cloth food bread meat "
    "fruit milk sugar salt oil wine music song voice word letter book story page line number "
    "money cost value market trade bank office school church house room floor wall table chair "
    "bed kitchen garden field farm road bridge train ship boat plane car truck horse dog bird fish "
    "morning evening night day week month year summer winter spring autumn hour minute moment"
).split()


def make_dictionary(n: int, kind: str = "words") -> dict[str, int]:
    """n keys -> value i. ``words``: 'w_a w_b' pairs of common words (plus the seed's keys);
    ``codes``: 'item<i>' plus a common word, one made-up (out-of-vocabulary) token per key."""
    out: dict[str, int] = {}
    for seed_key in ("brand", "model", "color"):
        if len(out) < n:
            out[seed_key] = len(out)
    m = len(_WORDS)
    i = 0
    while len(out) < n:
        if kind == "words":
            a, b = divmod(i, m)
            c = a // m
            key = f"{_WORDS[a % m]} {_WORDS[b]}" + (f" {_WORDS[c % m]}" if c else "")
        else:
            key = f"item{i} {_WORDS[i % m]}"
        if kind == "codes" or len(set(key.split())) == len(key.split()):
            out.setdefault(key, len(out))
        i += 1
    return out


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def median_wall(argv: list[str], runs: int) -> tuple[float, float]:
    run_once(argv)  # warm-up: page cache, .pyc files
    walls, cpus = zip(*(run_once(argv) for _ in range(runs)))
    return statistics.median(walls), statistics.median(cpus)


def speed(args) -> None:
    model = ["--model", args.model] if args.model else []
    rows = [
        ("python -c pass", [PY, "-c", "pass"]),
        ('python -c "import gensim"', [PY, "-c", "import gensim"]),
        ("attn lookup colour --json", [ATTN, "lookup", "colour", "--json", *model]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("words", "codes"):
            for n in (10, 1_000, 100_000):
                path = Path(tmp) / f"{kind}{n}.json"
                path.write_text(json.dumps(make_dictionary(n, kind)), encoding="utf-8")
                rows.append((f"attn lookup colour --dict ({n:,} keys, {kind}) --json",
                             [ATTN, "lookup", "colour", "--dict", str(path), "--json", *model]))
        load = os.getloadavg()[0]
        print(f"median of {args.runs} runs after a warm-up, {os.cpu_count()} cores, load average {load:.1f} at the start\n")
        print("| command | median wall (s) | median CPU user+sys (s) |\n|---|---:|---:|")
        for label, argv in rows:
            wall, cpu = median_wall(argv, args.runs)
            print(f"| `{label}` | {wall:.3f} | {cpu:.3f} |", flush=True)


def quality(args) -> None:
    """Accuracy of several scorers, and the winner's weight per temperature, on the eval set."""
    import numpy as np

    spec = json.loads((REPO / "tests" / "lookup_eval.json").read_text(encoding="utf-8"))
    v = load_vectors(args.model)
    scorers = {
        "cosine (plain)": dict(center=False, ngram_weight=0.0),
        "cosine, centred": dict(center=True, ngram_weight=0.0),
        "n-gram Dice only": dict(center=True, ngram_weight=1.0),
        "plain cosine + 0.4 n-gram": dict(center=False, ngram_weight=0.4),
        **{f"centred + {lam:g} n-gram": dict(center=True, ngram_weight=lam) for lam in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)},
    }
    default_label = f"centred + {NGRAM_WEIGHT:g} n-gram"
    cats = sorted({c["category"] for c in spec["cases"]})
    print(f"model '{v.name}', {len(spec['cases'])} cases\n")
    print("| scorer | all | " + " | ".join(cats) + " |\n|---|---:|" + "---:|" * len(cats))
    sims_default = []
    for label, kw in scorers.items():
        indexes = {name: KeyIndex(v, keys, **kw) for name, keys in spec["dictionaries"].items()}
        hits = {c: [0, 0] for c in cats}
        misses = []
        for case in spec["cases"]:
            index = indexes[case["dict"]]
            sim = index.score(case["query"])[3]
            best = index.keys[int(np.argmax(sim))]
            hits[case["category"]][0] += best == case["expected"]
            hits[case["category"]][1] += 1
            if best != case["expected"]:
                misses.append(f"{case['query']}->{best}")
            if label == default_label:
                sims_default.append((case, sim))
        total = sum(h for h, _ in hits.values())
        print(f"| {label}{' (default)' if label == default_label else ''} | {total}/{len(spec['cases'])} | " + " | ".join(f"{hits[c][0]}/{hits[c][1]}" for c in cats) + " |")
        if args.verbose:
            print(f"|  misses: {' '.join(misses)} |")
    temps = [0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 1.0]
    shown = [("car", "colour"), ("car", "colours"), ("car", "hue"), ("car", "maker"), ("specs", "speed"), ("specs", "cost")]
    by_case = {(c["dict"], c["query"]): (c, s) for c, s in sims_default}
    print(f"\nWeight on the expected key by temperature ({default_label}); NLL = mean -log(weight on the expected key):\n")
    print("| T | " + " | ".join(f"{q}->{by_case[(d, q)][0]['expected']}" for d, q in shown) +
          " | median winner weight | winners >= 0.99 | mean weight on expected | NLL |")
    print("|---:|" + "---:|" * (len(shown) + 4))
    for t in temps:
        cells = []
        for d, q in shown:
            case, sim = by_case[(d, q)]
            cells.append(f"{softmax(sim.astype(np.float64), t)[spec['dictionaries'][d].index(case['expected'])]:.2f}")
        weights = [softmax(s.astype(np.float64), t) for _, s in sims_default]
        winners = np.array([w.max() for w in weights])
        on_expected = np.array([w[spec["dictionaries"][c["dict"]].index(c["expected"])] for w, (c, _) in zip(weights, sims_default)])
        nll = float(np.mean(-np.log(np.maximum(on_expected, 1e-300))))
        print(f"| {t:g} | " + " | ".join(cells) + f" | {np.median(winners):.2f} | {np.mean(winners >= 0.99):.0%} | "
              f"{on_expected.mean():.2f} | {nll:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default=None, help="model name [default: the built-in one]")
    parser.add_argument("--quality", action="store_true", help="print the quality tables instead of timings")
    parser.add_argument("--verbose", action="store_true", help="list the misses of each scorer")
    args = parser.parse_args()
    quality(args) if args.quality else speed(args)


if __name__ == "__main__":
    main()
