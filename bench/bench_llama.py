"""Issue 23's figures: a Llama-family decoder on attn's NumPy path beside the transformers path, in one run.

Run from the repository root with the project and its [transformers] extra installed:

    python bench/bench_llama.py            # 3 rounds after a warm-up (about 2 minutes on 2 cores)
    python bench/bench_llama.py --runs 5 --keep DIR

The model is SmolLM2-135M's shape with random weights (hidden 576, 30 layers, 9 heads, 3 key-value
heads, intermediate 1536, vocabulary 49152, tied embeddings), written by save_pretrained in bfloat16
(about 270 MB, as the hub ships it) with a small byte-level BPE tokenizer.json trained here, into a
temporary folder (or --keep DIR, reused when it is there). Each figure is a whole process, timed
with os.wait4 (peak RSS is its own), alternated with its reference round by round (bench_speed.py's
helpers). Rows:
- one head of the last layer for a 20-token sentence: `attn matrix TEXT --transformer DIR --layer 29
  --head 8 --json` (numpy) beside the same with `--backend torch` (floors 1.0 s and 0.3x);
- `attn generate PROMPT --transformer DIR -n 20 --ignore-eos --json` (floor 3 s), beside
  `--backend torch` where generate has the option;
- the peak RSS of each numpy row against 1.5x the float32 weights (135M x 4 bytes).
"""

from __future__ import annotations

import time

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))  # this checkout's attncli, for the scripts that import this one first
from _long_fixtures import byte_bpe  # noqa: E402
from bench_speed import ATTN, Table, alternate, compile_attn, has_option  # noqa: E402

CONFIG = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
              intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True,
              rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
SENTENCE = "the quick brown fox jumps over the lazy dog while the cat sat on the mat"  # 20 tokens with <s>
PROMPT = "the cat sat on the mat"
CORPUS = ("the quick brown fox jumps over the lazy dog . the cat sat on the mat and the dog sat on the log . "
          "time flies like an arrow ; fruit flies like a banana . attention is all you need .").split(" . ")


def build(directory: Path) -> None:
    """Write the model and tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = byte_bpe(CORPUS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(**CONFIG, bos_token_id=1, eos_token_id=2, initializer_range=0.05)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.save_pretrained(directory)
    fast.save_pretrained(directory)


def smol_parser(doc: str, runs: int) -> argparse.ArgumentParser:
    """The parser every benchmark on this model opens with (its docstring's first line, --keep DIR,
    --runs N); a script adds its own options to it."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="write (or reuse) the model here instead of a temp folder")
    ap.add_argument("--runs", type=int, default=runs)
    return ap


@contextlib.contextmanager
def smol_folder(keep: Path | None) -> Iterator[Path]:
    """The model's folder: ``keep`` (built there unless it holds a model already), else a temporary
    folder, removed on leaving."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = keep or Path(tmp) / "smol"
        if not (directory / "config.json").is_file():
            directory.mkdir(parents=True, exist_ok=True)
            build(directory)
        yield directory


def parameters(directory: Path) -> int:
    """The number of parameters in the directory's safetensors files, from their headers."""
    import json
    import math
    import struct

    total = 0
    for f in directory.glob("*.safetensors"):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the model here (reused if present) instead of a temp dir")
    ap.add_argument("--build-only", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        build(args.build_only)
        return
    compile_attn()
    tmp = Path(tempfile.mkdtemp(prefix="attn-bench-llama-"))
    try:
        directory = args.keep or tmp / "smollm2-shaped"
        if not (directory / "config.json").is_file():
            # in a process of its own: the ~1 GB that torch and the model take here would otherwise be
            # inherited through the fork by every timed child and counted in its peak RSS (ru_maxrss)
            subprocess.run([sys.executable, __file__, "--build-only", str(directory)], check=True)
        params = parameters(directory)
        size = sum(f.stat().st_size for f in directory.glob("*.safetensors"))
        float32_mib = params * 4 / 2**20
        print(f"model: {params:,} parameters, {size / 2**20:.0f} MiB of bfloat16 safetensors, "
              f"{float32_mib:.0f} MiB in float32 (memory floor 1.5x = {1.5 * float32_mib:.0f} MiB)\n")
        table = Table()
        head = [ATTN, "matrix", SENTENCE, "--transformer", str(directory), "--layer", "29", "--head", "8", "--json"]
        m = alternate({"numpy": head, "torch": head + ["--backend", "torch"]}, args.runs)
        table.row("attn matrix TEXT --transformer DIR --layer 29 --head 8 --json", m["numpy"],
                  "... --backend torch", m["torch"], floor_s=1.0, floor_ratio=0.3)
        gen = [ATTN, "generate", PROMPT, "--transformer", str(directory), "-n", "20", "--ignore-eos", "--json"]
        commands = {"numpy": gen}
        if has_option([ATTN, "generate"], "--backend"):
            commands["torch"] = gen + ["--backend", "torch"]
        g = alternate(commands, args.runs)
        table.row("attn generate PROMPT --transformer DIR -n 20 --ignore-eos --json", g["numpy"],
                  "... --backend torch", g.get("torch"), floor_s=3.0)
        for label, row in (("matrix", m["numpy"]), ("generate", g["numpy"])):
            if "peak_mib" in row:
                verdict = "ok" if row["peak_mib"] <= 1.5 * float32_mib else "OVER"
                print(f"\npeak RSS of the numpy {label}: {row['peak_mib']:.0f} MiB = "
                      f"{row['peak_mib'] / float32_mib:.2f}x the float32 weights (floor 1.5x: {verdict})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()


CORRUPT = "the quick brown cat jumps over the lazy fox while the dog sat on the rug"  # SENTENCE's corrupted twin


def clean_corrupt(model, most: int | None = None):
    """(clean ids, corrupted ids, Target) of SENTENCE and CORRUPT on ``model``, cut to the same length
    (at most ``most``): the metric, at the last position, is the logit of the clean token minus that
    of the corrupted one at the last position where the two texts differ (a cut can end both on the
    same token, whose logit difference would be 0 in every run)."""
    from attncli.causal.target import Target

    clean, corrupt = model.encode(SENTENCE).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt), most or len(clean))
    clean, corrupt = clean[:n], corrupt[:n]
    j = max(i for i in range(n) if clean[i] != corrupt[i])
    return clean, corrupt, Target(n - 1, int(clean[j]), "clean", int(corrupt[j]), "corrupt")


def best(fn, runs: int) -> float:
    """The fastest of ``runs`` wall-clock timings of ``fn()``, in seconds (the benchmarks' measure)."""
    return best_wall_cpu(fn, runs)[0]


def best_wall_cpu(fn, runs: int) -> tuple[float, float]:
    """(the fastest wall-clock time, the least CPU time of this process) of ``runs`` calls of ``fn()``,
    in seconds: on a shared machine the CPU time shows the work when the wall time shows the queue."""
    walls, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)
