"""Encoders' masked-language-model heads in NumPy: what makes an encoder's ``logits`` site.

    h = LayerNorm(act(dense(x)))          transform (BERT: cls.predictions.transform)
    logits = h W_E^T + b                  decoder, tied to the word embeddings unless stored

As transformers' BertLMPredictionHead, RobertaLMHead, DistilBertForMaskedLM and MPNetLMHead. The
head lives outside the base model's prefix (``cls.``, ``lm_head.``, ``vocab_*``): a checkpoint
saved from the base model (a sentence-transformers model) has none, and is refused by name.
Shapes: T tokens, d hidden, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.errors import BadInput
from attncli.hf.kernels import ops
from attncli.hf.checks.config_defaults import field

_ROBERTA_LIKE = dict(dense="lm_head.dense", norm="lm_head.layer_norm", decoder="lm_head.decoder",
                     bias="lm_head.bias", act="gelu")
LAYOUTS = {
    "bert": dict(dense="cls.predictions.transform.dense", norm="cls.predictions.transform.LayerNorm",
                 decoder="cls.predictions.decoder", bias="cls.predictions.bias", act=None),
    "distilbert": dict(dense="vocab_transform", norm="vocab_layer_norm", decoder="vocab_projector",
                       bias="vocab_projector.bias", act=None),
    "roberta": _ROBERTA_LIKE, "xlm-roberta": _ROBERTA_LIKE, "camembert": _ROBERTA_LIKE, "mpnet": _ROBERTA_LIKE,
}


class MaskedLMHead:
    """The MLM head of an encoder checkpoint, read from ``weights`` (Weights or WeightsAs)."""

    def __init__(self, weights: Any, config: dict, name: str):
        model_type = config["model_type"]
        layout = LAYOUTS.get(model_type)
        if layout is None or not weights.has_exact(layout["dense"] + ".weight"):
            raise BadInput(f"model '{name}' ({model_type}) has no masked-language-model head in its checkpoint "
                           "(a base or sentence-embedding model): it predicts no token, so there is no target "
                           "to attribute")
        self.w, self.layout = weights, layout
        act = layout["act"] or field(config, "activation" if model_type == "distilbert" else "hidden_act")
        if act not in ops.ACTIVATIONS:
            raise BadInput(f"model '{name}': its MLM head's activation '{act}' is not implemented")
        self.act = ops.ACTIVATIONS[act]
        self.eps = 1e-12 if model_type == "distilbert" else float(field(config, "layer_norm_eps"))

    def _get(self, full: str) -> np.ndarray:
        return self.w.get_exact(full)

    def decoder(self) -> np.ndarray:
        """(V, d) the decoder's weight: stored, else the word embeddings it is tied to."""
        full = self.layout["decoder"] + ".weight"
        return self._get(full) if self.w.has_exact(full) else self.w.get("embeddings.word_embeddings.weight")

    def bias(self) -> np.ndarray:
        """(V,) the decoder's bias (BERT: cls.predictions.bias, also saved as decoder.bias)."""
        for full in (self.layout["bias"], self.layout["decoder"] + ".bias"):
            if self.w.has_exact(full):
                return self._get(full)
        return np.zeros(self.decoder().shape[0], dtype=self.decoder().dtype)

    def transform_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The transform's dense weight (d, d) as stored (out, in), its bias (d,), its LayerNorm's weight
        and bias (d,) each."""
        dense, norm = self.layout["dense"], self.layout["norm"]
        return (self._get(dense + ".weight"), self._get(dense + ".bias"), self._get(norm + ".weight"),
                self._get(norm + ".bias"))

    def transform(self, x: np.ndarray) -> np.ndarray:
        """(..., d) -> (..., d): LayerNorm(act(dense(x)))."""
        w, b, ln_w, ln_b = self.transform_weights()
        return ops.layer_norm(self.act(ops.linear(x, w, b)), ln_w, ln_b, self.eps)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(..., d) final hidden states -> (..., V) logits."""
        return self.transform(x) @ self.decoder().T + self.bias()
