"""A model directory from a stranger, checked before anything is allocated or run, on both backends.

Every small file of the directory (config.json, tokenizer.json, tokenizer_config.json, the
sentence-transformers configs, the safetensors header) is read through ``attncli.io.fileio``: regular
files only (a FIFO or ``/dev/zero`` is refused, never waited on), bounded in size, and its JSON
nested at most ``MAX_DEPTH`` deep. ``check_config`` then checks the config's fields (types,
ranges, heads that divide the width, a model far larger than its weights), and
``check_trust`` refuses a model that needs code of its own (``auto_map``, a model_type
transformers does not know): attn never runs code that came with a model.

A damaged file is ``RuntimeFailure`` (exit 1) "damaged model: <file or field>: <why>"; a model
attn refuses on principle (custom code, pickle-only weights) is ``BadInput`` (exit 2).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem, open_regular, read_text

MAX_DEPTH = 32  # real configs nest 3 or 4 deep; tokenizer.json 6 or 7
CONFIG_BYTES = 4 * 2**20  # config.json, tokenizer_config.json, special_tokens_map.json, the pooling configs
TOKENIZER_BYTES = 256 * 2**20  # tokenizer.json (the largest real ones are tens of MB)
SAFETENSORS_HEADER_BYTES = 100 * 2**20  # safetensors' own limit
SAFETENSORS_BYTES = 2**40  # a weights file (a shard) mapped at most: mapping reads nothing, each tensor is checked
TEXT_BYTES = 256 * 2**20  # vocab.txt, merges.txt, a sentencepiece model: what transformers may read itself

# config fields that hold a count or a size: (smallest, largest) allowed
SIZES = {
    "vocab_size": (1, 2**24), "type_vocab_size": (1, 2**16),
    "hidden_size": (1, 2**17), "n_embd": (1, 2**17), "dim": (1, 2**17), "d_model": (1, 2**17),
    "embedding_size": (1, 2**17), "head_dim": (1, 2**14),
    "num_hidden_layers": (1, 2**10), "n_layer": (1, 2**10), "n_layers": (1, 2**10),
    "num_attention_heads": (1, 2**12), "n_head": (1, 2**12), "n_heads": (1, 2**12),
    "num_key_value_heads": (1, 2**12),
    "intermediate_size": (1, 2**20), "n_inner": (1, 2**20), "hidden_dim": (1, 2**20),
    "max_position_embeddings": (1, 2**22), "n_positions": (1, 2**22), "n_ctx": (1, 2**22),
    # encoder-decoders (T5 / BART families, attncli.hf.backends.seq2seq)
    "num_layers": (1, 2**10), "num_decoder_layers": (1, 2**10), "encoder_layers": (1, 2**10),
    "decoder_layers": (1, 2**10), "num_heads": (1, 2**12), "encoder_attention_heads": (1, 2**12),
    "decoder_attention_heads": (1, 2**12), "d_kv": (1, 2**14), "d_ff": (1, 2**20), "encoder_ffn_dim": (1, 2**20),
    "decoder_ffn_dim": (1, 2**20), "relative_attention_num_buckets": (4, 2**12),
    "relative_attention_max_distance": (1, 2**22),
}
ENCODER_DECODER_TYPES = frozenset({"t5", "mt5", "umt5", "bart", "mbart", "marian", "pegasus"})  # when the flag is absent
# rates and scales read (or kept) by an encoder-decoder's config: finite, within (smallest, largest)
RATES = {"dropout_rate": (0.0, 1.0), "dropout": (0.0, 1.0), "attention_dropout": (0.0, 1.0),
         "activation_dropout": (0.0, 1.0), "initializer_factor": (0.0, 1e6), "init_std": (0.0, 1e6)}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id",
             "forced_bos_token_id")  # an int (or a list of ints), or null
EPSILONS = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")
FLAGS = ("is_decoder", "add_cross_attention", "tie_word_embeddings", "scale_attn_weights",
         "scale_attn_by_inverse_layer_idx", "is_encoder_decoder", "sinusoidal_pos_embds", "scale_embedding")
NAMES = ("model_type", "hidden_act", "activation", "activation_function", "position_embedding_type",
         "feed_forward_proj", "dense_act_fn")
WIDTH_AND_HEADS = (("hidden_size", "num_attention_heads"), ("n_embd", "n_head"), ("dim", "n_heads"),
                   ("d_model", "encoder_attention_heads"), ("d_model", "decoder_attention_heads"))
BYTES_PER_PARAMETER = 0.25  # a 2-bit quantized checkpoint is the densest a config may claim


def damaged(where: str, why: str) -> RuntimeFailure:
    return RuntimeFailure(f"damaged model: {where}: {why}")


def depth(value: Any) -> int:
    """How deep lists and dicts nest in ``value`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        stack.extend((child, level + 1) for child in children)
    return deepest


def read_json(path: Path, limit: int = CONFIG_BYTES) -> Any:
    """The JSON of a file in a model directory: a regular file (a symlink is followed, as the
    Hugging Face cache links its snapshots to blobs) of at most ``limit`` bytes, nested at most
    MAX_DEPTH deep; any other file is damage that names it."""
    try:
        text = read_text(path, limit, follow_symlinks=True)
    except FileProblem as exc:
        raise damaged(path.name, str(exc)) from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise damaged(path.name, f"its JSON nests more than {MAX_DEPTH} deep") from None
    except ValueError as exc:  # JSONDecodeError, or a NaN / Infinity constant
        raise damaged(path.name, f"it is not valid JSON ({exc})") from None
    if depth(data) > MAX_DEPTH:
        raise damaged(path.name, f"its JSON nests more than {MAX_DEPTH} deep")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_optional_json(path: Path, limit: int = CONFIG_BYTES) -> dict[str, Any]:
    """An optional JSON object file (tokenizer_config.json, a pooling config): {} when absent;
    present but a FIFO, a device, too large, too deep or not JSON is damage."""
    if not os.path.lexists(path):
        return {}
    data = read_json(path, limit)
    return data if isinstance(data, dict) else {}


def check_regular(path: Path, limit: int | None = None) -> None:
    """``path`` (when it exists) is a regular file, at most ``limit`` bytes: before a library that
    opens it by name (transformers, safetensors) could wait on a FIFO or read /dev/zero."""
    if not os.path.lexists(path):
        return
    try:
        fd = open_regular(path, follow_symlinks=True)
    except FileProblem as exc:
        raise damaged(path.name, str(exc)) from None
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if limit is not None and size > limit:
        raise damaged(path.name, f"it is {size:,} bytes, more than the {limit:,} it can be")


# files transformers may open in a model directory, and the most each may be
READ_BY_TRANSFORMERS = {".json": CONFIG_BYTES, ".txt": TEXT_BYTES, ".model": TEXT_BYTES, ".tiktoken": TEXT_BYTES,
                        ".jinja": CONFIG_BYTES, ".safetensors": None}


def check_files(path: Path) -> None:
    """Every file of the directory a library may open by name is a regular file within its bound."""
    for entry in sorted(path.iterdir()):
        if entry.name == "tokenizer.json":
            check_regular(entry, TOKENIZER_BYTES)
        elif entry.suffix in READ_BY_TRANSFORMERS:
            check_regular(entry, READ_BY_TRANSFORMERS[entry.suffix])


def check_config(config: dict[str, Any], path: Path) -> None:
    """Every size, count, flag and name config.json holds has the right type and a sane value,
    the heads divide the width, and the model it describes fits in its weights' bytes."""
    for field, (low, high) in SIZES.items():
        value = config.get(field)
        if value is not None:  # null: transformers' default (n_inner, head_dim, ...)
            _count(field, value, low, high)
    check_token_ids(config, "config.json")
    for field in EPSILONS:
        if field in config:
            value = config[field]
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and 0 < value < 1):
                raise damaged(f"config.json: {field}", f"{_show(value)} is not a small positive number")
    for field, (low, high) in RATES.items():
        value = config.get(field)
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                      and math.isfinite(value) and low <= value <= high):
            raise damaged(f"config.json: {field}", f"{_show(value)} is not a number in {low:g}..{high:g}")
    buckets, distance = config.get("relative_attention_num_buckets"), config.get("relative_attention_max_distance")
    if _is_int(buckets) and _is_int(distance) and distance <= buckets // 2:  # T5's log-spaced buckets need room
        raise damaged("config.json: relative_attention_max_distance",
                      f"{distance} is not more than half of relative_attention_num_buckets {buckets}")
    for field in FLAGS:
        if field in config and not isinstance(config[field], bool):
            raise damaged(f"config.json: {field}", f"{_show(config[field])} is not true or false")
    for field in NAMES:
        if field in config and not isinstance(config[field], str):
            raise damaged(f"config.json: {field}", f"{_show(config[field])} is not a name (a string)")
    for width, heads in WIDTH_AND_HEADS:
        if _is_int(config.get(width)) and _is_int(config.get(heads)) and config.get("head_dim") is None \
                and config[width] % config[heads]:
            raise damaged(f"config.json: {heads}", f"{config[heads]} heads do not divide {width} {config[width]}")
    _fits_its_weights(config, path)


def check_token_ids(config: dict[str, Any], where: str) -> None:
    """Each TOKEN_IDS field of ``config`` (config.json, generation_config.json) is null, an integer
    or a list of integers, each -1 ("none" in some configs) or more; else damage naming ``where``."""
    for field in TOKEN_IDS:
        value = config.get(field)
        values = value if isinstance(value, list) else [value]
        if value is not None and not all(_is_int(v) and -1 <= v < 2**31 for v in values):
            raise damaged(f"{where}: {field}", f"{_show(value)} is not a token id (an integer >= 0, or null)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(field: str, value: Any, low: int, high: int) -> None:
    if not _is_int(value):
        raise damaged(f"config.json: {field}", f"{_show(value)} is not a whole number")
    if not low <= value <= high:
        raise damaged(f"config.json: {field}", f"{value} is outside {low}..{high:,}")


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _first(config: dict[str, Any], *fields: str, default: int = 0) -> int:
    for field in fields:
        if _is_int(config.get(field)):
            return config[field]
    return default


def parameters(config: dict[str, Any]) -> int:
    """A lower bound on the parameters the config describes: the embeddings and, per layer, the
    four attention projections (what every architecture here has)."""
    d = _first(config, "hidden_size", "n_embd", "dim", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "n_layers")
    vocab = _first(config, "vocab_size")
    positions = _first(config, "max_position_embeddings", "n_positions") if config.get("position_embedding_type",
                                                                                     "absolute") == "absolute" else 0
    return layers * 4 * d * d + (vocab + positions) * d


def _fits_its_weights(config: dict[str, Any], path: Path) -> None:
    """A config that claims far more parameters than its weight files could hold is damage (it
    would make transformers allocate the claimed size before reading a byte)."""
    on_disk = 0
    for entry in path.glob("*.safetensors"):
        try:
            on_disk += entry.stat().st_size
        except OSError:
            pass
    if not on_disk:
        return
    claimed = parameters(config)
    if claimed * BYTES_PER_PARAMETER > on_disk + 2**20:
        raise damaged("config.json", f"its sizes describe at least {claimed:,} parameters, more than its "
                      f"{on_disk:,} bytes of weights can hold")


def check_trust(config: dict[str, Any], path: Path) -> None:
    """BadInput for a model that needs code from its own directory: attn never runs it."""
    tokenizer_config = read_optional_json(path / "tokenizer_config.json")
    for name, data in (("config.json", config), ("tokenizer_config.json", tokenizer_config)):
        if "auto_map" in data:
            raise BadInput(f"model '{path}' needs custom code ({name} has an auto_map naming Python files "
                           "in the model directory): attn never runs code that comes with a model")


def is_encoder_decoder(config: dict[str, Any]) -> bool:
    """T5, BART and their kin: config.json says so, or (without the flag) its model_type is one."""
    flag = config.get("is_encoder_decoder")
    return flag is True or (flag is None and config.get("model_type") in ENCODER_DECODER_TYPES)
