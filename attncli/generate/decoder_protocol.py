"""What every decoder ``attn generate`` drives speaks (``decoders.py`` has the interface's story):
a prompt as the model sees it (``Encoded``) and the ``Decoder`` protocol. Here, one floor below
the decoders, so that each of them (``decoders.BuiltinLM``, ``pretrained.PretrainedLM``) and the
generation loop (``run.py``) can import it without importing each other.

Shapes: V the output vocabulary, L layers, h heads, T positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class Encoded:
    """A prompt as the model sees it."""

    tokens: list[str]  # the tokens' text, one per position
    inputs: list[Any]  # what ``forward`` takes, one per position
    ids: list[int | None]  # each token's id in the output vocabulary (None: the model cannot write it)
    mapping: list[dict[str, Any]]  # per prompt token: how it was mapped (JSON-ready)
    notes: list[str] = field(default_factory=list)  # what a user should know about the mapping


class Decoder(Protocol):
    name: str
    kind: str
    layers: int
    heads: int
    context: int  # the longest sequence (prompt + generated) the model runs on
    vocab_size: int
    banned: tuple[int, ...]  # never chosen
    eos_ids: tuple[int, ...]  # the ends of the text: generation stops when one is chosen (none: it never stops early)

    def token(self, i: int) -> str: ...
    def label(self, token: str) -> str: ...
    def token_text(self, i: int) -> str: ...  # token i's text, its leading space kept (attncli.hf.text.token_text)
    def text(self, tokens: list[str], ids: list[int | None]) -> str: ...
    def encode(self, prompt: str) -> Encoded: ...
    def input_of(self, i: int) -> Any: ...
    def forward(self, inputs: list[Any]) -> tuple[np.ndarray, list[np.ndarray]]: ...
