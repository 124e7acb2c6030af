"""The head-ablation grid beside TransformerLens, in one run: for every layer and head, the change
in log p(target) at the last position of a 20-token input when that head's z is zeroed.

Run from the repository root with the [transformers] extra and transformer-lens installed:

    python bench/bench_ablate_peer.py                    # SmolLM2-135M's shape, then GPT-2 small's
    python bench/bench_ablate_peer.py --shape smollm2 --layers 4 --keep DIR

Shapes, random weights written by save_pretrained into a temporary folder (or --keep DIR, reused):
- SmolLM2-135M: 30 layers x 9 heads, 3 key-value heads, hidden 576, intermediate 1536, vocabulary
  49152, head_dim 64, bfloat16 safetensors (bench_llama.py's build);
- GPT-2 small: 12 layers x 12 heads, hidden 768, vocabulary 50257, float32 safetensors.
Both sides run the model in float32 on the CPU with --threads torch threads (1 by default: on a
shared 2-core machine two threads a process spin against each other and a pass takes seconds),
after one warm-up pass each, the clean pass included in each figure:
- TransformerLens 4: ``TransformerBridge.boot_transformers(DIR)``, ``run_with_hooks`` zeroing
  ``blocks.{l}.attn.hook_z[:, :, h]``, one whole pass per head;
- attn's torch backend: ``trace`` with ``Intervention("blocks.{l}.attn.z", head=h)``, resumed at layer l
  from the clean pass's ``blocks.{l}.resid_pre``;
- attn's NumPy grid: ``attncli.causal.grids.ablate`` (what ``attn ablate`` runs) on the model
  loaded with --backend numpy, in its float32 pass (GPT-2's float32 twin; the Llama family's
  weights widened to float32), each layer's heads as one batch rerun from the cached stream; always the whole grid (every layer), after a warm-up
  pass that widens the bfloat16 weights once.
The grids are compared (largest difference) so a fast wrong grid shows. The figures are printed
side by side with the ratio TransformerLens / attn NumPy, of wall clock and (in brackets) of each
side's CPU time: on one thread each the CPU ratio is the steady one on a busy machine, where the
wall clock of a 45 s run and of a 5 s one meet different loads.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_llama import SENTENCE  # noqa: E402
from bench_llama import build as build_smollm2  # noqa: E402
from attncli.env import runtime  # noqa: E402
from attncli.hf import load  # noqa: E402

GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024)


def build_gpt2_small(directory: Path) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    from _transformer_fixtures import train_byte_bpe

    vocab, merges = train_byte_bpe(["<|endoftext|>"])
    tok = GPT2Tokenizer(vocab=vocab, merges=merges)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**GPT2_SMALL, bos_token_id=0, eos_token_id=0)).eval()
    model.save_pretrained(directory)
    tok.save_pretrained(directory)


SHAPES = {"smollm2": build_smollm2, "gpt2": build_gpt2_small}


def timed(fn, *args):
    """(seconds of wall clock, seconds of this process's CPU, fn(*args)): on one thread a side's CPU
    time is its work alone, whatever the rest of a busy machine does to the wall clock."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0, out


def bench(shape: str, directory: Path, layers: int | None) -> None:
    import numpy as np
    import torch

    from _causal_peer import boot_lens, lens_grid, numpy_grid, trace_grid
    if not (directory / "config.json").is_file():
        SHAPES[shape](directory)
    model = load(str(directory), backend="torch")
    ids = model.encode(SENTENCE).ids[:20]
    ids += [ids[-1]] * (20 - len(ids))
    target = ids[5]
    bridge = boot_lens(directory)
    cut = min(layers or model.layers, model.layers)  # the grid's rows (every pass still runs the whole model)
    with torch.inference_mode():
        bridge(torch.tensor([ids]))  # warm-ups
    model.trace(ids, "logits")
    t_lens, c_lens, g_lens = timed(lens_grid, bridge, ids, target, cut)
    t_attn, c_attn, g_attn = timed(trace_grid, model, ids, target, True, cut)
    passes = cut * model.heads
    print(f"\n{shape}: {cut} of {model.layers} layers x {model.heads} heads "
          f"= {passes} ablations, {len(ids)} tokens, float32, torch threads {torch.get_num_threads()}, "
          f"attn BLAS threads {runtime.threads}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"  TransformerLens 4 (hook_z zeroed per head)   {t_lens:7.2f} s  {1000 * t_lens / passes:6.1f} ms a pass"
          f"   (CPU {c_lens:.2f} s)")
    print(f"  attn torch trace (z intervention, resumed)   {t_attn:7.2f} s  {1000 * t_attn / passes:6.1f} ms a pass"
          f"   TransformerLens / attn torch = {t_lens / t_attn:.2f}x   (CPU {c_attn:.2f} s, {c_lens / c_attn:.2f}x)")
    print(f"  largest difference between the grids: {np.abs(g_lens - g_attn).max():.2e}")
    fast = load(str(directory), backend="numpy")
    fast.trace(ids, "logits")  # the warm-up: the weights widened once
    t_numpy, c_numpy, g_numpy = timed(numpy_grid, fast, ids, target)
    print(f"  attn numpy (attn ablate's grid, batched)     {t_numpy:7.2f} s  {1000 * t_numpy / (fast.layers * fast.heads):6.1f}"
          f" ms a head ({fast.layers} layers)   TransformerLens / attn numpy = "
          f"{t_lens / t_numpy * (fast.layers / cut):.2f}x" + (" (per head)" if cut < fast.layers else "")
          + f"   (CPU {c_numpy:.2f} s, {c_lens / c_numpy * (fast.layers / cut):.2f}x)   load {os.getloadavg()[0]:.1f}")
    print(f"  largest difference, NumPy grid vs TransformerLens: {np.abs(g_numpy[:cut] - g_lens).max():.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    ap.add_argument("--layers", type=int, help="only the first N layers' heads (a quicker run)")
    ap.add_argument("--threads", type=int, default=1, help="threads for every side: torch's, and attn's BLAS "
                    "threads per pass, as attn --threads N (default 1)")
    ap.add_argument("--keep", type=Path, help="build the models under this folder (reused) instead of a temp dir")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    runtime.choose_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="attn-bench-ablate-"))
    try:
        for shape in SHAPES if args.shape == "both" else [args.shape]:
            bench(shape, (args.keep or tmp) / f"{shape}-shaped", args.layers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
