"""Gemma 3's text decoder in NumPy, step for step as transformers' ``modeling_gemma3.py``
(Gemma3ForCausalLM, config Gemma3TextConfig, model_type "gemma3_text"):

    embeddings  x = embed_tokens[ids] * sqrt(d)            sqrt(d) rounded to the weights' dtype first
    per layer   every norm an RMSNorm of weight (1 + w):    n(x) = x / sqrt(mean(x^2) + eps) * (1 + w)
                a = input_layernorm(x)
                q, k, v = q_proj(a), k_proj(a), v_proj(a)
                q, k = q_norm(q), k_norm(k)                 per head, over d_head, before RoPE
                q, k = RoPE_l(q), RoPE_l(k)                 local (sliding_attention) layers: theta
                                                            rope_local_base_freq; global (full_attention)
                                                            layers: rope_theta, with rope_scaling if any
                A = softmax(q k^T / sqrt(query_pre_attn_scalar) + mask)   local layers: a sliding window,
                                                            key j only if i - j < sliding_window
                x = x + post_attention_layernorm(o_proj(concat_heads(A v)))
                m = pre_feedforward_layernorm(x)
                x = x + post_feedforward_layernorm(down_proj(gelu_tanh(gate_proj(m)) * up_proj(m)))
    last        logits = norm(x) lm_head^T; c tanh(logits / c) when final_logit_softcapping c is set

Which layers are local: ``layer_types``, else every ``sliding_window_pattern``-th layer (default 6)
is global, the others local. ``attn_logit_softcapping`` is read but not applied: transformers'
Gemma 3 stores it and never passes it to its attention (Gemma 2 did), and attn does what it does.
Every field config.json leaves out is Gemma3TextConfig's default (DEFAULTS).

The pass is the Llama family's (llama.py: row blocks, chunked attention with q and k normed per
head and each layer's RoPE from the description, the recorded sites), with the two norms on the
sublayers' outputs: ``attn.out`` is what the layer adds to its residual stream, after
post_attention_layernorm, and ``mlp.out`` after post_feedforward_layernorm.
Shapes: B texts, T queries, S keys, d hidden_size, h heads, h_kv key-value heads, d_head head_dim,
I intermediate_size, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.hf.kernels import ops
from attncli.hf.kernels.chunked_attention import Mask
from attncli.hf.checks.config_defaults import brief, finite
from attncli.hf.checks.config_defaults import field as _field
from attncli.hf.families import llama
from attncli.hf.families.llama_config import Variant, inverse_frequencies, sizes
from attncli.hf.families.parts import Parts, Tensor, shapes
from attncli.hf.formats.weights import Weights
from attncli.model.record import Recorder

MODEL_TYPES = {"gemma3_text"}
MULTIMODAL = "gemma3"  # Gemma3ForConditionalGeneration's config: its text decoder runs (text_part), no image
MULTIMODAL_TYPES = {MULTIMODAL}
# Gemma3TextConfig's defaults for every field the pass reads
DEFAULTS = dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
                rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, query_pre_attn_scalar=256,
                sliding_window=4096, final_logit_softcapping=None, attn_logit_softcapping=None,
                use_bidirectional_attention=False)  # and layer_types: None, made from the pattern (layer_types())
NULLABLE = frozenset({"sliding_window", "final_logit_softcapping", "attn_logit_softcapping",
                      "use_bidirectional_attention"})  # the fields whose null Gemma3TextConfig accepts
ANCHORS = llama.ANCHORS
DTYPE = llama.DTYPE
UNUSED_OK = llama.UNUSED_OK
OPTIONAL: set[str] = set()
LAYER_TYPES = ("sliding_attention", "full_attention")
DEFAULT_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}  # Gemma3TextConfig.default_theta
SLIDING_WINDOW_PATTERN = 6  # Gemma3TextConfig's when neither layer_types nor sliding_window_pattern is given
ROPE_TYPES = ("default", "linear", "llama3")  # those llama_config computes; others refused by name
# what Gemma 3 shares with the Llama family's pass (llama.py reads it): Gemma's (1 + w) norms and
# sqrt(d) embeddings, q and k normed per head; its own config fields are read here
VARIANT = Variant(norm_offset=1.0, embed_scale=True, qk_norm=True, encoder_flag="use_bidirectional_attention",
                  defaults=DEFAULTS, nullable=NULLABLE)


def text_part(config: dict) -> dict:
    """The text decoder's config: ``config`` itself (gemma3_text), or a multimodal Gemma3Config's
    ``text_config`` (model_type gemma3: Gemma3ForConditionalGeneration, whose language model is
    Gemma3TextModel, saved under language_model.model.*; its vision tower and projector, outside that
    prefix, are not read: a text has no image tokens). A text_config left out is Gemma3TextConfig's
    defaults, as Gemma3Config makes it. TypeError for a text_config that is no dict."""
    if config.get("model_type") != MULTIMODAL:
        return config
    text = config.get("text_config")
    if text is None:
        text = {}
    if not isinstance(text, dict):
        raise TypeError("'text_config' (a dict is needed)")
    return {**text, "model_type": "gemma3_text"}


def field(config: dict, key: str) -> Any:
    """config.json's ``key``, else Gemma3TextConfig's default (config_defaults.field, with this family's tables)."""
    return _field(config, key, DEFAULTS, set(NULLABLE))


def _number(value: Any, key: str, *, integer: bool = False) -> float:
    """``value`` as a positive finite number (a TypeError naming ``key`` otherwise)."""
    if not (finite(value) and value > 0) or (integer and int(value) != value):
        raise TypeError(f"'{key}' ({brief(value)}: a positive {'integer' if integer else 'number'} is needed)")
    return int(value) if integer else float(value)


def _typed(config: dict, key: str, kind: type) -> float | None:
    """Gemma 3's own field ``key``, positive and of Gemma3TextConfig's declared type (its strict class
    refuses 256.0 for an int and 30 for a float: attn refuses them too), or None where it is null."""
    value = field(config, key)
    if value is None:
        return None
    if type(value) is not kind:
        raise TypeError(f"'{key}' ({brief(value)}: transformers' Gemma3TextConfig needs {'an integer' if kind is int else 'a float'})")
    return _number(value, key)


def _flag(config: dict, key: str) -> bool:
    value = field(config, key)
    if not isinstance(value, bool):
        raise TypeError(f"'{key}' ({brief(value)}: true or false is needed)")
    return value


def layer_types(config: dict) -> list[str]:
    """Each layer's kind, sliding_attention (local) or full_attention (global), as Gemma3TextConfig
    makes them: ``layer_types``, else layer i is global when (i + 1) % sliding_window_pattern == 0."""
    layers = _number(field(config, "num_hidden_layers"), "num_hidden_layers", integer=True)
    kinds = config.get("layer_types")  # null or absent: Gemma3TextConfig makes them from the pattern
    if kinds is None:
        pattern = config.get("sliding_window_pattern", SLIDING_WINDOW_PATTERN)
        if not (finite(pattern) and pattern != 0):  # transformers takes (i + 1) % pattern of any other number
            raise TypeError(f"'sliding_window_pattern' ({brief(pattern)}: a number other than 0 is needed)")
        kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or not all(k in LAYER_TYPES for k in kinds):
        raise TypeError("'layer_types' (one of full_attention / sliding_attention per layer)")
    return kinds


def windows(config: dict) -> list[int | None]:
    """Per layer, the sliding window (a query sees the keys less than ``window`` positions back), or None."""
    window = field(config, "sliding_window")
    kinds = layer_types(config)
    if window is None:  # transformers' Gemma 3 makes its sliding mask for every model, and fails on None
        raise TypeError("'sliding_window' (null: transformers' Gemma 3 builds its sliding-window mask even "
                        "without sliding_attention layers, and fails on a null window)")
    window = int(_typed(config, "sliding_window", int))
    return [window if kind == "sliding_attention" else None for kind in kinds]


def rope_parameters(config: dict) -> dict[str, dict]:
    """Each layer kind's RoPE settings as Gemma3TextConfig's convert_rope_params_to_dict makes them:
    ``rope_parameters`` holds one dict per kind (a kind left out: default RoPE); ``rope_scaling``
    (older configs) updates the global one; rope_theta defaults to the top-level ``rope_theta`` (else
    1e6) for global layers and to ``rope_local_base_freq`` (else 1e4) for local ones. TypeError
    naming a garbled field."""
    given = config.get("rope_parameters")
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise TypeError("'rope_parameters' (a dict of one dict per layer type is needed)")
    out = {}
    for kind in LAYER_TYPES:
        params = given.get(kind)
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise TypeError(f"'rope_parameters.{kind}' (a dict is needed)")
        out[kind] = dict(params) if params else {"rope_type": "default"}
    scaling = config.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise TypeError("'rope_scaling' (a dict is needed)")
        if config.get("rope_parameters") is not None and given.get("full_attention") is None:
            raise TypeError("'rope_scaling' (beside a rope_parameters without a full_attention dict to update: "
                            "transformers' Gemma3TextConfig fails on it)")
        out["full_attention"].update(scaling)
    out["full_attention"].setdefault("rope_theta", config.get("rope_theta", DEFAULT_THETA["full_attention"]))
    out["sliding_attention"].setdefault("rope_theta", config.get("rope_local_base_freq",
                                                                 DEFAULT_THETA["sliding_attention"]))
    for kind, params in out.items():  # standardize_rope_params, per layer type
        params.setdefault("rope_type", params.get("type", "default"))
        if config.get("partial_rotary_factor") is not None:
            params.setdefault("partial_rotary_factor", config["partial_rotary_factor"])
        if params["rope_type"] == "llama3":
            params.setdefault("original_max_position_embeddings", field(config, "max_position_embeddings"))
    return out


def _as_flat(config: dict, params: dict) -> dict:
    """One layer kind's RoPE settings as a Llama config llama_config reads (its own precedence
    resolved already), so the frequencies are llama_config's, written once. Default RoPE leaves
    partial_rotary_factor out: Gemma 3's own default RoPE rotates whole heads, whatever it says."""
    if params["rope_type"] == "default":
        params = {k: v for k, v in params.items() if k != "partial_rotary_factor"}
    return {"model_type": "llama", "rope_parameters": params, "rope_theta": params["rope_theta"],
            "max_position_embeddings": field(config, "max_position_embeddings")}


def frequencies(config: dict, d_head: int) -> dict[str, np.ndarray]:
    """Each layer kind's RoPE inverse frequencies (d_head / 2,), float64: the kinds layer_types
    holds (transformers' Gemma3RotaryEmbedding computes no other)."""
    present = set(layer_types(config))
    return {kind: inverse_frequencies(_as_flat(config, params), d_head)
            for kind, params in rope_parameters(config).items() if kind in present}


def unsupported(config: dict) -> str | None:
    """Why attn's NumPy path cannot run this config (None when it can); TypeError / KeyError for a
    missing or garbled field (the caller reports "lacks or garbles")."""
    if config.get("model_type") == MULTIMODAL:
        text = text_part(config)
        tied = config.get("tie_word_embeddings")
        if tied is not None and tied != text.get("tie_word_embeddings", DEFAULTS["tie_word_embeddings"]):
            return "tie_word_embeddings differing from its text_config's"
        config = text
    s = sizes(config, VARIANT)
    heads, kv = s["num_attention_heads"], s["num_key_value_heads"]
    if s["hidden_size"] % heads:  # Gemma3TextConfig.validate_architecture, head_dim or not
        return f"hidden_size ({s['hidden_size']}) not a multiple of num_attention_heads ({heads})"
    if heads % kv:
        return f"num_attention_heads ({heads}) not a multiple of num_key_value_heads ({kv})"
    _number(field(config, "rms_norm_eps"), "rms_norm_eps")
    _typed(config, "query_pre_attn_scalar", int)
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        _typed(config, key, float)
    act = field(config, "hidden_activation")
    if not isinstance(act, str):  # a list or a dict: no name (and unhashable)
        raise TypeError(f"'hidden_activation' ({brief(act)}: the name of an activation is needed)")
    if act not in ops.ACTIVATIONS:
        return f"hidden_activation {act!r}"
    if field(config, "use_bidirectional_attention"):
        return "use_bidirectional_attention (a Gemma 3 encoder)"
    for flag in ("attention_bias", "tie_word_embeddings"):
        _flag(config, flag)
    present = set(layer_types(config))
    for kind, params in rope_parameters(config).items():
        if kind not in present:  # no layer of that kind: transformers reads none of its settings
            continue
        if params["rope_type"] not in ROPE_TYPES:
            return f"{kind} layers' rope type {params['rope_type']!r} (it runs {', '.join(ROPE_TYPES)})"
        _number(params["rope_theta"], f"rope_parameters.{kind}.rope_theta")
        if params["rope_type"] != "default":  # default RoPE: whole heads, the factor unread
            factor = _number(params.get("partial_rotary_factor", 1.0), "partial_rotary_factor")
            if factor != 1:
                return (f"partial_rotary_factor {factor} with {kind} layers' rope type {params['rope_type']!r} "
                        "(transformers' Gemma 3 fails on it)")
        reason = llama.unsupported(_as_flat(config, params))  # the RoPE type's own fields (factor, bands)
        if reason:
            return f"{kind} layers' {reason}"
    windows(config)
    return None


def parts(config: dict) -> Parts:
    """The description methods read (families/parts.py): RMSNorms (1 + w) before each sublayer and on
    each sublayer's output, q and k normed per head before RoPE, each layer's RoPE frequencies and window."""
    config = text_part(config)
    s = sizes(config, VARIANT)
    d, h, kv, dh, i = (s[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                       "intermediate_size"))
    bias = _flag(config, "attention_bias")
    p = "layers.{l}."
    roles = {"n1": Tensor(p + "input_layernorm", (d,)), "n2": Tensor(p + "pre_feedforward_layernorm", (d,)),
             "attn_out_norm": Tensor(p + "post_attention_layernorm", (d,)),
             "mlp_out_norm": Tensor(p + "post_feedforward_layernorm", (d,)),
             "q_norm": Tensor(p + "self_attn.q_norm", (dh,)), "k_norm": Tensor(p + "self_attn.k_norm", (dh,)),
             **{n: Tensor(p + f"self_attn.{n}_proj", (out, d), bias) for n, out in (("q", h * dh), ("k", kv * dh),
                                                                                     ("v", kv * dh))},
             "o": Tensor(p + "self_attn.o_proj", (d, h * dh), bias),
             "gate": Tensor(p + "mlp.gate_proj", (i, d)), "up": Tensor(p + "mlp.up_proj", (i, d)),
             "down": Tensor(p + "mlp.down_proj", (d, i))}
    by_kind = frequencies(config, dh)
    cap = field(config, "final_logit_softcapping")
    return Parts(layers=s["num_hidden_layers"], heads=h, kv_heads=kv, d_head=dh, norm="rms", place="pre",
                 eps=float(field(config, "rms_norm_eps")), roles=roles, norm_offset=1.0, qk_norm="rms",
                 position="rotary", inv_freq=tuple(by_kind[kind] for kind in layer_types(config)),
                 windows=tuple(windows(config)), logit_cap=None if cap is None else float(cap))


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    """Every tensor of the base model ("model." left out) the pass reads, with its shape (the roles' of
    ``parts``, written there once)."""
    config = text_part(config)
    s = sizes(config, VARIANT)
    return {"embed_tokens.weight": (s["vocab_size"], s["hidden_size"]), "norm.weight": (s["hidden_size"],),
            **shapes(parts(config).roles, s["num_hidden_layers"])}


class Gemma3(llama.Llama):
    """The Llama family's pass (llama.Llama) with Gemma 3's parts: four norms a layer, q and k
    normed per head, each layer kind's RoPE and window, the attention scale and the logits' cap."""

    def __init__(self, weights: Weights, config: dict):  # noqa: D107 - not Llama's: Gemma 3's fields
        self.w = weights
        self.model_type = config["model_type"]  # gemma3_text, or gemma3 (its text decoder: text_part)
        self.config = config = text_part(config)
        self.variant = VARIANT
        self.parts = pt = parts(config)
        self.shapes = expected(config)  # every tensor's shape, as config.json implies it
        self.layers, self.heads, self.kv_heads, self.d_head = pt.layers, pt.heads, pt.kv_heads, pt.d_head
        self.d, self.intermediate = self.shapes["norm.weight"][0], pt.roles["down"].shape[1]
        self.eps = pt.eps
        self.act = ops.ACTIVATIONS[field(config, "hidden_activation")]
        self.inv_freq = pt.inv_freq[0]  # (d_head / 2,) layer 0's; each layer's: parts.inv_freq[l]
        self.windows = list(pt.windows)
        self.tied = bool(field(config, "tie_word_embeddings"))
        self.query_scale = float(field(config, "query_pre_attn_scalar")) ** -0.5

    def scale(self, layer: int) -> float:
        return self.query_scale

    def layer(self, l: int, x: np.ndarray, mask: Mask, rec: Recorder,
              past: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """One decoder layer, x (B, T, d) -> the new x (B, T, d), as transformers' Gemma3DecoderLayer:

            x = x + norm_a(attn(norm_1(x)))      attn.out (B, T, d), after the norm on its output
            x = x + norm_m(mlp(norm_2(x)))       mlp.out, likewise; run by blocks of rows

        with its sites recorded as llama.Llama.layer's (q and k normed per head, then rotated)."""
        norm_1 = lambda rows: self._norm("n1", l, rows)  # noqa: E731  (B, c, d)
        norm_2 = lambda rows: self._norm("n2", l, rows)  # noqa: E731
        attn = self._norm("attn_out_norm", l, self._attention(l, norm_1, x, mask, rec, past))  # (B, T, d)
        x = llama.residual(rec, l, x, attn, "attn.out", "resid_mid")
        return llama.residual_by_rows(rec, l, x, lambda rows: self._norm("mlp_out_norm", l, self._mlp(l, norm_2(rows))),
                                      "mlp.out", "resid_mid", self.intermediate)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """(..., d) -> (..., V) float64: the LM head's (llama.Llama.logits), capped c tanh(logits / c)
        when final_logit_softcapping is c."""
        out = super().logits(hidden)
        cap = self.parts.logit_cap
        return out if cap is None else cap * np.tanh(out / cap)
