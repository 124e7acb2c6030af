"""What a config.json field the NumPy path reads means when the file lacks it: the default of
transformers' own config class for that family, field by field.

Every field ``llama``, ``gpt2``, ``bert``, ``distilbert`` and ``mpnet`` read goes through
``field(config, key)``, so a folder means the same model to both backends. ``DERIVED`` marks a
default transformers computes from other fields (``head_dim`` = hidden_size // num_attention_heads,
``num_key_value_heads`` = num_attention_heads, GPT-2's ``n_inner`` = 4 n_embd). A null is read as
transformers reads it: where its class allows None (``NULLABLE``) it is the derived value or "none"
(no window, no RoPE scaling), anywhere else it is a garbled field. tests/hf/test_config_defaults.py
reads every entry back from transformers' classes, so a release that changes one is noticed.
"""

from __future__ import annotations

import math
from typing import Any

DERIVED = None  # computed from other fields, as transformers' __post_init__ or modeling file does
DERIVED_AS = {"num_key_value_heads": "num_attention_heads", "head_dim": "hidden_size / num_attention_heads",
              "n_inner": "4 n_embd", "layer_types": "sliding from max_window_layers on"}  # what a DERIVED one is
DEFAULT_ROPE_THETA = 10000.0  # RotaryEmbeddingConfigMixin.default_theta

_LLAMA = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
              num_key_value_heads=DERIVED, head_dim=DERIVED, hidden_act="silu", max_position_embeddings=2048,
              rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
_BERT = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
             hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0,
             is_decoder=False, add_cross_attention=False)
_ROBERTA = dict(_BERT, pad_token_id=1)

DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=DERIVED, hidden_act="silu",
                    max_position_embeddings=4096 * 32, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    sliding_window=4096),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=DERIVED, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  use_sliding_window=False, sliding_window=4096, max_window_layers=28, layer_types=DERIVED),
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, hidden_act="gelu_pytorch_tanh",
                  max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
                  use_bidirectional_attention=None),
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=DERIVED, head_dim=DERIVED, hidden_act="silu",
                 max_position_embeddings=4096, rms_norm_eps=1e-5,
                 tie_word_embeddings=False, sliding_window=None),
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=DERIVED,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5, scale_attn_weights=True,
                 scale_attn_by_inverse_layer_idx=False, add_cross_attention=False, tie_word_embeddings=True),
    "bert": _BERT,
    "roberta": dict(_ROBERTA, vocab_size=50265),
    "xlm-roberta": _ROBERTA,
    "camembert": _ROBERTA,
    "electra": dict(_BERT, embedding_size=128, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    "distilbert": dict(vocab_size=30522, max_position_embeddings=512, n_layers=6, n_heads=12, dim=768,
                       hidden_dim=4 * 768, activation="gelu"),
    "mpnet": dict(vocab_size=30527, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, layer_norm_eps=1e-12,
                  relative_attention_num_buckets=32),
}
# the Llama family's RoPE fields: read by llama_config.rope_parameters (rope_scaling wins over rope_parameters)
ROPE_FIELDS = ("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor",
               "original_max_position_embeddings")
# fields whose null transformers accepts (its class's type allows None and a later step fills it in)
NULLABLE: dict[str, set[str]] = {
    "llama": {"num_key_value_heads", "head_dim"},
    "mistral": {"head_dim", "sliding_window"},
    "qwen2": {"num_key_value_heads", "sliding_window", "layer_types"},
    "gemma": {"use_bidirectional_attention"},
    "phi3": {"num_key_value_heads", "sliding_window"},
    "gpt2": {"n_inner"},
    **{kind: {"pad_token_id"} for kind in ("bert", "roberta", "xlm-roberta", "camembert", "electra")},
}


INT_LIMIT = 2**63  # transformers holds a config's integers in torch's int64: a larger one fails there


def finite(value: Any) -> bool:
    """``value`` is a number a pass can compute with: not a bool, a finite float, or an integer within
    int64 (JSON's integers have no bound: math.isfinite and float() raise OverflowError past 1e308)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return -INT_LIMIT < value < INT_LIMIT if isinstance(value, int) else math.isfinite(value)


def brief(value: Any) -> str:
    """A config value as a message shows it: its repr, cut at 40 characters (a 400-digit integer)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field(config: dict, key: str, defaults: dict[str, Any] | None = None, nullable: set[str] | None = None) -> Any:
    """config.json's ``key`` for its family: its value, else transformers' default; a null where
    transformers allows none is a TypeError naming the field (the caller reports "lacks or garbles").
    ``defaults`` and ``nullable``: a family file's own tables (else this module's, by model_type)."""
    kind = config["model_type"]
    defaults = DEFAULTS[kind] if defaults is None else defaults
    nullable = NULLABLE.get(kind, set()) if nullable is None else nullable
    if key not in defaults:
        raise KeyError(f"attn reads no '{key}' of a {kind} config")  # a programming error, caught by the tests
    if key not in config:
        return defaults[key]
    value = config[key]
    if value is None and key not in nullable:
        raise TypeError(f"'{key}' (null, where transformers needs a value)")
    return value


def shown(key: str, value: Any) -> str:
    """A default as docs/transformers.md shows it: derived ones by what they are, JSON's true / false."""
    if value is None:
        return f"= {DERIVED_AS[key]}" if key in DERIVED_AS else "none"
    return str(value).lower() if isinstance(value, bool) else str(value)
