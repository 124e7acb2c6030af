"""The one table of attn's NumPy families: model_type -> family (its file and its pass), and the
verdict on a config the loader reads once (``judge``): which family runs it, why attn's NumPy pass
cannot (None when it can), what neither attn nor transformers runs.

A new family is a file in this folder and one row of FAMILIES. A family file offers:
``MODEL_TYPES`` (the config model_types it runs), ``ANCHORS`` (tensor names that find the base
model's prefix), ``expected(config)`` (every tensor it reads, with its shape), ``UNUSED_OK`` and
``OPTIONAL`` (weight_check.check_weight_names), ``parts(config)`` (the description methods read,
families/parts.py), ``unsupported(config)`` (why not, or None; KeyError
/ TypeError / ZeroDivisionError for a garbled field), optionally ``DTYPE`` (its pass's weights'
dtype), optionally ``MULTIMODAL_TYPES`` and ``text_part(config)`` (a multimodal config's text
decoder, the config the model runs), and its pass's class (constructed as ``cls(weights, config)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

from attncli.hf.checks.config_check import is_encoder_decoder
from attncli.hf.families import bert, distilbert, gemma3, gpt2, llama, mpnet, qwen3

DTYPE = np.float64  # a pass's weights' dtype unless the family file sets its own DTYPE (llama: float32)


@dataclass(frozen=True)
class Family:
    """One family: its file (``module``), its pass (``cls``), and what neither attn nor transformers
    runs among its configs (``refused``: a reason, or None)."""

    module: ModuleType
    cls: type
    refused: Callable[[dict], str | None] | None = None

    @property
    def name(self) -> str:
        return self.module.__name__.rsplit(".", 1)[-1]

    @property
    def model_types(self) -> frozenset[str]:
        return frozenset(self.module.MODEL_TYPES)

    @property
    def multimodal_types(self) -> frozenset[str]:
        """The multimodal configs' model_types whose text decoder it runs (``text_part``)."""
        return frozenset(getattr(self.module, "MULTIMODAL_TYPES", ()))

    @property
    def dtype(self) -> Any:
        return getattr(self.module, "DTYPE", DTYPE)

    def unsupported(self, config: dict) -> str | None:
        """The family file's reason this config is beyond its pass (None when it runs it)."""
        return self.module.unsupported(config)

    def text_config(self, config: dict) -> dict:
        """The config its pass runs: a multimodal config's text decoder where the family file reads one
        (``text_part``: Gemma 3's text_config), else ``config`` itself."""
        part = getattr(self.module, "text_part", None)
        return config if part is None else part(config)

    def parts(self, config: dict) -> Any:
        """The family's description of a config's model (families/parts.py's Parts)."""
        return self.module.parts(config)


FAMILIES: tuple[Family, ...] = (
    Family(bert, bert.BertFamily, refused=bert.not_in_transformers),
    Family(distilbert, distilbert.DistilBert),
    Family(gpt2, gpt2.GPT2),
    Family(llama, llama.Llama),
    Family(gemma3, gemma3.Gemma3),
    Family(mpnet, mpnet.MPNet),
    Family(qwen3, qwen3.Qwen3),
)
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in sorted(f.model_types | f.multimodal_types)}
NUMPY_MODEL_TYPES = frozenset(t for f in FAMILIES for t in f.model_types)  # the text models' (messages list them)
LLAMA_LIKE = sorted(t for f in FAMILIES if f.cls.causal and f.module is not gpt2 for t in f.model_types)
DECODER_FAMILIES = f"GPT-2 and the Llama family ({', '.join(LLAMA_LIKE)})"  # its causal LMs, in messages


def windows(config: dict[str, Any], layers: int) -> list[int | None]:
    """(L,) each layer's sliding window as the family's pass reads it from ``config``, or None (every
    layer of a model_type no family runs)."""
    fam = BY_MODEL_TYPE.get(config.get("model_type"))
    if fam is None:
        return [None] * layers
    parts = fam.parts(config)
    return [parts.window(l) for l in range(layers)]


def family(model_type: str) -> Family:
    """The family that runs ``model_type`` (KeyError when none does: ``judge`` says why)."""
    return BY_MODEL_TYPE[model_type]


@dataclass(frozen=True)
class Verdict:
    """What the registry says of a config: ``family`` (None: no NumPy family runs it), ``numpy``
    (why attn's NumPy pass cannot run it, or None), ``neither`` (what neither attn nor transformers
    runs, or None)."""

    family: Family | None
    numpy: str | None
    neither: str | None


def judge(config: dict[str, Any]) -> Verdict:
    """The verdict on a config.json (its model_type read; its other fields as the family reads them)."""
    model_type = config["model_type"]
    fam = BY_MODEL_TYPE.get(model_type)
    neither = fam.refused(config) if fam is not None and fam.refused is not None else None
    if is_encoder_decoder(config):
        return Verdict(None, f"'{model_type}' is an encoder-decoder, whose three stacks attn reads through "
                             "transformers only", neither)
    if fam is None:
        return Verdict(None, f"model_type '{model_type}' is not one it runs ({', '.join(sorted(NUMPY_MODEL_TYPES))})",
                       neither)
    try:
        reason = fam.unsupported(config)
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        return Verdict(fam, f"its config.json lacks or garbles {exc}", neither)
    return Verdict(fam, f"its {reason} is not implemented" if reason else None, neither)
