"""``load`` a pretrained model on the numpy or the torch backend (``Pretrained``, what both share,
is pretrained_base.py).

Only a command that loads a model imports this module (``attn lookup --encoder``, ``--transformer``),
so the backends are imported at its top.
"""

from __future__ import annotations

from attncli.env import extras
from attncli.errors import BadInput
from attncli.rules.option_conflicts import BACKENDS
from attncli.hf.checks import config_check
from attncli.hf.formats import gguf_reader, source
from attncli.hf.backends import numpy_backend, seq2seq, torch_backend
from attncli.hf import packaged_models
from attncli.hf.families import registry
from attncli.hf.backends.gguf_model import GGUFPretrained
from attncli.hf.backends.placement import Placement
from attncli.hf.backends.pretrained_base import Pretrained


def load(name_or_path: str, *, backend: str = "auto", allow_missing_weights: bool = False, device: str | None = None,
         dtype: str | None = None, device_map: str | None = None, max_memory: str | None = None) -> "Pretrained":
    """A pretrained model by hub id or local directory, on ``backend`` ("auto", "numpy" or "torch").
    ``device`` (DEVICES) and ``dtype`` (DTYPES) choose where and how transformers runs it: the
    torch backend only (None: cpu, float32). ``device_map`` ("auto", ...) and ``max_memory``
    ("0=20GiB,cpu=64GiB,disk") let accelerate split it across GPUs, the CPU and the disk
    (attncli.hf.backends.placement); every one is checked before the model is read.

    Checked before and after it loads (config_check, weight_check): no code from the directory,
    every file regular and bounded, config.json's fields sane; a weight the model lacks or does
    not use is an error (a warning with ``allow_missing_weights``); NaN is damage; a tokenizer
    that knows no word is refused."""
    placement = Placement(device=device, dtype=dtype, device_map=device_map, max_memory=max_memory)
    model = _load(name_or_path, backend, allow_missing_weights, placement)
    model.check_tokenizer()
    return model


def _load(name_or_path: str, backend: str, allow_missing_weights: bool, placement: Placement) -> "Pretrained":
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend '{backend}': choose one of {', '.join(BACKENDS)}")
    placement.check()
    packaged = packaged_models.find(str(name_or_path)) if name_or_path else None  # smollm2, gemma3, ...
    gguf = packaged or (gguf_reader.gguf_file_in(str(name_or_path)) if name_or_path else None)
    if gguf is not None:  # llama.cpp's format: attn's NumPy path, weights dequantized layer by layer
        if backend == "torch" or placement.given():
            raise BadInput(f"'{name_or_path}' is a GGUF file, which attn runs on its NumPy path only (CPU, float32): "
                           "leave out --backend torch and the placement options")
        gone = source.missing("gguf", "transformers", "tokenizers")
        if gone:
            raise BadInput(extras.needs(f"a GGUF file ({' and '.join(gone)} missing: gguf dequantizes, transformers "
                                        "builds the tokenizer from the file)", "gguf"))
        return GGUFPretrained(str(name_or_path), gguf, allow_missing_weights=allow_missing_weights)
    path = source.resolve(str(name_or_path))
    config = source.read_config(path)
    config_check.check_trust(config, path)  # custom code: its model is not the one either backend would run
    config_check.check_files(path)  # no FIFO or device for a library to open by name
    verdict = registry.judge(config)  # the one look-up: which family, why not on the NumPy path
    refused = verdict.neither
    if refused:
        raise BadInput(f"model '{name_or_path}' uses {refused}, which neither attn's NumPy path nor transformers "
                       f"runs (transformers 5 would drop those weights and show other attention)")
    keep = dict(allow_missing_weights=allow_missing_weights)

    reason = numpy_backend.unsupported(path, verdict)
    given = placement.given()
    if given and (backend == "numpy" or (backend == "auto" and reason is None)):
        raise BadInput(f"{' and '.join(given)} {'chooses' if len(given) == 1 else 'choose'} how transformers runs a "
                       "model; attn's NumPy path runs on the CPU (weights in float32, attention in float64): add "
                       "--backend torch")
    if backend == "numpy":
        if reason:
            raise BadInput(f"the numpy backend cannot run '{name_or_path}': {reason}; use --backend torch (or auto)")
        source.require_pretrained()
        return numpy_backend.NumpyPretrained(str(name_or_path), path, config, **keep)
    if backend == "auto" and reason is None:
        if not source.missing("tokenizers", "safetensors"):
            return numpy_backend.NumpyPretrained(str(name_or_path), path, config, **keep)
        if source.missing("torch", "transformers"):
            source.require_pretrained()  # the lighter install is the one to name
    if source.missing("torch", "transformers"):
        why = f" (the numpy backend cannot: {reason})" if reason and backend == "auto" else ""
        raise BadInput(f"model '{name_or_path}' runs through transformers{why}, which is not installed: "
                       f"{source.install_transformers()}")
    if config_check.is_encoder_decoder(config):  # T5, BART: three stacks (torch only)
        return seq2seq.Seq2SeqPretrained(str(name_or_path), path, config, placement=placement, **keep)
    return torch_backend.TorchPretrained(str(name_or_path), path, config, placement=placement, **keep)


