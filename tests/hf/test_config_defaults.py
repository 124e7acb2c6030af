"""A config.json means what transformers says it means: every field attn's NumPy path reads has,
when absent, the default of transformers' config class for that family, and is resolved with
transformers' precedence (rope_scaling over rope_parameters, a top-level
original_max_position_embeddings over the one inside, ...).

The defaults are read from transformers itself (its classes instantiated without arguments), so a
release that changes one fails here; the resolution of whole configs (sizes, windows, RoPE
frequencies, biases) is compared with transformers' config objects and with the modules its
modeling files build from them. No weights are made: tests/hf/test_config_drop.py runs the models.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from conftest import needed
from _tolerance import EPS32

torch = needed("torch")
transformers = needed("transformers")

from attncli.hf.checks import config_defaults
from attncli.hf.families import llama, registry  # noqa: E402
from attncli.hf.checks.config_defaults import DEFAULTS, DERIVED, NULLABLE, field  # noqa: E402

SMALL = {"vocab_size": 50, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3,
         "intermediate_size": 8, "num_key_value_heads": 2}
SMALL_OF = {**{k: SMALL for k in llama.MODEL_TYPES},
            "gpt2": {"vocab_size": 50, "n_embd": 16, "n_head": 4, "n_layer": 3},
            "distilbert": {"vocab_size": 50, "dim": 16, "n_heads": 4, "n_layers": 3, "hidden_dim": 8},
            **{k: {**SMALL, "embedding_size": 16} for k in ("bert", "roberta", "xlm-roberta", "camembert", "electra",
                                                            "mpnet")}}


def config_class(kind: str):
    return transformers.CONFIG_MAPPING[kind]


def derived(kind: str, key: str, config) -> object:
    """What transformers derives for a DERIVED field of ``config`` (a transformers config object)."""
    if key == "head_dim":
        return config.hidden_size // config.num_attention_heads
    if key == "num_key_value_heads":
        return config.num_attention_heads
    if key == "layer_types":
        return config.layer_types  # Qwen2: made from sliding_window and max_window_layers
    raise AssertionError(f"no derivation for {kind}.{key}")


def class_defaults(kind: str) -> dict:
    """The defaults transformers' config class declares (its dataclass fields), before __post_init__
    derives anything (Qwen2's sliding_window stays 4096, applied only with use_sliding_window)."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(config_class(kind)):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


@pytest.mark.parametrize("kind", sorted(DEFAULTS))
def test_every_default_attn_reads_is_transformers_own(kind):
    """DEFAULTS[kind][key] == the default transformers' class declares; a DERIVED one is None there
    (or no field at all: head_dim of Qwen2 and Phi-3), and what __post_init__ makes of it is derived."""
    declared, ref = class_defaults(kind), config_class(kind)()
    for key, ours in DEFAULTS[kind].items():
        theirs = declared.get(key)
        if ours is DERIVED:
            assert theirs is None, (kind, key, theirs)
            made = getattr(ref, key, None)
            assert made is None or made == derived(kind, key, ref), (kind, key, made)
        else:
            assert key in declared, (kind, key)
            assert theirs == ours and type(theirs) is type(ours), (kind, key, theirs, ours)
    assert config_class(kind).default_theta == config_defaults.DEFAULT_ROPE_THETA


@pytest.mark.parametrize("kind", sorted(DEFAULTS))
def test_a_null_is_accepted_exactly_where_transformers_accepts_one(kind):
    """A null field: transformers' class takes it (NULLABLE) or refuses it; attn's ``field`` alike.
    head_dim of Qwen2 and Phi-3 is no field of their classes (a null passes the config and fails in
    the model, which multiplies by it): attn refuses it."""
    base = dict(SMALL_OF[kind], model_type=kind)
    for key in DEFAULTS[kind]:
        config = {**base, key: None}
        try:
            config_class(kind).from_dict(dict(config))
            accepted = True
        except Exception:
            accepted = False
        if key == "head_dim" and kind in ("qwen2", "phi3"):
            accepted = False
        assert (key in NULLABLE.get(kind, set())) == accepted, (kind, key, accepted)
        if accepted:
            assert field(config, key) is None
        else:
            with pytest.raises(TypeError, match=f"'{key}'"):
                field(config, key)


def test_a_field_attn_does_not_read_is_a_programming_error():
    with pytest.raises(KeyError, match="attn reads no 'sliding_window' of a llama config"):
        field({"model_type": "llama"}, "sliding_window")


# --- whole Llama-family configs, resolved by attn and by transformers ---------------------------------

DROP = object()  # a variant's value that removes the field from SMALL
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
VARIANTS = [
    {},  # every optional field absent but num_key_value_heads (2)
    {"num_key_value_heads": DROP},  # transformers' default: 4 (Llama, Phi-3), 8, 32, 16 (refused by both)
    {"num_key_value_heads": 4, "head_dim": 8},  # head_dim apart from hidden / heads (16)
    {"num_key_value_heads": None, "head_dim": None},
    {"rms_norm_eps": 1e-3, "hidden_act": "gelu", "tie_word_embeddings": True},
    {"rope_theta": 500.0},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 300.0}, "rope_theta": 700.0},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 300.0}, "rope_scaling": {"rope_type": "linear",
                                                                                         "factor": 2.0}},
    {"rope_parameters": {"rope_type": "linear", "factor": 2.0}, "rope_scaling": {}},
    {"rope_scaling": {"type": "linear", "factor": 4.0}, "rope_theta": 50.0},
    {"rope_parameters": {**LLAMA3, "rope_theta": 10000.0}, "max_position_embeddings": 64},
    {"rope_parameters": {**LLAMA3, "rope_theta": 10000.0, "original_max_position_embeddings": 16}},
    {"rope_parameters": {**LLAMA3, "rope_theta": 10000.0, "original_max_position_embeddings": 16},
     "original_max_position_embeddings": 32, "max_position_embeddings": 128},
    {"rope_scaling": dict(LLAMA3), "original_max_position_embeddings": 24},
    {"partial_rotary_factor": 0.5},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
    {"sliding_window": 3},
    {"sliding_window": None},
    {"use_sliding_window": True},
    {"use_sliding_window": True, "sliding_window": 2, "max_window_layers": 1},
    {"use_sliding_window": True, "max_window_layers": 0},
    {"use_sliding_window": True, "sliding_window": 2,
     "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
    {"attention_bias": True},
    {"attention_bias": True, "mlp_bias": True},
]


