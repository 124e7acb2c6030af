"""The last rows of every layer of a 1B-parameter model at 8,192 tokens, on a GPU: attn's traced pass
beside transformers' eager ``output_attentions``, in one run.

Run from the repository root, on a machine with a CUDA GPU, with the project's [big] extra:

    python bench/bench_gpu_long.py                          # Llama-3.2-1B's shape, random weights, bfloat16
    python bench/bench_gpu_long.py --model meta-llama/Llama-3.2-1B   # a hub id or a directory instead
    python bench/bench_gpu_long.py --tokens 4096 --rows 32 --dtype float32
    python bench/bench_gpu_long.py --device-map auto --max-memory 0=3GiB,cpu=16GiB   # split by accelerate
    python bench/bench_gpu_long.py --smoke                  # a 2-layer model at 64 tokens on the CPU: the code runs

Without CUDA it prints why it skips and exits 0. The model (when no --model is given) has
Llama-3.2-1B's shape: hidden 2048, 16 layers, 32 heads over 8 key-value heads, intermediate 8192,
vocabulary 128256, tied embeddings, llama3 RoPE; random weights, written in --dtype with a small
byte-level BPE tokenizer into a temporary folder. The input is ``--tokens`` random token ids.

Rows of the table (time after a warm-up pass, peak from torch.cuda.max_memory_allocated after
torch.cuda.reset_peak_memory_stats, the weights included):
- attn: ``model.trace(ids, "blocks.*.attn.pattern", rows=last N)`` with --backend torch: the model
  runs SDPA, the rows are recomputed from the captured q and k in chunks of rows;
- transformers eager: ``output_attentions=True`` (every layer's (h, T, T) at once), or "out of
  memory"; where it fits, the largest difference between its last rows and attn's.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
from _long_fixtures import byte_bpe  # noqa: E402

LLAMA_1B = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                intermediate_size=8192, vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=True,
                rms_norm_eps=1e-5, head_dim=64,
                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
SMOKE = dict(LLAMA_1B, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=512, head_dim=16, max_position_embeddings=1024,
             rope_parameters=dict(LLAMA_1B["rope_parameters"], original_max_position_embeddings=512))
CORPUS = ["the quick brown fox jumps over the lazy dog", "the cat sat on the mat and the dog sat on the log",
          "time flies like an arrow; fruit flies like a banana", "attention is all you need"]


def build(directory: Path, shape: dict, dtype: str) -> None:
    """A Llama of ``shape`` with random weights and a small byte-level BPE tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = byte_bpe(CORPUS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(**shape, bos_token_id=1, eos_token_id=2, initializer_range=0.02)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()
    model.save_pretrained(directory)
    fast.save_pretrained(directory)


class Gauge:
    """Time and peak device memory of one block (CUDA: max_memory_allocated; CPU: not measured)."""

    def __init__(self, torch, cuda: bool):
        self.torch, self.cuda = torch, cuda

    def __enter__(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.start
        self.peak = self.torch.cuda.max_memory_allocated() / 2**30 if self.cuda else float("nan")
        return False


def free(torch, cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def attn_rows(path: str, ids: list[int], rows: list[int], args, torch, cuda: bool):
    from attncli.hf import load

    placed = dict(device_map=args.device_map, max_memory=args.max_memory) if args.device_map else \
        dict(device="cuda" if cuda else "cpu")
    model = load(path, backend="torch", dtype=args.dtype, **placed)
    model.trace(ids[:64], "blocks.0.attn.pattern", rows=[63])  # warm-up: kernels, allocator
    with Gauge(torch, cuda) as g:
        trace = model.trace(ids, "blocks.*.attn.pattern", rows=rows)
    got = trace.stack("attn.pattern", model.layers)  # (L, h, rows, T)
    del model, trace
    free(torch, cuda)
    return g, got


def eager_rows(path: str, ids: list[int], rows: list[int], args, torch, cuda: bool):
    import transformers

    device = "cuda" if cuda else "cpu"
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                              dtype=getattr(torch, args.dtype)).to(device).eval()
    x = torch.tensor([ids], device=device)
    try:
        with torch.inference_mode():
            model(x[:, :64], output_attentions=True, use_cache=False, logits_to_keep=1)  # warm-up
            with Gauge(torch, cuda) as g:
                out = model(x, output_attentions=True, use_cache=False, logits_to_keep=1)
                want = torch.stack([a[0, :, rows].float().cpu() for a in out.attentions]).double().numpy()
        del out
    except torch.cuda.OutOfMemoryError:
        g, want = None, None
    del model, x
    free(torch, cuda)
    return g, want


def gib(x: float) -> str:
    return "-" if x != x else f"{x:.2f} GiB"  # NaN: not measured (the CPU)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a hub id or directory (default: Llama-3.2-1B's shape, random weights)")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--rows", type=int, default=16, help="the last N query rows of every layer")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device-map", help="accelerate's split for attn's run (auto): --max-memory sets its budget")
    parser.add_argument("--max-memory", help="e.g. 0=3GiB,cpu=16GiB,disk")
    parser.add_argument("--skip-eager", action="store_true", help="measure attn alone")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer model at 64 tokens on the CPU")
    args = parser.parse_args()
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"skipped: torch and transformers are needed ({exc}): pip install -e '.[big]'")
        return 0
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("skipped: no CUDA device here (torch.cuda.is_available() is False): this benchmark measures peak GPU "
              "memory (torch.cuda.max_memory_allocated) at 8,192 tokens; run it on a machine with a GPU, or pass "
              "--smoke to check that the code runs on the CPU")
        return 0
    if args.smoke:
        cuda, args.tokens, args.dtype = False, 64, "float32"
    with tempfile.TemporaryDirectory(prefix="attn-bench-gpu-") as tmp:
        path = args.model
        if path is None:
            path = str(Path(tmp) / "model")
            build(Path(path), SMOKE if args.smoke else LLAMA_1B, args.dtype)
        gen = torch.Generator().manual_seed(0)
        ids = [1] + torch.randint(3, 400, (args.tokens - 1,), generator=gen).tolist()
        rows = list(range(args.tokens - args.rows, args.tokens))
        mine, got = attn_rows(path, ids, rows, args, torch, cuda)
        theirs, want = (None, None) if args.skip_eager else eager_rows(path, ids, rows, args, torch, cuda)
    where = torch.cuda.get_device_name(0) if cuda else "CPU (smoke: no memory figure)"
    print(f"{args.tokens} tokens, the last {args.rows} rows of every layer, {args.dtype}, {where}\n")
    print("| pass | time | peak GPU memory |\n|---|---:|---:|")
    print(f"| attn, traced (SDPA, rows from q and k) | {mine.seconds:.2f} s | {gib(mine.peak)} |")
    if args.skip_eager:
        print("| transformers, eager, output_attentions | not run (--skip-eager) | |")
    elif theirs is None:
        print("| transformers, eager, output_attentions | out of memory | |")
    else:
        print(f"| transformers, eager, output_attentions | {theirs.seconds:.2f} s | {gib(theirs.peak)} |")
        import numpy as np

        print(f"\nlargest difference between the two passes' rows: {np.abs(got - want).max():.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
