"""What each kind of pretrained model can do, as data (model/interface.py's CAPABILITIES), and why
not, in words that end a sentence about the model: one table per backend, read by the backends'
``can`` and ``why_not``, so every command and explore key refuses with the same sentence."""

from __future__ import annotations

from typing import Any

from attncli.hf import gpt2, llama

GRADIENT_TYPES = gpt2.MODEL_TYPES | llama.MODEL_TYPES  # hf/backward.py's families (pre-norm decoders)
NO_HEAD = "has no masked-language-model head in its checkpoint (a base or sentence-embedding model): it predicts no token"
POST_LN = ("normalises after each layer (post-LN) and reads its logits through an MLM head: its heads have no direct "
           "path to a logit (direct logit attribution is for pre-norm decoders: GPT-2, Llama, Qwen2, ...)")
NOT_SEQ2SEQ = "is not an encoder-decoder: it has one stack of self-attention"


def numpy_lacks(model: Any, capability: str) -> str:
    """Why a model on attn's NumPy pass lacks ``capability`` ("" when it has it); only what the
    capability needs is looked at (an encoder's MLM head is read for the token-predicting ones)."""
    decoder = model.is_decoder
    mlm = lambda: not decoder and model._has_mlm_head()  # noqa: E731
    reasons = {
        "trace": lambda: "", "resume": lambda: "", "batch": lambda: "", "rerun": lambda: "",
        "output_weight": lambda: "" if hasattr(model.arch, "output_weight") else
        f"does not expose each head's output projection on attn's NumPy pass ('{model.model_type}')",
        "unembed": lambda: "" if decoder or mlm() else NO_HEAD,
        "dla": lambda: "" if decoder and isinstance(model.arch, (gpt2.GPT2, llama.Llama)) else POST_LN,
        "qk": lambda: ("adds a relative position bias to q k^T: its queries and keys alone do not give its attention"
                       if getattr(model.arch, "position_bias", False) else ""),
        "pairs": lambda: "" if model.has_pairs else "reads one text (a decoder, or a tokenizer with no pair format)",
        "mlm": lambda: "" if mlm() else ("is a decoder: it predicts the next token" if decoder else NO_HEAD),
        "next_token": lambda: "" if decoder or mlm() else NO_HEAD,
        "lens": lambda: "" if decoder else "is an encoder: the logit lens reads a decoder's next-token predictions",
        "cache": lambda: "" if decoder else "is an encoder: it writes no text",
        "stacks": lambda: NOT_SEQ2SEQ,
        "grad": lambda: "" if decoder and model.model_type in GRADIENT_TYPES else
        "has no backward pass on attn's NumPy path (written for GPT-2 and the Llama family)",
    }
    return reasons[capability]()


def torch_lacks(model: Any, capability: str) -> str:
    """Why a model run by transformers (the torch backend) lacks ``capability``."""
    if model.encoder_decoder:
        if capability == "stacks":
            return ""
        if capability == "pairs":
            return "" if model.has_pairs else "reads one text"
        return "is an encoder-decoder, which neither backend traces (its three stacks are read by `attn matrix --stack`)"
    decoder, mlm, traced = model.is_decoder, model.has_mlm_head, model.traced
    untraced = (f"runs on transformers' eager attention: the torch backend's trace does not know the modules of the "
                f"'{model.model_type}' family")
    weights = ("runs on the torch backend (transformers' own modules): this reads each layer's weights and norms on "
               "attn's NumPy pass (add --backend numpy where it runs the model)")
    reasons = {
        "trace": "" if traced else untraced, "resume": "" if traced else untraced,
        "batch": "runs one text per pass on the torch backend",
        "rerun": "runs one resumed trace per intervention on the torch backend (no batched rerun)",
        "unembed": weights, "dla": weights, "output_weight": weights, "qk": "" if traced else untraced,
        "pairs": "" if model.has_pairs else "reads one text (a decoder, or a tokenizer with no pair format)",
        "mlm": "" if mlm else ("is a decoder: it predicts the next token" if decoder else NO_HEAD),
        "next_token": "" if decoder or mlm else NO_HEAD,
        "lens": "runs on the torch backend: the logit lens reads attn's NumPy pass (add --backend numpy)",
        "cache": "" if decoder else "is an encoder: it writes no text",
        "stacks": NOT_SEQ2SEQ,
        "grad": "" if decoder and traced else "has no gradients on the torch backend (written for the pre-norm "
                                              "decoders the trace maps: GPT-2 and the Llama family)",
    }
    return reasons[capability]