def _modeling(kind: str):
    module = getattr(transformers.models, kind)
    prefix = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "gemma": "Gemma", "phi3": "Phi3"}[kind]
    return module, prefix


def theirs(kind: str, config: dict) -> dict | None:
    """What transformers' config and modeling make of ``config`` (None: transformers refuses it)."""
    module, prefix = _modeling(kind)
    modeling = getattr(module, f"modeling_{kind}")
    try:
        ref = config_class(kind).from_dict(copy.deepcopy(config))  # it standardizes nested dicts in place
        attention = getattr(modeling, f"{prefix}Attention")(ref, 0)
        mlp = getattr(modeling, f"{prefix}MLP")(ref)
        rotary = getattr(modeling, f"{prefix}RotaryEmbedding")(config=ref)
    except Exception:  # the config, or a module built from it
        return None
    if ref.num_attention_heads % ref.num_key_value_heads:  # repeat_kv would repeat 0 times
        return None
    proj = attention.qkv_proj if kind == "phi3" else attention.q_proj
    up = mlp.gate_up_proj if kind == "phi3" else mlp.up_proj
    if kind == "qwen2":
        windows = [ref.sliding_window if t == "sliding_attention" else None for t in ref.layer_types]
    else:
        windows = [getattr(ref, "sliding_window", None)] * ref.num_hidden_layers
    if kind == "llama" or kind == "gemma":  # Llama / Gemma mask with no window
        windows = [None] * ref.num_hidden_layers
    return {"kv": ref.num_key_value_heads, "d_head": attention.head_dim, "eps": ref.rms_norm_eps,
            "act": ref.hidden_act, "tied": ref.tie_word_embeddings, "windows": windows,
            "biases": (proj.bias is not None, attention.o_proj.bias is not None, up.bias is not None),
            "inv_freq": rotary.inv_freq.double().numpy()}


def ours(kind: str, config: dict) -> dict | None:
    """What attn's NumPy path makes of ``config`` (None: it refuses it)."""
    try:
        if llama.unsupported(config) is not None:
            return None
    except (KeyError, TypeError):
        return None
    s = llama.sizes(config)
    act = field(config, "hidden_act")
    return {"kv": s["num_key_value_heads"], "d_head": s["head_dim"], "eps": field(config, "rms_norm_eps"),
            "act": "gelu_pytorch_tanh" if kind == "gemma" and act == "gelu" else act,
            "tied": field(config, "tie_word_embeddings"), "windows": llama.windows(config),
            "biases": llama.biases(config), "inv_freq": llama.inverse_frequencies(config, s["head_dim"])}


