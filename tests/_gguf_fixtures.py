"""Tiny random models written as GGUF files by the ``gguf`` package (llama.cpp's writer), in the
layout llama.cpp's converter gives them: names blk.N.*, q / k rows permuted for its RoPE (Llama,
Mistral), GPT-2's Conv1D weights stored (out, in), Gemma 3's norms stored as 1 + w (its head_dim
twice d / heads, given as attention.key_length, a sliding window of 3 and RoPE base 1000)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from _transformer_fixtures import bytes_to_unicode

D, HEADS, KV_HEADS, LAYERS, INNER, CTX = 64, 4, 2, 2, 96, 64  # Q4_K needs rows of 256: see k_quant
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "w"), ("o", "r")]  # byte-level BPE merges (\u0120: a space)


def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet (256 tokens, in byte order), the merges and <|endoftext|>: a
    byte-level BPE vocabulary."""
    return [c for _, c in sorted(bytes_to_unicode().items())] + [a + b for a, b in MERGES] + ["<|endoftext|>"]


# ggml's K-quant blocks of 256 weights (ggml-common.h), which gguf-py reads but cannot write:
# (bytes per block, [(offset, f16 scale fields)]): Q4_K d, dmin, scales[12], qs[128]; Q5_K d, dmin,
# scales[12], qh[32], qs[128]; Q6_K ql[128], qh[64], scales[16] (int8), d
K_LAYOUT = {"Q4_K": (144, [0, 2]), "Q5_K": (176, [0, 2]), "Q6_K": (210, [208])}


