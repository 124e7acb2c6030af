"""A pretrained causal LM as a decoder for ``attn generate`` (``--transformer NAME_OR_PATH``).

The transformer wing loads it: GPT-2 and Llama-family models with ``model.safetensors`` and
``tokenizer.json`` run in attn's own NumPy forward pass (no torch import), anything else that
``AutoModelForCausalLM`` loads runs through transformers with the eager attention. Both give
``logits_and_attentions(ids)``: (T, V) logits and (L, h, T, T) attentions of one causal pass,
which is all a decoder needs. An encoder (BERT, ...) predicts no next token: refused (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from attncli.model.interface import has
from attncli.attention.logit_lens import logit_lens
from attncli.errors import BadInput
from attncli.generate.decoder_protocol import Encoded
from attncli.hf import load as load_transformer
from attncli.hf.text.chat import render
from attncli.hf.checks.config_check import check_token_ids, damaged, read_json
from attncli.hf.families.registry import DECODER_FAMILIES

GENERATION_CONFIG = "generation_config.json"  # transformers' generate reads its end-of-text ids here first
DECODER_SECTIONS = ("decoder", "generator", "text_config")  # where transformers looks when config.json's top level names none
from attncli.hf.text.encoding import tokenizer_errors


def shown(piece: str) -> str:
    """A token's text for a label: its leading space dropped, invisible characters escaped."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in piece)
    return text.strip(" ") or ("␣" * len(text) if text else "∅")