@pytest.mark.parametrize("kind", sorted(llama.MODEL_TYPES))
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_a_llama_family_config_resolves_as_transformers_resolves_it(kind, variant):
    """Sizes, eps, activation, tying, windows, biases and RoPE's inverse frequencies of each variant
    equal those transformers' config and modeling classes make of it; or both refuse it (a refusal by
    attn alone is allowed only where transformers would run a field attn names)."""
    config = {k: v for k, v in dict(SMALL, model_type=kind, **VARIANTS[variant]).items() if v is not DROP}
    want, got = theirs(kind, config), ours(kind, config)
    if want is None:
        assert got is None, (kind, VARIANTS[variant], got)
        return
    if got is None:
        reason = llama.unsupported(config)
        assert reason and "partial_rotary_factor with rope type" in reason, (kind, VARIANTS[variant], reason)
        return
    inv_freq = want.pop("inv_freq")
    # transformers' float32 base ** (2i / d): the exponent's rounding grows by ln(base) (then 1 / x, a scaling
    # variant's own products): eps32 (ln(base) + 4) relative, each frequency against itself (they span decades)
    rtol = EPS32 * (math.log(config.get("rope_theta", 10000.0)) + 4)
    np.testing.assert_allclose(got.pop("inv_freq"), inv_freq, rtol=rtol, err_msg=f"{kind} {VARIANTS[variant]}")
    assert got == want, (kind, VARIANTS[variant])


def test_partial_rotary_with_linear_rope_breaks_transformers_llama_and_attn_refuses_it():
    """transformers' Llama rotates whole heads with cos / sin of rotary_dim: a factor below 1 with
    linear RoPE fails in its forward pass; attn refuses the config by name instead."""
    config = dict(SMALL, model_type="llama", rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                              "partial_rotary_factor": 0.5})
    ref = config_class("llama").from_dict(dict(config))
    model = transformers.LlamaModel(ref).eval()
    with pytest.raises(RuntimeError):
        model(torch.tensor([[1, 2, 3]]))
    assert llama.unsupported(config) == "partial_rotary_factor with rope type 'linear' (transformers' llama rotates " \
                                        "whole heads)"


def test_gemma_with_use_bidirectional_attention_is_refused_by_name():
    config = dict(SMALL, model_type="gemma", use_bidirectional_attention=True)
    assert llama.unsupported(config) == "use_bidirectional_attention (a Gemma encoder)"
    assert llama.unsupported(dict(config, use_bidirectional_attention=False)) is None


def test_the_table_in_the_docs_lists_every_field_with_its_default():
    """docs/transformers.md holds the table of fields attn reads: each family's row names every field."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "transformers.md").read_text()
    section = text[text.index("## What a config.json field means"):]
    own = {t: vars(f.module)["DEFAULTS"] for f in registry.FAMILIES if "DEFAULTS" in vars(f.module) for t in f.model_types}
    for kind, defaults in {**DEFAULTS, **own}.items():  # config_defaults' tables and a family file's own
        row = next((line for line in section.splitlines() if line.startswith(f"| {kind} ")), None)
        assert row is not None, kind
        for key, value in defaults.items():
            assert f"`{key}` {config_defaults.shown(key, value)}" in row, (kind, key)


@pytest.mark.parametrize("kind, field_name, limit", [("gpt2", "n_positions", 1024), ("llama", "max_position_embeddings",
                                                                                       2048),
                                                     ("bert", "max_position_embeddings", 512),
                                                     ("roberta", "max_position_embeddings", 512 - 2)])
def test_the_token_limit_of_a_config_without_its_positions_is_transformers_default(kind, field_name, limit, tmp_path):
    """With no position count in config.json, the limit on an input is the family's default table
    (RoBERTa's less its padding_idx + 1), not "no limit"."""
    from attncli.hf.backends.pretrained_base import max_positions

    assert getattr(config_class(kind)(), field_name) - (2 if kind == "roberta" else 0) == limit
    assert max_positions({"model_type": kind}, tmp_path) == limit
    assert max_positions({"model_type": kind, field_name: 100}, tmp_path) == 100 - (2 if kind == "roberta" else 0)
