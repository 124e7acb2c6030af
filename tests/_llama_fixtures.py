"""Tiny random Llama-family decoders (Llama, Mistral, Qwen2, Gemma, Phi-3, Qwen3), written with
``save_pretrained`` as the hub ships them: ``config.json``, ``model.safetensors`` (float32, or
bfloat16 / float16 with ``dtype=``) and a fast tokenizer whose post-processor adds ``<s>`` in front,
with a chat template. Importing this module imports neither torch nor transformers.

Each variant makes one of the family's steps bite: grouped-query attention (2 key-value heads for
4 query heads), a sliding window shorter than the test sentences, q/k/v biases, Gemma's head_dim
apart from hidden/heads and its (1 + w) norms, Phi-3's fused projections and partial rotary
dimensions, linear and llama3 RoPE scaling with bands that cut through the frequencies, Qwen3's
per-head q / k norms (their weights drawn) with its own head_dim, biases and a window on layer 1.

    build_decoder(kind, dir, dtype="float32", **overrides) -> dir
"""

from __future__ import annotations

import functools

from pathlib import Path
from typing import Callable

from _transformer_fixtures import TEXT, _seed

BASE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=37, max_position_embeddings=64, initializer_range=0.2, rms_norm_eps=1e-6)

KINDS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=False)),
    "llama-bias": ("LlamaConfig", "LlamaForCausalLM", dict(attention_bias=True, mlp_bias=True, num_key_value_heads=4,
                                                         rope_parameters={"rope_type": "linear", "factor": 3.0,
                                                                          "rope_theta": 500.0})),
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=True, num_key_value_heads=1,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=3)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1,
                                                      tie_word_embeddings=True)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(head_dim=12, num_key_value_heads=1,
                                                      hidden_act="gelu_pytorch_tanh")),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=12, num_key_value_heads=1, sliding_window=3, layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=20, rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                                   "full_attention": {"rope_type": "default", "rope_theta": 5000.0}})),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                    "partial_rotary_factor": 0.5})),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=12, attention_bias=True, use_sliding_window=True,
                                                      sliding_window=4, max_window_layers=1)),
}
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def build_tokenizer(vocab_size: int = 300):
    """A byte-level BPE trained on TEXT, ``<s>`` added in front of every text by its post-processor
    (as Llama's tokenizer.json does), wrapped as a transformers fast tokenizer with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT * 3, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   additional_special_tokens=["<|user|>", "<|assistant|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_decoder(kind: str, directory: Path, dtype: str = "float32", shard: str | None = None, **overrides) -> Path:
    """The model of ``kind`` in ``dtype``; ``shard`` (e.g. "20KB") writes a sharded checkpoint of
    pieces at most that size and its model.safetensors.index.json."""
    import torch
    import transformers

    config_name, model_name, extra = KINDS[kind]
    directory = Path(directory)
    tokenizer = build_tokenizer()
    _seed()
    settings = {**BASE, **extra, **overrides}
    settings.setdefault("bos_token_id", tokenizer.bos_token_id)
    settings.setdefault("eos_token_id", tokenizer.eos_token_id)
    config = getattr(transformers, config_name)(vocab_size=len(tokenizer), **settings)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # biases start at 0 and norm weights at 1 (Gemma's at 0): move them, so they bite
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    model.save_pretrained(directory, **({"max_shard_size": shard} if shard else {}))
    tokenizer.save_pretrained(directory)
    for name in ("config.json", "tokenizer.json"):
        assert (directory / name).is_file(), f"{name} missing in {directory}"
    return directory



def decoders_in(base: Path) -> Callable[[str], Path]:
    """``build(kind)``: build_decoder(kind, base / kind), each kind built once (a module fixture's folders)."""
    @functools.lru_cache(maxsize=None)
    def build(kind: str) -> Path:
        return build_decoder(kind, base / kind)
    return build

def build_mpnet(directory: Path) -> Path:
    """A tiny random MPNetModel (relative position bias, positions from padding_idx + 1) with a
    WordPiece tokenizer whose special tokens are MPNet's (<s> 0, <pad> 1, </s> 2)."""
    import torch
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    from _transformer_fixtures import WORDPIECE

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "[UNK]"] + WORDPIECE[5:]) + "\n")
    tokenizer = MPNetTokenizer(str(vocab))
    _seed()
    config = MPNetConfig(vocab_size=len(WORDPIECE) + 1, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37, max_position_embeddings=42, initializer_range=0.2,
                         relative_attention_num_buckets=32)
    model = MPNetModel(config).eval()
    with torch.no_grad():  # the bias table starts small: make it bite
        model.encoder.relative_attention_bias.weight.normal_(0.0, 1.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    assert (directory / "tokenizer.json").is_file()
    return directory
