"""Key and query similarity from a pretrained sentence encoder (``attn lookup --encoder``).

Shapes: N keys, D the encoder's hidden size, T tokens of one text.

    e(text)      = sum_t m_t h_t / sum_t m_t      h = last hidden state (T, D), m = attention mask
    cosine_i     = cos(e(query), e(key_i))
    similarity_i = (1 - lambda) * cosine_i + lambda * ngram_i

``e`` is sentence-transformers' mean pooling (Reimers & Gurevych 2019, "Sentence-BERT"), the
pooling all-MiniLM-L6-v2 was trained with: every token the tokenizer gives, [CLS] and [SEP]
included, padding excluded. A model whose sentence-transformers Pooling config names another
pooling (the [CLS] token, as BGE models; max; mean / sqrt(length)) gets that one, as
sentence-transformers would give it; several are concatenated in its order. The forward pass is
the transformer wing's ``Pretrained.embed`` (NumPy from model.safetensors and tokenizer.json when
the model is a BERT-family one, else transformers). The n-gram overlap is the word-vector lookup's own (``keyindex.KeyTokens``);
lambda defaults to the encoder's own where params.ENCODER_NGRAM_WEIGHTS names it (all-mpnet-base-v2:
0.15), else 0.6; docs/lookup.md has the measurements behind each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attncli.io import messages
from attncli.errors import BadInput
from attncli.lookup.keyindex import KeyTokens
from attncli.lookup.params import POOLING, encoder_ngram_weight
from attncli.io.textio import clip
from attncli.hf import load as load_transformer
from attncli.hf.checks.config_check import damaged, read_json, read_optional_json
from attncli.vectors.tokenize import tokenize

def load_encoder(name_or_path: str, *, allow_missing_weights: bool = False):
    """A loaded ``attncli.hf.Pretrained`` that is an encoder; BadInput otherwise.

    A model without sentence-transformers' files (modules.json) is an encoder but was not trained
    for sentence similarity: accepted, with a warning; so is one whose pooling attn does not have
    (it gets mean pooling).
    """
    model = load_transformer(name_or_path, allow_missing_weights=allow_missing_weights)
    if model.is_decoder:
        raise BadInput(f"--encoder '{name_or_path}' is a decoder ({model.model_type}), not an encoder: "
                       "give a sentence encoder such as all-MiniLM-L6-v2")
    if not _modules(model.path):
        messages.warn(f"'{name_or_path}' has no sentence-transformers files (modules.json): it is an encoder, "
                      "but not one trained for sentence similarity, so its cosines may mean little")
    else:
        on = _pooling_flags(model.path)
        other = [m for m in on if m not in POOLING]
        if other:
            messages.warn(f"'{name_or_path}' was trained with {', '.join(other)} pooling, which attn does not have; "
                          "attn uses mean pooling")
    return model


def pooling_modes(path: Path) -> tuple[str, ...]:
    """The poolings the model's sentence-transformers Pooling config turns on, in POOLING's order
    (sentence-transformers concatenates them in that order); ("mean",) without a config, or when
    it names one attn does not have (weightedmean, lasttoken)."""
    on = _pooling_flags(path)
    if not on or any(m not in POOLING for m in on):
        return ("mean",)
    return tuple(m for m in POOLING if m in on)


def _pooling_flags(path: Path) -> list[str]:
    """The ``pooling_mode_*`` flags set in 1_Pooling/config.json (the folder modules.json names
    for the Pooling module): ``cls_token`` as "cls", ``*_tokens`` without the suffix."""
    config = _pooling_config(path)
    flags = [k.removeprefix("pooling_mode_") for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    return ["cls" if f == "cls_token" else f.removesuffix("_tokens") for f in flags]


def _pooling_config(path: Path) -> dict:
    """1_Pooling/config.json (the folder modules.json names for the Pooling module, a plain folder
    name inside the model directory), or {}. Both are read through the transformer wing's checked
    door: a FIFO, a device, a huge or deeply nested file is damage (exit 1), never waited on."""
    modules = _modules(path)
    folder = next((m.get("path") for m in modules if isinstance(m, dict) and "Pooling" in str(m.get("type"))), "1_Pooling")
    if not isinstance(folder, str) or not folder or folder in (".", "..") or "/" in folder or "\\" in folder:
        return {}
    return read_optional_json(path / folder / "config.json")


def _modules(path: Path) -> list:
    """modules.json's list of sentence-transformers modules ([] when absent or not a list)."""
    if not (path / "modules.json").exists():
        return []
    modules = read_json(path / "modules.json")
    if not isinstance(modules, list):
        raise damaged("modules.json", "it is not a list of modules")
    return modules


def unit(m: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (float64; a zero row stays zero)."""
    m = np.asarray(m, dtype=np.float64)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


class EncoderIndex(KeyTokens):
    """The keys of one dictionary embedded once by a sentence encoder; ``score(query)`` as KeyIndex."""

    def __init__(self, encoder, keys: list[str], *, ngram_weight: float | None = None, pooling: tuple[str, ...] | None = None):
        if ngram_weight is None:  # the encoder's own, chosen on the held-out set (params.ENCODER_NGRAM_WEIGHTS)
            ngram_weight = encoder_ngram_weight(encoder.name)
        super().__init__(keys, ngram_weight=ngram_weight)  # checks every key has a word in it
        self.encoder = encoder
        self.name = encoder.name
        self.pooling = pooling or pooling_modes(encoder.path)  # the model's own, as sentence-transformers
        self.key_matrix = unit(encoder.embed(keys, self.pooling))  # (N, D)

    def check_query(self, query: str, *, allow_no_vector: bool = False) -> list[str]:
        """The query's words; BadInput if it has none (every text has an embedding)."""
        tokens = tokenize(query)
        if not tokens:
            raise BadInput(f"the query {clip(query)} has no word in it (letters or digits) to look up")
        return tokens

    def query_vector(self, query: str, *, allow_no_vector: bool = False) -> tuple[list[str], np.ndarray]:
        """The query's words (for the n-gram score) and its (D,) unit embedding."""
        return self.check_query(query), unit(self.encoder.embed([query], self.pooling))[0]  # (D,)

    def pieces(self, text: str) -> list[str]:
        """The encoder's own tokens of ``text`` ([CLS], word pieces, [SEP]): what the mean runs over."""
        return self.encoder.encode(text, truncate=True).tokens
