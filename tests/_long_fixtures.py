"""A SmolLM2-135M-shaped Llama with random weights, for long inputs: hidden 576, 9 heads, 3 key-value
heads, intermediate 1536, vocabulary 49152, tied embeddings, 8,192 positions, any number of layers
(SmolLM2-135M has 30). Written without torch: ``config.json``, float32 ``model.safetensors`` by
safetensors' NumPy writer, and a small byte-level BPE ``tokenizer.json`` (the model is read by token
ids; the tokenizer is there because loading wants one). Also a peak-memory probe run in a process of
its own (``peak_of_a_pass``). Importing this module imports neither torch nor transformers.

    build_smol(dir, layers) -> dir
    float32_bytes(dir) -> the float32 weights' bytes (the file's tensors)
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

SMOL = dict(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
            vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True, rms_norm_eps=1e-5,
            rope_theta=100000.0, hidden_act="silu", model_type="llama", architectures=["LlamaForCausalLM"],
            bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False, head_dim=64)
CORPUS = ["the quick brown fox jumps over the lazy dog", "the cat sat on the mat and the dog sat on the log",
          "time flies like an arrow; fruit flies like a banana", "attention is all you need"]


def byte_bpe(corpus=CORPUS):
    """A small byte-level BPE tokenizer trained on ``corpus`` (<unk> 0, <s> 1, </s> 2; <s> leads a
    text), as the tests' and the benchmarks' Llama-shaped models use."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus) * 5, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


def build_tokenizer(directory: Path) -> None:
    byte_bpe().save(str(directory / "tokenizer.json"))


def build_smol(directory: Path, layers: int, seed: int = 0) -> Path:
    """The model with ``layers`` layers, weights drawn N(0, 0.02) (SmolLM2's initializer_range), norms 1."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = dict(SMOL, num_hidden_layers=layers)
    d, h, kv, i, V = (config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                          "intermediate_size", "vocab_size"))
    dh = d // h
    rng = np.random.default_rng(seed)

    def draw(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))

    tensors = {"model.embed_tokens.weight": draw(V, d), "model.norm.weight": np.ones(d, np.float32)}
    for l in range(layers):
        p = f"model.layers.{l}."
        tensors.update({p + "input_layernorm.weight": np.ones(d, np.float32),
                        p + "post_attention_layernorm.weight": np.ones(d, np.float32),
                        p + "self_attn.q_proj.weight": draw(h * dh, d), p + "self_attn.k_proj.weight": draw(kv * dh, d),
                        p + "self_attn.v_proj.weight": draw(kv * dh, d), p + "self_attn.o_proj.weight": draw(d, h * dh),
                        p + "mlp.gate_proj.weight": draw(i, d), p + "mlp.up_proj.weight": draw(i, d),
                        p + "mlp.down_proj.weight": draw(d, i)})
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    build_tokenizer(directory)
    return directory


def float32_bytes(directory: Path) -> int:
    """The bytes of the checkpoint's tensors in float32 (parameters x 4), from the safetensors header."""
    with open(Path(directory) / "model.safetensors", "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    return 4 * sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
