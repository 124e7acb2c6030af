"""What a Llama-family config.json says, checked: sizes, RoPE (its type, theta, scaling and the
dimensions it rotates), sliding windows per layer and which projections carry biases, with
transformers' defaults and precedence (config_defaults.field). llama.py runs the forward pass.

What a Llama-like family changes is written as its ``Variant`` (VARIANTS: one per model_type of
llama.py; a family file of its own, as qwen3.py, passes its own): its windows rule, the bias flags
its modeling file honours, fused projections, RoPE types, Gemma's norm offset and embedding scale,
per-head q / k norms, and its defaults table when config_defaults does not hold it.
"""

from __future__ import annotations

import math

import numpy as np

from dataclasses import dataclass
from typing import Any

from attncli.hf.kernels import ops
from attncli.hf.checks.config_defaults import DEFAULT_ROPE_THETA, brief, field, finite

ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class Variant:
    """What one Llama-like model_type changes of Llama's config and pass."""

    windows: str = "none"  # "none"; "every" (sliding_window on every layer: Mistral, Phi-3); "layer_types"
    # (Qwen2, Qwen3: with use_sliding_window, the layers layer_types marks, by default from max_window_layers on)
    bias_flags: tuple[str, ...] = ()  # the flags its modeling file honours: attention_bias (q, k, v, o), mlp_bias
    qkv_bias: bool = False  # q, k, v always biased (Qwen2)
    fused: bool = False  # one qkv_proj and one gate_up_proj (Phi-3)
    rope_types: tuple[str, ...] = ROPE_TYPES
    partial_default: bool = False  # its default RoPE reads partial_rotary_factor (Phi-3)
    norm_offset: float = 0.0  # RMSNorm weight applied as offset + w (Gemma: 1)
    embed_scale: bool = False  # embeddings * sqrt(d) (Gemma's normalizer)
    tanh_gelu: bool = False  # hidden_act "gelu" read as the tanh approximation (Gemma's legacy releases)
    encoder_flag: str | None = None  # a config flag that makes it an encoder attn does not run (Gemma's)
    qk_norm: bool = False  # q and k RMS-normed per head before RoPE (Qwen3)
    defaults: dict[str, Any] | None = None  # its defaults table (None: config_defaults' for its model_type)
    nullable: frozenset[str] | None = None

    def field(self, config: dict, key: str) -> Any:
        return field(config, key, self.defaults, None if self.nullable is None else set(self.nullable))


VARIANTS = {
    "llama": Variant(bias_flags=("attention_bias", "mlp_bias")),
    "mistral": Variant(windows="every"),
    "qwen2": Variant(windows="layer_types", qkv_bias=True),
    "gemma": Variant(bias_flags=("attention_bias",), norm_offset=1.0, embed_scale=True, tanh_gelu=True,
                     encoder_flag="use_bidirectional_attention"),
    "phi3": Variant(windows="every", fused=True, rope_types=("default",), partial_default=True),  # Phi3Config
    # refuses linear and llama3 (and attn runs no longrope)
}
MODEL_TYPES = set(VARIANTS)


def variant_of(config: dict, variant: Variant | None = None) -> Variant:
    return VARIANTS[config["model_type"]] if variant is None else variant


def _number(value, key: str, *, integer: bool = False) -> float:
    """``value`` as a positive finite number (a TypeError naming ``key`` otherwise: the caller
    reports "config.json lacks or garbles ...")."""
    if not (finite(value) and value > 0) or (integer and int(value) != value):
        raise TypeError(f"'{key}' ({brief(value)}: a positive {'integer' if integer else 'number'} is needed)")
    return int(value) if integer else float(value)


def _flag(config: dict, key: str, v: Variant) -> bool:
    value = v.field(config, key)
    if not isinstance(value, bool):
        raise TypeError(f"'{key}' ({value!r}: true or false is needed)")
    return value