def k_quant_bytes(rng: np.random.Generator, qtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random K-quant blocks for a tensor of ``shape``: random quants and sub-block scales, the
    f16 super-block scales set to small finite values. (rows, row_bytes) uint8."""
    size, halves = K_LAYOUT[qtype]
    blocks = rng.integers(0, 256, size=(int(np.prod(shape)) // 256, size), dtype=np.uint8)  # (n_blocks, size)
    for at in halves:
        blocks[:, at: at + 2] = (rng.uniform(1e-5, 1e-4, len(blocks)).astype("<f2")
                                 .view(np.uint8).reshape(-1, 2))
    return blocks.reshape(*shape[:-1], shape[-1] // 256 * size)


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's LlamaModel.permute: (h, 2, d_head/2, ...) -> (h, d_head/2, 2, ...)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, arch: str = "llama", qtype: str = "F32", *, d: int = D, inner: int = INNER,
               layers: int = LAYERS, seed: int = 0, tied: bool = False, extra: dict | None = None,
               meta: dict | None = None) -> Path:
    """A tiny random ``arch`` model as GGUF, its 2-D weights stored as ``qtype`` (norms F32).
    ``meta``: metadata keys replaced as given, each key -> None (left out) or (value, value type
    name, e.g. "INT32", "FLOAT32", "STRING", "ARRAY"), so a test can write what the writer's typed
    add_* methods would not (a negative head count, a NaN, a string where a count belongs)."""
    import gguf

    ctx = 1024 if arch == "gpt2" else CTX  # transformers reads a GPT-2 GGUF with its defaults: 1024 positions,
    inner = 4 * d if arch == "gpt2" else inner  # an MLP of 4 d (it leaves the file's lengths out)
    rng = np.random.default_rng(seed)
    tokens = _byte_tokens()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(ctx)
    w.add_embedding_length(d)
    w.add_feed_forward_length(inner)
    w.add_head_count(HEADS)
    if arch == "gpt2":
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_head_count_kv(KV_HEADS)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(1000.0 if arch == "gemma3" else 10000.0)
        if arch == "gemma3":
            w.add_key_length(2 * d // HEADS)
            w.add_value_length(2 * d // HEADS)
            w.add_sliding_window(3)
        if arch in ("llama", "mistral", "phi3"):
            w.add_rope_dimension_count(d // HEADS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (vocab - 1) + [3])
    w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(vocab - 1)
    w.add_eos_token_id(vocab - 1)
    w.add_pad_token_id(vocab - 1)  # Phi-3's config would default to 32000, past this vocabulary

    def add(name: str, shape: tuple[int, ...], scale: float = 0.2, norm: bool = False) -> None:
        t = (1.0 + 0.1 * rng.standard_normal(shape) if norm else scale * rng.standard_normal(shape)).astype(np.float32)
        if arch in ("llama", "mistral") and name.endswith(("attn_q.weight", "attn_k.weight")):
            t = permute(t, HEADS if "attn_q" in name else KV_HEADS)
        if len(shape) == 1 or qtype == "F32":
            w.add_tensor(name, t)
        elif qtype in ("F16",):
            w.add_tensor(name, t.astype(np.float16))
        elif qtype in K_LAYOUT:
            kind = getattr(gguf.GGMLQuantizationType, qtype)
            w.add_tensor(name, k_quant_bytes(rng, qtype, t.shape), raw_dtype=kind)
        else:
            kind = getattr(gguf.GGMLQuantizationType, qtype)
            w.add_tensor(name, gguf.quants.quantize(t, kind), raw_dtype=kind)

    dh = 2 * d // HEADS if arch == "gemma3" else d // HEADS
    add("token_embd.weight", (vocab, d))
    if arch == "gpt2":
        add("position_embd.weight", (ctx, d))
    for l in range(layers):
        p = f"blk.{l}."
        add(p + "attn_norm.weight", (d,), norm=True)
        add(p + "ffn_norm.weight", (d,), norm=True)
        if arch == "gpt2":
            for n in ("attn_norm", "ffn_norm"):
                add(p + n + ".bias", (d,), 0.05)
            add(p + "attn_qkv.weight", (3 * d, d)), add(p + "attn_qkv.bias", (3 * d,), 0.05)
            add(p + "attn_output.weight", (d, d)), add(p + "attn_output.bias", (d,), 0.05)
            add(p + "ffn_up.weight", (inner, d)), add(p + "ffn_up.bias", (inner,), 0.05)
            add(p + "ffn_down.weight", (d, inner)), add(p + "ffn_down.bias", (d,), 0.05)
            continue
        if arch == "phi3":  # fused q|k|v and gate|up, as Phi-3 stores them
            add(p + "attn_qkv.weight", ((HEADS + 2 * KV_HEADS) * dh, d))
            add(p + "attn_output.weight", (d, HEADS * dh))
            add(p + "ffn_up.weight", (2 * inner, d))
            add(p + "ffn_down.weight", (d, inner))
            continue
        if arch == "gemma3":  # the norms around each block, and q and k's per head
            add(p + "post_attention_norm.weight", (d,), norm=True)
            add(p + "post_ffw_norm.weight", (d,), norm=True)
            add(p + "attn_q_norm.weight", (dh,), norm=True)
            add(p + "attn_k_norm.weight", (dh,), norm=True)
        add(p + "attn_q.weight", (HEADS * dh, d))
        add(p + "attn_k.weight", (KV_HEADS * dh, d))
        add(p + "attn_v.weight", (KV_HEADS * dh, d))
        if arch == "qwen2":
            add(p + "attn_q.bias", (HEADS * dh,), 0.05)
            add(p + "attn_k.bias", (KV_HEADS * dh,), 0.05)
            add(p + "attn_v.bias", (KV_HEADS * dh,), 0.05)
        add(p + "attn_output.weight", (d, HEADS * dh))
        add(p + "ffn_gate.weight", (inner, d))
        add(p + "ffn_up.weight", (inner, d))
        add(p + "ffn_down.weight", (d, inner))
    add("output_norm.weight", (d,), norm=True)
    if arch == "gpt2":
        add("output_norm.bias", (d,), 0.05)
    if not tied:
        add("output.weight", (vocab, d))
    for name, tensor in (extra or {}).items():  # more tensors, as given (float32)
        w.add_tensor(name, np.asarray(tensor, dtype=np.float32))
    for key, given in (meta or {}).items():
        w.kv_data[0].pop(key, None)
        if given is not None:
            value, kind = given
            sub = None
            if kind == "ARRAY":
                sub = gguf.GGUFValueType.STRING if value and isinstance(value[0], str) else \
                    gguf.GGUFValueType.FLOAT32 if value and isinstance(value[0], float) else gguf.GGUFValueType.INT32
            w.add_key_value(key, value, getattr(gguf.GGUFValueType, kind), sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


SPM_PIECES = ["\u2581", "\u2581h", "he", "ll", "\u2581w", "or", "ld", "\u2581he", "\u2581hell", "\u2581hello",
              "\u2581world", "\u2581or", ","]  # sentencepiece pieces (\u2581: a space), best first


def sentencepiece_meta(vocab: int, *, user_defined: str | None = None) -> dict:
    """``meta`` for write_gguf giving the file a sentencepiece vocabulary of ``vocab`` tokens (the
    embedding's rows) as llama.cpp's converter writes one (tokenizer.ggml.model "llama"): <unk>,
    <s>, </s> (unknown, control, control), byte-fallback tokens <0xNN>, single characters and a few
    merged pieces, scores falling in that order; no merges (transformers derives them from the
    scores). ``user_defined``: one more piece marked USER_DEFINED (4), like <think>."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    chars = list("abcdefghijklmnopqrstuvwxyz") + SPM_PIECES + ([user_defined] if user_defined else [])
    tokens = pieces[:vocab - len(chars)] + chars
    assert len(tokens) == vocab and len(set(tokens)) == vocab, "the vocabulary is too small for the pieces"
    types = [2, 3, 3] + [6] * (vocab - len(chars) - 3) + [1] * len(chars)
    if user_defined:
        types[-1] = 4
    return {"tokenizer.ggml.model": ("llama", "STRING"), "tokenizer.ggml.pre": ("default", "STRING"),
            "tokenizer.ggml.tokens": (tokens, "ARRAY"), "tokenizer.ggml.merges": None,
            "tokenizer.ggml.scores": ([-float(i) for i in range(vocab)], "ARRAY"),
            "tokenizer.ggml.token_type": (types, "ARRAY"), "tokenizer.ggml.bos_token_id": (1, "UINT32"),
            "tokenizer.ggml.eos_token_id": (2, "UINT32"), "tokenizer.ggml.unknown_token_id": (0, "UINT32"),
            "tokenizer.ggml.padding_token_id": (0, "UINT32")}
