"""The modules of each family the torch backend's traced pass reads (``FAMILIES``), and how to
find one in a loaded transformers model: a layer's attention module, its q/k/v projections, its
output projection, the norm before its MLP. attncli/hf/backends/torch_trace.py hooks them.

    layers      the ModuleList of layers, from the base model ("h" in GPT-2, "layers" in Llama)
    attn        the attention module: its ``scaling``; under RoPE it is handed position_embeddings
    qkv         the q, k, v projections, or one fused module (GPT-2's c_attn, Phi-3's qkv_proj)
    out         the output projection: its input is z, its output attn.out

A weight that accelerate keeps on the disk (--device-map) is a meta tensor on its module: ``weight``
reads it from the module's offload hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attncli.errors import BadInput, RuntimeFailure
from attncli.io.textio import visible


@dataclass(frozen=True)
class Family:
    layers: str  # the ModuleList of layers, from the base model
    attn: str  # the attention module: it holds `scaling`, and is handed position_embeddings under RoPE
    qkv: tuple[str, ...]  # the q, k, v projections, or one fused module
    out: str  # the output projection: its input is z, its output attn.out
    mid: str  # pre-LN: the norm before the MLP (its input); post-LN: the attention block (its output)
    mlp: str
    final_norm: str | None
    rope: str | None = None  # transformers.models.{rope}.modeling_{rope} holds the family's apply_rotary_pos_emb
    pre_ln: bool = True
    window: str = ""  # "module": the attention module's sliding_window, "config": config.sliding_window


_BERT = Family("encoder.layer", "attention.self", ("attention.self.query", "attention.self.key", "attention.self.value"),
               "attention.output.dense", "attention", "output.dense", None, pre_ln=False)


def _rope_family(rope: str, window: str = "", qkv: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj",
                                                                     "self_attn.v_proj")) -> Family:
    return Family("layers", "self_attn", qkv, "self_attn.o_proj", "post_attention_layernorm", "mlp", "norm", rope,
                  window=window)


FAMILIES = {
    "bert": _BERT, "roberta": _BERT, "xlm-roberta": _BERT, "camembert": _BERT, "electra": _BERT,
    "distilbert": Family("transformer.layer", "attention", ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
                         "attention.out_lin", "sa_layer_norm", "ffn", None, pre_ln=False),
    "gpt2": Family("h", "attn", ("attn.c_attn",), "attn.c_proj", "ln_2", "mlp", "ln_f"),
    "llama": _rope_family("llama"),
    "mistral": _rope_family("mistral", window="config"),
    "qwen2": _rope_family("qwen2", window="module"),
    "gemma": _rope_family("gemma"),
    "phi3": _rope_family("phi3", window="config", qkv=("self_attn.qkv_proj",)),
}


def maps(model_type: str, is_decoder: bool) -> bool:
    """The trace knows this family's modules (BERT-like encoders only as encoders)."""
    fam = FAMILIES.get(model_type)
    return fam is not None and (fam.pre_ln or not is_decoder)


def family(model_type: str, is_decoder: bool) -> Family:
    """The module mapping of ``model_type``; BadInput naming the family when there is none."""
    fam = FAMILIES.get(model_type)
    if fam is None or not maps(model_type, is_decoder):
        known = ", ".join(sorted(FAMILIES))
        raise BadInput(f"the torch backend's trace does not know the modules of the '{visible(model_type)}' family "
                       f"{'as a decoder ' if fam else ''}(it knows {known}): use --backend numpy where it runs the model")
    return fam


def module(model: Any, layer: int, role: str) -> Any:
    """Layer ``layer``'s module of ``role`` (a Family field: "attn", "out", "mlp", ...) in ``model`` (a TorchPretrained)."""
    fam = family(model.model_type, model.is_decoder)
    return submodule(model.model.base_model, f"{fam.layers}.{layer}.{getattr(fam, role)}", model.name)


def submodule(root: Any, dotted: str, model: str = "", prefix: str = "") -> Any:
    """The submodule ``dotted`` of ``root``; RuntimeFailure naming it (``prefix`` + ``dotted``) when
    ``model`` lacks it."""
    for part in dotted.split("."):
        if not hasattr(root, part):
            raise RuntimeFailure(f"model '{visible(model)}' lacks the module '{visible(prefix + dotted)}'")
        root = getattr(root, part)
    return root



def weight(mod: Any) -> Any:
    """``mod.weight`` as a tensor with values: from accelerate's offload hook when it is on the disk."""
    w = mod.weight
    if w.device.type != "meta":
        return w
    hook = getattr(mod, "_hf_hook", None)
    weights_map = getattr(hook, "weights_map", None)
    if weights_map is None:
        raise RuntimeFailure(f"the weight of {type(mod).__name__} was offloaded, and accelerate keeps no copy of it")
    return weights_map["weight"]
