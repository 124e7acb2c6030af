"""What each pretrained model can do, as data (attncli.model.interface's ``can`` and ``why_not``).

One table per backend: capability -> "" when the model has it, else the reason, in words that end
a sentence about the model ("model 'x' (t5, torch backend) is an encoder-decoder, which neither
backend traces"). Computed once per model from what it is (family, decoder or encoder, heads).
"""

from __future__ import annotations

from typing import Any

from attncli.errors import BadInput
from attncli.hf.backends.torch_families import FAMILIES
from attncli.model.interface import CAPABILITIES
from attncli.io.textio import visible

ENCODER_DECODER = "is an encoder-decoder, which neither backend traces"
NO_MLM = ("has no masked-language-model head in its checkpoint (a base or sentence-embedding model): it "
          "predicts no token")
POST_LN = ("normalises after each layer (post-LN) and reads its logits through an MLM head: its heads have no "
           "direct path to a logit (direct logit attribution is for pre-norm decoders: GPT-2, Llama, Qwen2, ...)")
TORCH_WEIGHTS = ("runs on the torch backend, whose trace holds no weights: add --backend numpy where it runs the "
                 "model (ablate and patch run on either backend)")
TORCH_BATCH = "runs on the torch backend, which traces one text per pass: add --backend numpy where it runs the model"
ENCODER = "is an encoder: it predicts no next token"
TORCH_NUMPY_PASS = "runs through transformers (--dtype): add --backend numpy where attn's NumPy pass runs the model"
TORCH_TAPE = ("runs on the torch backend: the recorded pass and its backward are attn's NumPy pass "
              "(add --backend numpy where it runs the model)")


def pairs_reason(model: Any) -> str:
    if model.has_pairs:
        return ""
    return "is a decoder, it reads one text" if model.is_decoder else "has a tokenizer with no pair format"


def numpy_reasons(model: Any) -> dict[str, str]:
    """Capability -> reason ("" when it has it) of a NumpyPretrained."""
    arch, decoder = model.arch, model.is_decoder
    mlm = ""
    if not decoder:
        try:
            model.mlm_head
        except BadInput:
            mlm = NO_MLM
    pre_norm = decoder and hasattr(arch, "final_norm_parts")
    if decoder:
        grad = "" if pre_norm else ("is not GPT-2 or the Llama family, for which gradients on attn's NumPy pass "
                                    "are written")
    else:
        grad = mlm  # BERT's family, DistilBERT and MPNet: through their masked-language-model head
    output_weight = "" if hasattr(arch, "output_weight") else (
        f"is a '{model.model_type}', whose NumPy pass does not expose each head's output projection")
    cap = arch.parts.logit_cap  # capped logits: no sum of parts gives them
    capped = f"caps its logits (final_logit_softcapping {cap}), which no sum of parts gives" if cap else ""
    return {
        "trace": "", "resume": "", "batch": "", "rerun": "",
        "unembed": mlm,
        "dla": capped if pre_norm else POST_LN,
        "output_weight": output_weight,
        "qk": "adds a relative position bias to q k^T" if arch.parts.position == "relative" else "",
        "pairs": pairs_reason(model),
        "mlm": "is a decoder, with no masked-language-model head" if decoder else mlm,
        "next_token": mlm,
        "lens": "" if decoder else ENCODER,
        "cache": "" if decoder else ENCODER,
        "stacks": "is not an encoder-decoder",
        "grad": grad,
        "contributions": output_weight,  # ALTI, GlobEnc, value zeroing read each head's output projection
        "tape": grad,  # the NumPy tapes: hf/methods/backward.py (pre-norm decoders), hf/methods/backward_encoder.py (MLM encoders)
        "progress": "", "explain": "", "precision": "", "weights": "",
    }


def torch_reasons(model: Any) -> dict[str, str]:
    """Capability -> reason of a TorchPretrained (an encoder-decoder: Seq2SeqPretrained)."""
    if model.encoder_decoder:
        reasons = {cap: ENCODER_DECODER for cap in CAPABILITIES}
        reasons.update(stacks="", pairs=pairs_reason(model))
        return reasons
    untraced = "" if model.traced else (
        f"is a '{visible(model.model_type)}'{' decoder' if model.model_type in FAMILIES else ''}, whose modules the "
        f"torch backend's trace does not know (it knows {', '.join(sorted(FAMILIES))}): use --backend numpy where "
        "it runs the model")
    mlm = "" if model.is_decoder or model.has_mlm_head else NO_MLM
    return {
        "trace": untraced, "resume": untraced,
        "batch": TORCH_BATCH, "rerun": TORCH_BATCH,
        "unembed": TORCH_WEIGHTS, "dla": TORCH_WEIGHTS, "output_weight": TORCH_WEIGHTS,
        "qk": untraced,
        "pairs": pairs_reason(model),
        "mlm": "is a decoder, with no masked-language-model head" if model.is_decoder else mlm,
        "next_token": mlm,
        "lens": TORCH_WEIGHTS,
        "cache": "runs on the torch backend, which keeps no key/value cache",
        "stacks": "is not an encoder-decoder",
        # torch autograd (hf/backends/torch_grad.py): every decoder; a family torch_families does not map, at the stream's sites
        "grad": "" if model.is_decoder else "is an encoder: gradients on the torch backend are written for decoders",
        "contributions": "runs on the torch backend, whose trace holds no weights or norms: add --backend numpy where "
                         "it runs the model",
        "tape": TORCH_TAPE,
        "progress": "runs on the torch backend, whose pass reports no layer as it goes",
        "explain": TORCH_NUMPY_PASS, "precision": TORCH_NUMPY_PASS, "weights": TORCH_NUMPY_PASS,
    }
