"""A GGUF file's metadata checked before a config is built from it, as config_check checks a
config.json: every key config_of reads has the right type and a sane value (no NaN, no zero or
negative count, no 10^9 layers), the keys a model cannot do without are there, block_count matches
the blk.N tensors the file holds, and the tokenizer arrays are what their keys say.

A breach is ``damaged`` naming the file and the key (exit 1), before anything is allocated or run.
"""

from __future__ import annotations

import math
import re
from typing import Any

from attncli.hf.checks.config_check import SIZES, damaged
from attncli.hf.formats.gguf_file import GGUFFile

# GGUF key (after "<architecture>.") -> the config field whose bounds (config_check.SIZES) it meets
COUNTS = {"block_count": "num_hidden_layers", "context_length": "max_position_embeddings",
          "embedding_length": "hidden_size", "feed_forward_length": "intermediate_size",
          "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
          "rope.dimension_count": "head_dim", "attention.key_length": "head_dim", "vocab_size": "vocab_size",
          "attention.sliding_window": "max_position_embeddings"}
REQUIRED = ("block_count", "embedding_length", "attention.head_count")  # no default would fit the tensors
EPSILONS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id", "separator_token_id")
FLAGS = ("add_bos_token", "add_eos_token", "add_space_prefix")  # the tokenizer's switches
BLOCK = re.compile(r"^blk\.(\d{1,9})\.")  # a longer number is no block of a model (int() of 5,000 digits fails)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = repr(value)
    return (text if len(text) <= 40 else text[:37] + "...").encode("unicode_escape").decode("ascii")


def check_metadata(gguf: GGUFFile, arch: str) -> None:
    """Every metadata value config_of and tokenizer_of read is sane; damage naming the key if not."""
    meta, name = gguf.metadata, gguf.path.name

    def bad(key: str, why: str) -> Exception:
        return damaged(f"{name}: {key}", why)

    for key in REQUIRED:
        if f"{arch}.{key}" not in meta:
            raise bad(f"{arch}.{key}", "the key is missing (a model cannot be built without it)")
    for key, field in COUNTS.items():
        value = meta.get(f"{arch}.{key}")
        if value is None:
            continue
        low, high = SIZES[field]
        if not _is_int(value):
            raise bad(f"{arch}.{key}", f"{_show(value)} is not a whole number")
        if not low <= value <= high:
            raise bad(f"{arch}.{key}", f"{value:,} is outside {low}..{high:,}")
    d, heads, kv = (meta.get(f"{arch}.{k}") for k in ("embedding_length", "attention.head_count",
                                                      "attention.head_count_kv"))
    if (f"{arch}.rope.dimension_count" not in meta or arch == "gemma3") and d % heads:
        raise bad(f"{arch}.attention.head_count", f"{heads} heads do not divide embedding_length {d}")
    if kv is not None and heads % kv:
        raise bad(f"{arch}.attention.head_count_kv", f"{kv} key-value heads do not divide head_count {heads}")
    theta = meta.get(f"{arch}.rope.freq_base")
    if theta is not None and not (_number(theta) and 1 < theta < 1e12):
        raise bad(f"{arch}.rope.freq_base", f"{_show(theta)} is not a number above 1")
    for key in EPSILONS:
        value = meta.get(f"{arch}.{key}")
        if value is not None and not (_number(value) and 0 < value < 1):
            raise bad(f"{arch}.{key}", f"{_show(value)} is not a small positive number")
    for key in TOKEN_IDS:
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is not None and not (_is_int(value) and 0 <= value < 2**31):
            raise bad(f"tokenizer.ggml.{key}", f"{_show(value)} is not a token id (a whole number >= 0)")
    _check_tokenizer(meta, bad)
    _check_blocks(gguf, meta[f"{arch}.block_count"], bad, arch)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_tokenizer(meta: dict[str, Any], bad) -> None:
    """tokenizer.ggml.tokens (when present) a list of strings; its scores, token types and merges
    lists of the right type, the first two as long as the vocabulary."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        return  # tokenizer_of says the file carries none
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise bad("tokenizer.ggml.tokens", "it is not a list of strings")
    for key, ok, what in (("scores", _number, "finite numbers"), ("token_type", _is_int, "whole numbers"),
                          ("merges", lambda m: isinstance(m, str), "strings")):
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is None:
            continue
        if not isinstance(value, list) or not all(ok(v) for v in value):
            raise bad(f"tokenizer.ggml.{key}", f"it is not a list of {what}")
        if key != "merges" and len(value) != len(tokens):
            raise bad(f"tokenizer.ggml.{key}", f"it has {len(value):,} entries for {len(tokens):,} tokens")
    for key in TOKEN_IDS:  # transformers names each by its token: one past the vocabulary names none
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is not None and value >= len(tokens):
            raise bad(f"tokenizer.ggml.{key}", f"{value:,} is past the vocabulary's {len(tokens):,} tokens")
    for key in FLAGS:
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is not None and not isinstance(value, bool):
            raise bad(f"tokenizer.ggml.{key}", f"{_show(value)} is not true or false")
    for key in ("model", "pre"):
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is not None and not isinstance(value, str):
            raise bad(f"tokenizer.ggml.{key}", f"{_show(value)} is not a name")


def _check_blocks(gguf: GGUFFile, count: int, bad, arch: str) -> None:
    """block_count is the number of blk.N tensor groups the file holds, numbered 0 .. count - 1."""
    held = {int(m.group(1)) for m in map(BLOCK.match, gguf.tensors) if m}
    if held != set(range(count)):
        got = f"blk.{min(held)} .. blk.{max(held)} ({len(held):,} numbers)" if held else "no blk.N tensors"
        raise bad(f"{arch}.block_count", f"it says {count:,} blocks but the file's tensors hold {got}")
