"""The files of a trained attention under ``<model>/attention/``: their names, every weight's
name and shape, the bounds of config.json's sizes and the check of its fields, the checksum that
ties the weights to the vectors they were trained on. ``model.py`` loads them; ``train.py``
writes them. No torch here.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from attncli.vectors import store
from attncli.vectors.safeio import FileProblem, open_regular, read_text

FORMAT = "attn-attention"
FORMAT_VERSION = 1
SUBDIR = "attention"
CONFIG = "config.json"
WEIGHTS = "weights.npz"
OUTPUT_VOCAB = "output_vocab.txt"
HELDOUT = "heldout.txt"


def expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every stored parameter's name and shape, from the config."""
    d, f, n_out = int(config["d_model"]), int(config["d_ff"]), int(config["output_vocab_size"])
    shapes: dict[str, tuple[int, ...]] = {"input.weight": (d, d), "input.bias": (d,)}
    for lay in range(int(config["layers"])):
        p = f"blocks.{lay}."
        shapes.update({
            p + "ln1.weight": (d,), p + "ln1.bias": (d,),
            p + "attn.in_proj_weight": (3 * d, d), p + "attn.in_proj_bias": (3 * d,),
            p + "attn.out_proj.weight": (d, d), p + "attn.out_proj.bias": (d,),
            p + "ln2.weight": (d,), p + "ln2.bias": (d,),
            p + "mlp.0.weight": (f, d), p + "mlp.0.bias": (f,),
            p + "mlp.2.weight": (d, f), p + "mlp.2.bias": (d,),
        })
    shapes.update({"final_ln.weight": (d,), "final_ln.bias": (d,), "head.weight": (n_out, d), "head.bias": (n_out,)})
    return shapes


# Bounds of config.json's sizes (config_problem): those attn train-attention accepts, so that a
# hostile config cannot make the loader loop or allocate without end.
MAX_D_MODEL = 65_536
MAX_LAYERS = 64
MAX_HEADS = 1_024
MAX_OUTPUT_VOCAB = 10_000_002  # --vocab-size plus <unk> and </s>
MAX_STORED_PARAMETERS = 400_000_000  # 1.6 GB of float32
MAX_LEN_TRAINED = 4_096  # train-attention's --max-len bound (train.MAX_LEN): the context attn generate allows


def config_problem(config: dict[str, Any]) -> str | None:
    """What is wrong with the fields of config.json the forward pass uses (types, ranges), or None."""
    def whole(key: str, low: int) -> str | None:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= low:
            return None
        return f"{key} is {repr(value) if key in config else 'missing'}, not a whole number >= {low}"

    version = config.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return f"format_version is {version!r}, not a version number"
    for key, low, high in (("d_model", 1, MAX_D_MODEL), ("layers", 1, MAX_LAYERS), ("heads", 1, MAX_HEADS),
                           ("d_ff", 1, 64 * MAX_D_MODEL), ("output_vocab_size", 1, MAX_OUTPUT_VOCAB)):
        problem = whole(key, low)
        if problem is not None:
            return problem
        if config[key] > high:
            return f"{key} is {config[key]!r}, more than {high:,}"
    if "max_len_trained" in config:  # the longest sentence trained on (older models lack it: attn generate reads 80)
        problem = whole("max_len_trained", 2)
        if problem is not None:
            return problem
        if config["max_len_trained"] > MAX_LEN_TRAINED:
            return f"max_len_trained is {config['max_len_trained']!r}, more than {MAX_LEN_TRAINED:,}"
    if config["d_model"] % config["heads"]:
        return f"heads {config['heads']} does not divide d_model {config['d_model']}"
    n_params = sum(math.prod(shape) for shape in expected_shapes(config).values())
    if n_params > MAX_STORED_PARAMETERS:
        return f"its sizes make {n_params:,} parameters, more than {MAX_STORED_PARAMETERS:,}"
    eps = config.get("layer_norm_eps")
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and math.isfinite(eps) and eps > 0):
        return f"layer_norm_eps is {repr(eps) if 'layer_norm_eps' in config else 'missing'}, not a number > 0"
    if config.get("vectors_sha256") is not None and not isinstance(config["vectors_sha256"], str):
        return f"vectors_sha256 is {config['vectors_sha256']!r}, not a string"
    if config.get("positions", "sinusoidal") != "sinusoidal":  # the only encoding this forward pass adds
        return f"positions is {config['positions']!r}, not 'sinusoidal' (the only encoding attn's model adds)"
    return None


def has_trained(model: str | None = None) -> bool:
    return (store.model_dir(model) / SUBDIR / CONFIG).is_file()


MAX_CONFIG_BYTES = 16 * 2**20
MAX_LINES_BYTES = 256 * 2**20  # output_vocab.txt, heldout.txt


def vectors_sha256(model_directory: Path) -> str:
    """SHA-256 of the model's vectors.npy: ties the attention to the vectors it was trained on."""
    h = hashlib.sha256()
    try:
        with open(open_regular(model_directory / "vectors.npy"), "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except (OSError, FileProblem) as exc:
        raise store.CorruptModel(f"cannot read {store.shown_path(model_directory) / 'vectors.npy'} ({exc}): retrain the model") from None
    return h.hexdigest()


def read_lines(path: Path) -> list[str]:
    try:
        lines = read_text(path, MAX_LINES_BYTES).split("\n")
    except FileProblem as exc:
        raise store.CorruptModel(f"cannot read {path} ({exc}): retrain the attention") from None
    return lines[:-1] if lines and lines[-1] == "" else lines
