"""Issue 23's encoder-decoder figure: `attn matrix --stack cross` beside a bare transformers script, in one run.

Run from the repository root with the project and its [transformers] extra installed:

    python bench/bench_seq2seq.py            # 2 rounds after a warm-up
    python bench/bench_seq2seq.py --runs 5 --keep DIR

The model is t5-small's shape with random weights (d_model 512, 6 + 6 layers, 8 heads, d_kv 64,
d_ff 2048, 32 relative buckets) and the tests' small Unigram vocabulary (tests/_seq2seq_fixtures.py),
written by save_pretrained into a temporary folder (or --keep DIR, reused when it is there). Each
figure is a whole process timed with os.wait4, alternated round by round with its reference
(bench_speed.py's helpers): the reference loads the same directory with AutoModelForSeq2SeqLM
(eager), runs it on the same source with the target as labels and prints the last layer's
cross-attention as JSON, which is the work attn does plus attn's checks and views.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_speed import ATTN, Table, alternate, compile_attn  # noqa: E402

SOURCE = "the quick brown fox jumps over the lazy dog while the cat sat on the mat"
TARGET = "a quick brown fox jumps over the lazy dog"
REFERENCE = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
d, source, target = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForSeq2SeqLM.from_pretrained(d, attn_implementation="eager").eval()
with torch.inference_mode():
    out = model(**tok(source, return_tensors="pt"), labels=tok(text_target=target, return_tensors="pt")["input_ids"],
                output_attentions=True)
print(json.dumps(out.cross_attentions[-1][0].tolist()))
"""


def build(directory: Path) -> None:
    import torch
    from _seq2seq_fixtures import t5_vocab
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    tokenizer = T5Tokenizer(vocab=t5_vocab(), extra_ids=0)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(tokenizer), d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6,
                      num_heads=8, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    T5ForConditionalGeneration(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="build the model here (reused if present) instead of a temp dir")
    args = ap.parse_args()
    compile_attn()
    tmp = Path(tempfile.mkdtemp(prefix="attn-bench-seq2seq-"))
    try:
        directory = args.keep or tmp / "t5-small-shaped"
        if not (directory / "config.json").is_file():
            build(directory)
        size = sum(f.stat().st_size for f in directory.glob("*.safetensors"))
        print(f"model: t5-small-shaped, random weights, {size / 2**20:.0f} MiB of float32 safetensors\n")
        attn = [ATTN, "matrix", SOURCE, "--transformer", str(directory), "--target", TARGET, "--stack", "cross",
                "--json"]
        reference = [sys.executable, "-c", REFERENCE, str(directory), SOURCE, TARGET]
        m = alternate({"attn": attn, "transformers": reference}, args.runs)
        table = Table()
        table.row("attn matrix SOURCE --transformer DIR --target TARGET --stack cross --json", m["attn"],
                  "bare transformers: the same pass, the last layer's cross-attention as JSON", m["transformers"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