class PretrainedLM:
    """A Hugging Face causal LM (``attncli.hf.load``) behind the decoder interface."""

    kind = "pretrained"

    def __init__(self, model, use_cache: bool = True, chat: bool = False, command: str = "attn generate"):
        if not model.is_decoder:
            needs = (f"it predicts no next token, attn lens needs a causal LM that attn runs in NumPy: {DECODER_FAMILIES}"
                     if command == "attn lens" else
                     f"it cannot generate text, {command} needs a causal LM (GPT-2 family, or any AutoModelForCausalLM)")
            raise BadInput(f"model '{model.name}' ({model.model_type}) is an encoder: {needs}")
        self.model = model
        self.chat = chat  # wrap the prompt in the model's chat template (--chat)
        self.name = model.name
        self.layers, self.heads = model.layers, model.heads
        self.context = int(model.max_positions)
        self.vocab_size = int(model.config.get("vocab_size") or 0)
        self.banned: tuple[int, ...] = ()
        self.eos_ids = end_of_text_ids(model.config, model.path)
        self._token_cache: dict[int, str] = {}
        self._text_cache: dict[int, str] = {}
        # the numpy backend's key/value cache: each step runs only the new token (the torch backend
        # keeps none and recomputes); the same logits and attentions either way (tested)
        self.cache = model.new_cache() if use_cache else None

    def describe(self) -> str:
        return (f"pretrained {self.model.model_type} '{self.name}' ({self.layers} layers x {self.heads} heads, "
                f"{self.model.backend} backend)")

    def token(self, i: int) -> str:
        """Token ``i``'s text; a byte-level piece of a multi-byte character (which decodes to U+FFFD
        alone) keeps its raw piece, e.g. 'âĢ', so it stays distinguishable."""
        if i not in self._token_cache:
            text = self.model.decode([i])
            self._token_cache[i] = self.model.token_strings([i])[0] if "\ufffd" in text else text
        return self._token_cache[i]

    def label(self, piece: str) -> str:
        return shown(piece)

    def token_text(self, i: int) -> str:
        """Token ``i``'s text as the views draw it (through attncli.io.textio.token_label): the
        tokenizer's decoder on the token (attncli.hf.text.token_text), its leading space kept (" John"
        on every family, where decoding it alone drops SentencePiece's), bytes that are not a whole
        character alone as <0xE2>."""
        if i not in self._text_cache:
            self._text_cache[i] = self.model.token_texts([i])[0]
        return self._text_cache[i]

    def text(self, tokens: list[str], ids: list[int | None]) -> str:
        return self.model.decode([int(i) for i in ids if i is not None])

    def encode(self, prompt: str) -> Encoded:
        if not prompt.strip():
            raise BadInput("the prompt is empty: give a few words to continue")
        text = prompt
        if self.chat:
            text = render(self.model.path, self.name, prompt)  # holds the template's special tokens itself
        enc = self.model.encode(text, truncate=True, special=not self.chat)
        if getattr(enc, "truncated", False):
            raise BadInput(f"the prompt is longer than model '{self.name}' reads ({self.context} tokens, its context): "
                           f"shorten it to at most {self.context - 1} tokens")
        ids = [int(i) for i in enc.ids]
        tokens = [self.token(i) for i in ids]
        mapping = [{"token": t, "id": i, "piece": p} for t, i, p in zip(tokens, ids, enc.tokens)]
        notes = [f"the prompt is {len(ids)} token(s) of the model's own tokenizer"
                 + (", wrapped in its chat template" if self.chat else "")]
        return Encoded(tokens, list(ids), list(ids), mapping, notes)

    def input_of(self, i: int) -> int:
        return int(i)

    def forward(self, inputs: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        logits, att = self.model.logits_and_attentions(inputs, cache=self.cache)  # (T, V), (L, h, T, T)
        self.vocab_size = int(logits.shape[-1])  # V: the logits' width, config.json's vocab_size or not
        return np.asarray(logits[-1], dtype=np.float64), list(att)

    def lens(self, inputs: list[int], k: int = 5, follow: int | None = None):
        """The logit lens (attncli.attention.logit_lens): needs attn's NumPy forward pass."""
        if not has(self.model, "lens"):
            raise BadInput(lens_needs_numpy(self.model))
        return logit_lens(self.model.residual_stream(inputs), self.model.lens_logits, k, follow)

    def token_id(self, word: str) -> int | None:
        """The id of ``word``: a vocabulary entry as written (e.g. 'Ġcat'), else the one token the
        tokenizer makes of it (with a leading space first, as inside a text), else None. Either
        backend's tokenizer: a ``tokenizers.Tokenizer`` (NumPy path) or transformers' own."""
        tok = self.model.tokenizer
        own = hasattr(tok, "token_to_id")  # a tokenizers.Tokenizer (NumPy path), else transformers' tokenizer
        with tokenizer_errors(self.name, "look up a token"):
            exact = tok.token_to_id(word) if own else tok.get_vocab().get(word)  # (convert_tokens_to_ids: unk's id)
            if exact is not None:
                return int(exact)
            for text in (" " + word, word):
                encoded = tok.encode(text, add_special_tokens=False)
                ids = encoded.ids if own else encoded
                if len(ids) == 1:
                    return int(ids[0])
        return None


def lens_needs_numpy(model) -> str:
    """Why the logit lens refuses ``model`` (loaded on the transformers path): which families it reads."""
    return (f"the logit lens reads attn's own NumPy forward pass, which runs {DECODER_FAMILIES}; "
            f"'{model.name}' runs on the {model.backend} backend (model_type '{model.model_type}')")


def end_of_text_ids(config: dict[str, Any], path: Path) -> tuple[int, ...]:
    """The ids that end the text, read where transformers' ``generate`` reads them: the
    ``eos_token_id`` of generation_config.json when the folder has that file (missing or null
    there: none, whatever config.json says), else config.json's (else that of the first of its
    decoder / generator / text_config sections that names one). An int or a list of ints (Llama 3
    instruct: ``<|eot_id|>`` beside ``<|end_of_text|>``): any of them ends the text. An id the
    model can never write (-1, "none" in some configs; one past the vocabulary) ends nothing, as in
    transformers, which compares each written token with the list and warns at most. Any other
    value is damage (exit 1), as transformers refuses it when it loads the config."""
    generation = path / GENERATION_CONFIG
    if os.path.lexists(generation):
        source = read_json(generation)  # a regular file, bounded; not JSON: damage
        if not isinstance(source, dict):
            raise damaged(GENERATION_CONFIG, "it is not a JSON object")
        check_token_ids(source, GENERATION_CONFIG)
    else:
        source = config  # config.json, checked when it was loaded
        if source.get("eos_token_id") is None:
            inner = next((config[k] for k in DECODER_SECTIONS if isinstance(config.get(k), dict)), {})
            check_token_ids(inner, "config.json")
            source = inner
    eos = source.get("eos_token_id")
    ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    return tuple(dict.fromkeys(int(i) for i in ids if i >= 0))  # in order, each once


def load_pretrained(name_or_path: str, *, chat: bool = False, command: str = "attn generate",
                    **kwargs: Any) -> PretrainedLM:
    """``kwargs`` go to ``attncli.hf.load`` (backend, ...); ``command`` names what asked
    for a decoder in the refusal of an encoder."""
    return PretrainedLM(load_transformer(name_or_path, **kwargs), chat=chat, command=command)