def sizes(config: dict, variant: Variant | None = None) -> dict[str, int]:
    """The sizes the pass reads (d, h, h_kv, d_head, intermediate, layers, vocab), each config.json's
    or transformers' default for the family (config_defaults); TypeError naming a garbled one."""
    v = variant_of(config, variant)
    out = {key: _number(v.field(config, key), key, integer=True)
           for key in ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size")}
    kv, head_dim = v.field(config, "num_key_value_heads"), v.field(config, "head_dim")
    out["num_key_value_heads"] = out["num_attention_heads"] if kv is None else _number(kv, "num_key_value_heads",
                                                                                         integer=True)
    out["head_dim"] = out["hidden_size"] // out["num_attention_heads"] if head_dim is None else \
        _number(head_dim, "head_dim", integer=True)
    return out


def rope_parameters(config: dict, variant: Variant | None = None) -> dict:
    """The RoPE settings as transformers 5 standardizes them: ``rope_scaling`` (older configs) wins
    over ``rope_parameters`` whole when both are given; rope_theta and partial_rotary_factor inside
    win over the top-level ones; rope_type falls back to "type", then "default"."""
    scaling = config.get("rope_scaling")
    params = scaling if scaling else config.get("rope_parameters")  # transformers: rope_scaling or rope_parameters
    if params is None:
        params = {}
    if not isinstance(params, dict) or any(isinstance(v, dict) for v in params.values()):
        raise TypeError("'rope_parameters' (one dict of numbers is needed, not one per layer type)")
    params = dict(params)
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("rope_theta", config.get("rope_theta", DEFAULT_ROPE_THETA))
    if "partial_rotary_factor" not in params and config.get("partial_rotary_factor") is not None:
        params["partial_rotary_factor"] = config["partial_rotary_factor"]
    if params["rope_type"] == "llama3":  # a top-level field wins (transformers' standardize_rope_params)
        if "original_max_position_embeddings" in config:
            params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
        else:
            params.setdefault("original_max_position_embeddings",
                              variant_of(config, variant).field(config, "max_position_embeddings"))
    return params


def rotary_dim(config: dict, d_head: int, variant: Variant | None = None) -> int:
    """How many of a head's dimensions RoPE turns: d_head * partial_rotary_factor for Phi-3 (whose
    default RoPE reads the factor) and for linear / llama3 RoPE; all of them for the others' default
    RoPE, which transformers computes without the factor."""
    params = rope_parameters(config, variant)
    if not variant_of(config, variant).partial_default and params["rope_type"] == "default":
        return d_head
    return int(d_head * _number(params.get("partial_rotary_factor", 1.0), "partial_rotary_factor"))


def unsupported(config: dict, variant: Variant | None = None) -> str | None:
    """Why this backend cannot run the config (None when it can); TypeError / KeyError for a
    missing or garbled field."""
    kind, v = config["model_type"], variant_of(config, variant)
    s = sizes(config, v)
    heads, kv = s["num_attention_heads"], s["num_key_value_heads"]
    if v.field(config, "head_dim") is None and s["hidden_size"] % heads:
        return "hidden_size not a multiple of num_attention_heads (and no head_dim)"
    if heads % kv:
        return f"num_attention_heads ({heads}) not a multiple of num_key_value_heads ({kv})"
    _number(v.field(config, "rms_norm_eps"), "rms_norm_eps")
    act = v.field(config, "hidden_act")
    if act not in ops.ACTIVATIONS:
        return f"hidden_act {act!r}"
    if v.encoder_flag and v.field(config, v.encoder_flag):
        return f"{v.encoder_flag} (a Gemma encoder)"
    for flag in v.bias_flags:
        _flag(config, flag, v)
    _flag(config, "tie_word_embeddings", v)
    params = rope_parameters(config, v)
    kinds = v.rope_types
    if params["rope_type"] not in kinds:
        return f"rope type {params['rope_type']!r} (it runs {', '.join(kinds)})"
    _number(params["rope_theta"], "rope_theta")
    factor = _number(params.get("partial_rotary_factor", 1.0), "partial_rotary_factor")
    if factor > 1:
        raise TypeError(f"'partial_rotary_factor' ({factor}: at most 1)")
    if not v.partial_default and params["rope_type"] != "default" and factor != 1:
        return f"partial_rotary_factor with rope type {params['rope_type']!r} (transformers' {kind} rotates whole heads)"
    if params["rope_type"] != "default":
        _number(params.get("factor"), "factor")
    if params["rope_type"] == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            _number(params.get(key), key)
        if params["high_freq_factor"] <= params["low_freq_factor"]:
            raise TypeError("'high_freq_factor' (must exceed low_freq_factor)")
        _number(params["original_max_position_embeddings"], "original_max_position_embeddings", integer=True)
    windows(config, v)
    return None


def windows(config: dict, variant: Variant | None = None) -> list[int | None]:
    """Per layer, the sliding window (a query sees the keys less than ``window`` positions back), or
    None: Mistral's and Phi-3's on every layer; Qwen2's (when use_sliding_window) on the layers its
    layer_types marks sliding_attention, by default those from max_window_layers on."""
    v = variant_of(config, variant)
    layers = _number(v.field(config, "num_hidden_layers"), "num_hidden_layers", integer=True)
    if v.windows == "none":
        return [None] * layers
    window = v.field(config, "sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise TypeError(f"'sliding_window' ({brief(window)}: an integer is needed: transformers' config class "
                        "refuses any other)")
    if v.windows == "layer_types" and not _flag(config, "use_sliding_window", v):
        window = None
    if window is not None:
        window = _number(window, "sliding_window", integer=True)
    if v.windows == "every":
        return [window] * layers
    kinds = v.field(config, "layer_types")
    if kinds is None:
        first = v.field(config, "max_window_layers")
        if not isinstance(first, int) or isinstance(first, bool):  # negative: every layer from 0 on
            raise TypeError(f"'max_window_layers' ({first!r}: a whole number is needed)")
        kinds = ["sliding_attention" if window is not None and l >= first else "full_attention" for l in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or \
            not all(k in ("sliding_attention", "full_attention") for k in kinds):  # a list's item may be unhashable
        raise TypeError("'layer_types' (one of full_attention / sliding_attention per layer)")
    if window is None and "sliding_attention" in kinds:  # transformers fails on it (a window of None)
        raise TypeError("'layer_types' (sliding_attention layers, but no window: use_sliding_window false "
                        "or sliding_window null)")
    return [window if kind == "sliding_attention" else None for kind in kinds]


def inverse_frequencies(config: dict, d_head: int, variant: Variant | None = None) -> np.ndarray:
    """(rotary_dim / 2,) float64: RoPE's angle per position for each pair of rotated dimensions."""
    params = rope_parameters(config, variant)
    dim = rotary_dim(config, d_head, variant)
    inv_freq = 1.0 / float(params["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    kind = params["rope_type"]
    if kind == "linear":
        return inv_freq / float(params["factor"])
    if kind == "llama3":
        factor, low, high = (float(params[k]) for k in ("factor", "low_freq_factor", "high_freq_factor"))
        old = float(params["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)  # long waves: / factor
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)  # between: interpolated
        return np.where(medium, smoothed, scaled)
    return inv_freq


def biases(config: dict, variant: Variant | None = None) -> tuple[bool, bool, bool]:
    """Whether q/k/v, o and the MLP's projections carry biases, as each family's modeling file builds
    them: Qwen2 on q, k, v always; Llama and Gemma on q, k, v, o with attention_bias; Llama's MLP
    with mlp_bias; Mistral and Phi-3 never (their configs' flags are not read by transformers)."""
    v = variant_of(config, variant)
    attention = "attention_bias" in v.bias_flags and _flag(config, "attention_bias", v)
    mlp = "mlp_bias" in v.bias_flags and _flag(config, "mlp_bias", v)
    return v.qkv_bias or attention, attention, mlp
