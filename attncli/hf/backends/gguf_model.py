"""A GGUF file (``--transformer FILE.gguf``, or a folder holding one) as a NumpyPretrained: the same
forward passes, traces and views as a safetensors checkpoint, with gguf_reader.GGUFWeights as
the weights reader and the config and tokenizer built from the file's metadata."""

from __future__ import annotations

from pathlib import Path

from attncli.hf.checks.config_check import damaged
from attncli.hf.text.encoding import tokenizer_errors
from attncli.errors import BadInput
from attncli.hf.formats.gguf_file import GGUFFile
from attncli.hf.formats.gguf_reader import GGUFWeights, config_of
from attncli.hf.formats.gguf_tokenizer import tokenizer_of
from attncli.hf.formats.gguf_tokenizer_cache import cached_tokenizer
from attncli.hf.families.registry import family
from attncli.hf.backends.numpy_backend import NumpyPretrained, check_weight_names
from attncli.hf.backends.pretrained_base import Pretrained


class GGUFPretrained(NumpyPretrained):
    def __init__(self, name: str, file: Path, *, allow_missing_weights: bool = False):
        gguf = GGUFFile(file)
        config = config_of(gguf)
        Pretrained.__init__(self, name, file.parent, config)
        fam = family(self.model_type)
        try:
            reason = fam.unsupported(config)
        except (KeyError, TypeError, ZeroDivisionError) as exc:  # a value gguf_check lets through that the family refuses
            raise damaged(file.name, f"its metadata lacks or garbles {exc}") from None
        if reason:
            raise BadInput(f"{file.name}: its {reason} is not implemented on attn's NumPy path")
        self.gguf_file = file
        with tokenizer_errors(name, "read the file's tokenizer"):
            self.tokenizer = cached_tokenizer(gguf, tokenizer_of)
            self.tokenizer.no_truncation()  # as numpy_backend's: transformers sets them per call
            self.tokenizer.no_padding()
        weights = GGUFWeights(gguf, config, fam.dtype)
        check_weight_names(name, fam.module, weights, config, allow_missing_weights)
        self.arch = fam.cls(weights, config)
        self.layers = self.arch.layers
        self.heads = self.arch.heads
        self.is_decoder = self.arch.causal
        self.use_type_ids = False
