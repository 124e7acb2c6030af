"""Peak memory of one head's attention on a GGUF file and on a bfloat16 safetensors checkpoint, on
attn's NumPy path, beside transformers' load of the same GGUF file, in one run.

Run from the repository root with the project and its [gguf] extra installed:

    python bench/bench_gguf.py                      # Llama-3.2-1B's shape (about 3 minutes on 2 cores)
    python bench/bench_gguf.py --layers 4 --no-transformers --keep DIR

The model is Llama-3.2-1B's shape with random weights (16 layers, hidden 2048, 32 heads, 8 key-value
heads, intermediate 8192, vocabulary 128,256, tied embeddings), written by this script:
- as a Q4_0 GGUF by gguf's GGUFWriter, each block's bytes random with a small float16 scale (the
  format's definition: a float16 d, then 16 bytes of 4-bit quants), norms float32;
- as bfloat16 safetensors (random finite bfloat16 bits), with the config.json and the tokenizer.json
  attn builds from the GGUF file's tokenizer metadata (a byte-level BPE of 262 tokens; ids above it
  are never used).
Each row is one child process, `attn matrix TEXT --transformer PATH --layer L-1 --head 0 --json`,
whose own peak (VmHWM: the child's, not the bench's) and wall time are printed; the transformers
row is `AutoModelForCausalLM.from_pretrained(DIR, gguf_file=...)` in float32 with eager attention
and one forward pass with output_attentions. Floors: GGUF peak < 1.5x the file, bfloat16 peak <
0.6x its float32 size.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
from _gguf_fixtures import MERGES, _byte_tokens  # noqa: E402

TEXT = "hello world, or hello there: hell or world of hello, or worlds held"
PEAK = "print('peak_kib', max(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')), " \
       "file=sys.stderr)"


def shapes(layers: int, d: int, heads: int, kv: int, inner: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """(GGUF name, HF name, NumPy shape) of every tensor of a tied Llama."""
    dh = d // heads
    out = [("token_embd.weight", "model.embed_tokens.weight", (128_256, d)),
           ("output_norm.weight", "model.norm.weight", (d,))]
    for l in range(layers):
        g, h = f"blk.{l}.", f"model.layers.{l}."
        out += [(g + "attn_norm.weight", h + "input_layernorm.weight", (d,)),
                (g + "ffn_norm.weight", h + "post_attention_layernorm.weight", (d,)),
                (g + "attn_q.weight", h + "self_attn.q_proj.weight", (heads * dh, d)),
                (g + "attn_k.weight", h + "self_attn.k_proj.weight", (kv * dh, d)),
                (g + "attn_v.weight", h + "self_attn.v_proj.weight", (kv * dh, d)),
                (g + "attn_output.weight", h + "self_attn.o_proj.weight", (d, heads * dh)),
                (g + "ffn_gate.weight", h + "mlp.gate_proj.weight", (inner, d)),
                (g + "ffn_up.weight", h + "mlp.up_proj.weight", (inner, d)),
                (g + "ffn_down.weight", h + "mlp.down_proj.weight", (d, inner))]
    return out


def write_gguf(path: Path, args: argparse.Namespace) -> None:
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(args.layers), w.add_context_length(131_072), w.add_embedding_length(args.d)
    w.add_feed_forward_length(args.inner), w.add_head_count(args.heads), w.add_head_count_kv(args.kv)
    w.add_layer_norm_rms_eps(1e-5), w.add_rope_freq_base(500_000.0), w.add_rope_dimension_count(args.d // args.heads)
    tokens = _byte_tokens()
    w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("default"), w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3]), w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(len(tokens) - 1), w.add_eos_token_id(len(tokens) - 1)
    w.add_vocab_size(128_256)
    for name, _, shape in shapes(args.layers, args.d, args.heads, args.kv, args.inner):
        if len(shape) == 1:
            w.add_tensor(name, (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            continue
        blocks = rng.integers(0, 256, size=(shape[0], shape[1] // 32, 18), dtype=np.uint8)  # (rows, blocks, 18)
        blocks[..., :2] = np.full(blocks.shape[:2], 0.004, "<f2")[..., None].view(np.uint8)
        w.add_tensor(name, blocks.reshape(shape[0], -1), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()


def write_bf16(folder: Path, gguf_path: Path, args: argparse.Namespace) -> int:
    """The same shape as bfloat16 safetensors (random finite bits) in ``folder``; its float32 bytes."""
    from attncli.hf.formats.gguf_file import GGUFFile
    from attncli.hf.formats.gguf_reader import config_of
    from attncli.hf.formats.gguf_tokenizer import tokenizer_of

    folder.mkdir(exist_ok=True)
    gguf = GGUFFile(gguf_path)
    config = config_of(gguf) | {"architectures": ["LlamaForCausalLM"], "head_dim": args.d // args.heads}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(tokenizer_of(gguf).to_str())
    entries, header, at = shapes(args.layers, args.d, args.heads, args.kv, args.inner), {}, 0
    for _, name, shape in entries:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    rng = np.random.default_rng(1)
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for _, name, shape in entries:
            sign = rng.integers(0, 2, size=shape, dtype=np.uint16) << 15
            exp = rng.integers(0x76, 0x7B, size=shape, dtype=np.uint16) << 7  # |x| in about [2^-9, 2^-4)
            fh.write((sign | exp | rng.integers(0, 128, size=shape, dtype=np.uint16)).astype("<u2").tobytes())
    return at * 2


def child(code: str) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    peak = [int(l.split()[1]) for l in done.stderr.splitlines() if l.startswith("peak_kib")]
    if done.returncode or not peak:
        raise SystemExit(f"child failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, peak[0] * 1024, done.stdout


def attn_matrix(path: Path, layer: int) -> str:
    argv = ["attn", "matrix", TEXT, "--transformer", str(path), "--layer", str(layer), "--head", "0", "--json"]
    return ("import sys\nfrom attncli.cli.main import main\n"
            f"sys.argv = {argv!r}\ntry:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n" + PEAK)


def transformers_forward(folder: Path, name: str) -> str:
    return ("import sys, torch, transformers as t\n"
            f"m = t.AutoModelForCausalLM.from_pretrained({str(folder)!r}, gguf_file={name!r}, dtype=torch.float32, "
            "attn_implementation='eager')\n"
            f"tok = t.AutoTokenizer.from_pretrained({str(folder)!r}, gguf_file={name!r})\n"
            f"ids = tok({TEXT!r}, return_tensors='pt').input_ids\n"
            "with torch.no_grad():\n    out = m(ids, output_attentions=True)\n"
            "print(ids.shape[1], float(out.attentions[-1][0, 0].sum()))\n" + PEAK)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv", type=int, default=8)
    ap.add_argument("--inner", type=int, default=8192)
    ap.add_argument("--no-transformers", action="store_true", help="skip transformers' row (it needs ~5 GB)")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the files here")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench_gguf_"))
    tmp.mkdir(parents=True, exist_ok=True)
    gguf_path, bf16 = tmp / "model-q4_0.gguf", tmp / "bf16"
    t0 = time.perf_counter()
    if not gguf_path.is_file():
        write_gguf(gguf_path, args)
    f32_bytes = write_bf16(bf16, gguf_path, args) if not (bf16 / "model.safetensors").is_file() else \
        (bf16 / "model.safetensors").stat().st_size * 2
    size = gguf_path.stat().st_size
    print(f"files written in {time.perf_counter() - t0:.0f} s: Q4_0 GGUF {size / 2**30:.2f} GiB, bfloat16 "
          f"{(bf16 / 'model.safetensors').stat().st_size / 2**30:.2f} GiB (float32 {f32_bytes / 2**30:.2f} GiB)")
    rows = [("attn, Q4_0 GGUF", attn_matrix(gguf_path, args.layers - 1), size, 1.5),
            ("attn, bfloat16 safetensors", attn_matrix(bf16, args.layers - 1), f32_bytes, 0.6)]
    if not args.no_transformers:
        rows.append(("transformers, the same GGUF (float32)", transformers_forward(tmp, gguf_path.name), size, None))
    print(f"{'row':40} {'wall s':>7} {'peak GiB':>9} {'vs':>18}")
    for label, code, base, floor in rows:
        wall, peak, _ = child(code)
        ratio = peak / base
        what = "file" if "GGUF" in label else "float32"
        verdict = "" if floor is None else (" ok" if ratio < floor else f" OVER {floor}x")
        print(f"{label:40} {wall:7.1f} {peak / 2**30:9.2f} {ratio:6.2f}x its {what}{verdict}")


if __name__ == "__main__":
    main()
