"""The models ``attn generate`` can drive, behind one small interface.

A decoder turns a prompt into tokens, and a token sequence into the next-token logits and every
layer's attention weights (one causal pass over the whole sequence, recomputed at every step:
the texts are short, and a recompute is trivially the same as the final pass):

    encode(prompt)     -> Encoded(tokens, inputs, mapping, notes)
    forward(inputs)    -> (logits of the last position (V,), L x (h, T, T) weights)
    input_of(id)       -> what to append to ``inputs`` after token ``id`` is chosen

``BuiltinLM`` is the trained causal LM stored with a word-vector model (``attncli.tinylm.model``,
NumPy). Its output vocabulary holds the most frequent training words, ``<unk>`` (every other
word) and ``</s>`` (the end of the sentence); its inputs are word vectors, so any word the
vectors can embed is a valid input, even one it could never write.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.attention.logit_lens import logit_lens
from attncli.errors import BadInput
from attncli.generate.decoder_protocol import Decoder, Encoded
from attncli.generate.hf_decoder import load_pretrained
from attncli.tinylm.data import EOS, UNK
from attncli.tinylm.model import load_trained
from attncli.vectors.store import CorruptModel
from attncli.vectors.tokenize import tokenize


class BuiltinLM:
    """The trained causal LM of a word-vector model (``attn train-attention``), in NumPy."""

    kind = "built-in LM"

    def __init__(self, att):
        self.att = att
        self.name = att.model
        self.layers, self.heads = att.layers, att.heads
        self.context = int(att.config.get("max_len_trained") or 80)
        self.words = att.output_words
        if len(self.words) != att.w["head.bias"].shape[0]:
            raise CorruptModel(f"the trained attention of model '{self.name}' is damaged: its output_vocab.txt has "
                               f"{len(self.words)} words for {att.w['head.bias'].shape[0]} outputs; retrain it")
        self.index = {w: i for i, w in enumerate(self.words)}
        self.vocab_size = len(self.words)
        self.unk = self.index.get(UNK)
        self.banned = (self.unk,) if self.unk is not None else ()
        self.eos_ids = (self.index[EOS],) if EOS in self.index else ()

    def describe(self) -> str:
        return f"{self.kind} of model '{self.name}' ({self.layers} layers x {self.heads} heads, {self.vocab_size:,} output words)"

    def token(self, i: int) -> str:
        return self.words[i]

    def label(self, token: str) -> str:
        return token

    def token_text(self, i: int) -> str:
        return self.words[i]

    def text(self, tokens: list[str], ids: list[int | None]) -> str:
        return " ".join(tokens)

    def encode(self, prompt: str) -> Encoded:
        tokens = tokenize(prompt)
        if not tokens:
            raise BadInput("the prompt has no words (the built-in LM reads runs of letters and digits)"
                           if prompt.strip() else "the prompt is empty: give a few words to continue")
        vectors = self.att.vectors
        mapping, inputs, notes = [], [], []
        if " ".join(tokens) != " ".join(prompt.split()):
            notes.append(f"the prompt is read as {len(tokens)} lower-cased word(s): {' '.join(tokens)}")
        unk = "<unk>" if self.unk is not None else None
        for t in tokens:
            if t in vectors:
                how = "vector"
            elif vectors.can_embed(t):
                how = "subwords"
            else:
                how = "zeros"
            inputs.append(vectors.vector(t) if how != "zeros" else np.zeros(vectors.dim, dtype=np.float32))
            known = t in self.index
            mapping.append({"token": t, "output": t if known else unk, "input": how})
            if not known:
                source = {"vector": "its own word vector", "subwords": "a vector built from its character n-grams",
                          "zeros": "a zero vector (no word vector and no character n-grams), as in training"}[how]
                notes.append(f"'{t}' is not one of the model's {self.vocab_size:,} output words (it maps to {unk}: "
                             f"the model cannot write it); it is read through {source}")
        return Encoded(tokens, inputs, [self.index.get(t) for t in tokens], mapping, notes)

    def input_of(self, i: int) -> np.ndarray:
        vectors = self.att.vectors
        word = self.words[i]
        return vectors.vector(word) if vectors.can_embed(word) else np.zeros(vectors.dim, dtype=np.float32)

    def lens(self, inputs: list[np.ndarray], k: int = 5, follow: int | None = None):
        """The logit lens (attncli.attention.logit_lens) of the causal pass over ``inputs``."""
        stream = self.att.residual_stream(self.att.embed_vectors(np.stack(inputs)))  # (L + 1, T, d)
        return logit_lens(stream, self.att.lens_logits, k, follow)

    def token_id(self, word: str) -> int | None:
        """The output id of ``word`` (lower-cased, as the prompt is read), or None."""
        return self.index.get(word.lower())

    def forward(self, inputs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        x = self.att.embed_vectors(np.stack(inputs))  # (T, d)
        logits, weights = self.att.logits_and_attentions(x)  # (T, V), L x (h, T, T)
        return logits[-1], weights


def load_decoder(model: str | None = None, transformer: str | None = None, *, command: str = "attn generate",
                 **options: Any) -> Decoder:
    """The built-in LM of word-vector model ``model`` (default: the default model), or a pretrained
    causal model ``transformer`` (a name or a directory; ``options``: chat, backend, ... as
    ``generate.hf_decoder.load_pretrained`` takes them, each only with a transformer)."""
    given = [k for k, v in options.items() if v not in (None, False, "auto")]
    if transformer is not None:
        if model is not None:
            raise BadInput("--model names a word-vector model with a built-in LM; --transformer a pretrained one: give one of them")
        return load_pretrained(transformer, command=command, **{k: v for k, v in options.items() if v is not None})
    if given:
        raise BadInput(f"--{given[0]} needs --transformer NAME_OR_PATH (a pretrained model)")
    return BuiltinLM(load_trained(model))
