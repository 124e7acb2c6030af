"""`attn train` (defaults, full Brown, cached corpus) vs the same bare gensim call on the same tokens.

Run from the repository root with the project installed (NLTK_DATA pointing at Brown if the
corpus cache is not built yet):

    python bench/bench_train.py            # three runs of each, interleaved, about 4 minutes on 2 cores
    python bench/bench_train.py --runs 7   # median of 7

Both sides are whole processes, started the same way, on the same token file (attn's corpus
cache, one sentence per line), with the same gensim keyword arguments
(``TrainParams().gensim_kwargs()``, i.e. attn's defaults):

- attn:  ``attn train --json --name bench-train`` in a temporary ATTN_HOME holding the cache;
  it also evaluates (WordSim-353, SimLex-999, analogies), stores the model and finds the probe
  words' neighbours: that is the wrapper's cost.
- gensim: ``python -c`` that reads the cache file, splits it into token lists and calls
  ``gensim.models.FastText(sentences, **kwargs)`` (build_vocab + train), nothing else.

Prints a Markdown table and the ratio attn / gensim (the issue's floor: at most 1.1x).
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
sys.path.insert(0, str(HERE.parent))
from attncli.vectors import corpus  # noqa: E402
from attncli.vectors.train import TrainParams  # noqa: E402

GENSIM_SNIPPET = """
import json, sys
from gensim.models import FastText, Word2Vec
kwargs = json.loads(sys.argv[2])
algorithm = sys.argv[3]
with open(sys.argv[1], encoding="utf-8") as fh:
    sentences = [line.split(" ") for line in fh.read().split("\\n") if line]
(FastText if algorithm == "fasttext" else Word2Vec)(sentences, **kwargs)
"""


def timed(argv: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed with exit {proc.returncode}: {' '.join(argv[:3])} ...")
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    corpus.load_corpus()  # builds the cache in the user's ATTN_HOME if needed
    cache = corpus._cache_path(None)
    params = TrainParams()
    kwargs = params.gensim_kwargs()
    attn = shutil.which("attn") or "attn"

    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, ATTN_HOME=home)
        (Path(home) / "cache").mkdir()
        shutil.copy(cache, Path(home) / "cache" / cache.name)
        attn_walls, gensim_walls, train_secs = [], [], []
        def run_attn() -> None:
            wall, out = timed([attn, "train", "--json", "--name", "bench-train"], env)
            attn_walls.append(wall)
            train_secs.append(json.loads(out)["train_seconds"])

        def run_gensim() -> None:
            wall, _ = timed([sys.executable, "-c", GENSIM_SNIPPET, str(cache), json.dumps(kwargs), params.algorithm], env)
            gensim_walls.append(wall)

        for i in range(args.runs):  # interleaved, the order alternating, so drift in the machine's load hits both
            for step in ((run_attn, run_gensim) if i % 2 == 0 else (run_gensim, run_attn)):
                step()

    a, g, t = statistics.median(attn_walls), statistics.median(gensim_walls), statistics.median(train_secs)
    print(f"gensim keyword arguments: {json.dumps(kwargs)}")
    print(f"corpus: attn's cache file {cache.name}, median of {args.runs} run(s), {os.cpu_count()} cores\n")
    def runs(values: list[float]) -> str:
        return ", ".join(f"{v:.1f}" for v in values)

    print("| process | median wall (s) | runs (s) |\n|---|---:|---|")
    print(f"| `attn train` (train + evaluate + store) | {a:.1f} | {runs(attn_walls)} |")
    print(f"| &nbsp;&nbsp;of which gensim's train() epochs | {t:.1f} | {runs(train_secs)} |")
    print(f"| bare gensim `{params.algorithm}` call on the same tokens | {g:.1f} | {runs(gensim_walls)} |")
    print(f"\nattn / gensim: {a / g:.3f}x by medians, {min(attn_walls) / min(gensim_walls):.3f}x by the fastest run "
          f"of each (floor: <= 1.1x). gensim's own epochs vary by several seconds from run to run with 2 worker "
          f"threads, so a few runs cannot resolve a few percent: compare the spread of the runs.")


if __name__ == "__main__":
    main()
