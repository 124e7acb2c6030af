"""What a causal test measures: the target token (and a contrast) at one position of one text.

    metric = log p(target)                   log_softmax(logits[position])[target]
           = logit[target] - logit[contrast] with a contrast token

Decoders read the last position (the next token); encoders their masked-language-model head at
the last mask token of the text. A target must be one token of the vocabulary: a word that
tokenizes to several is refused with its pieces (``--target-id`` names a token by its id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncli.numeric import logsumexp, softmax
from attncli.errors import BadInput
from attncli.io.textio import token_label, visible
from attncli.model.interface import require

# what a causal command is doing, as its refusal names it (attncli.model.interface.refusal)
CAUSAL = "a causal test"
ON_ENCODER = "a target on an encoder"
DLA = "direct logit attribution"
GRADIENTS = "attribution patching"


@dataclass(frozen=True)
class Target:
    position: int  # the query position the logits are read at
    token: int
    label: str  # the token as the vocabulary spells it ("Ġan")
    contrast: int | None = None
    contrast_label: str | None = None
    text: str | None = None  # its text (attncli.hf.text.token_text: " an"), what is drawn; None: the label
    contrast_text: str | None = None

    def shown(self, contrast: bool = False) -> str:
        """The target's (or the contrast's) text as drawn, quoted: '␣an'."""
        text = (self.contrast_text or self.contrast_label) if contrast else (self.text or self.label)
        return f"'{token_label(text or '')}'"

    def describe(self) -> str:
        what = f"log p({self.shown()})" if self.contrast is None else \
            f"logit({self.shown()}) - logit({self.shown(True)})"
        return f"{visible(what)} at position {self.position}"

    def metric(self, logits: np.ndarray) -> np.ndarray:
        """(..., V) logits -> (...,) the measured quantity, float64."""
        x = np.asarray(logits, dtype=np.float64)
        if self.contrast is not None:
            return x[..., self.token] - x[..., self.contrast]
        return x[..., self.token] - logsumexp(x)  # log_softmax(x)[..., token]

    def gradient(self, logits: np.ndarray) -> np.ndarray:
        """(V,) d metric / d logits of one position's logits (V,): e_target - softmax(logits) for
        log p, e_target - e_contrast for a logit difference (float64)."""
        x = np.asarray(logits, dtype=np.float64)
        g = np.zeros_like(x)
        if self.contrast is not None:
            g[self.token], g[self.contrast] = 1.0, -1.0
            return g
        g -= softmax(x)  # (V,)
        g[self.token] += 1.0
        return g


def token_of(model: Any, word: str | None, token_id: int | None, option: str, named: str = "option") -> int:
    """The vocabulary id of ``word`` (an entry as written, else the one token the tokenizer makes of
    it, with a leading space first as inside a text) or ``token_id``; BadInput naming the pieces.
    ``named``: "option" (--target, --target-id) or "key" (a --pairs line's "target", "target_id")."""
    vocab = model.vocab_size
    if named == "key":
        name, by_id = f"{option!r}", f'"{option}_id": ID on the line'
        id_name = f"{option + '_id'!r}"
    else:
        name, by_id, id_name = f"--{option}", f"--{option}-id ID", f"--{option}-id"
    if (word is None) == (token_id is None):
        raise BadInput(f"give --{option} WORD or --{option}-id ID (one of them)")
    if token_id is not None:
        if not 0 <= token_id < vocab:
            raise BadInput(f"{id_name} {token_id} is outside the vocabulary (0..{vocab - 1})")
        return int(token_id)
    if not word:
        raise BadInput(f"{name} is empty: give one token")
    found = vocab_id(model, word)
    if found is not None and found < vocab:
        return int(found)
    for text in (" " + word, word):
        ids = model.pieces(text)
        if len(ids) == 1 and ids[0] < vocab:
            return int(ids[0])
    pieces = model.token_strings(model.pieces(word))
    if len(pieces) == 1:  # one token, past the vocabulary it predicts (the built-in LM reads words it cannot write)
        raise BadInput(f"{name} {visible(word)!r} is not one of the {vocab:,} tokens the model predicts: give "
                       f"another, or a token by its id with {by_id}")
    shown = ", ".join(repr(visible(p)) for p in pieces[:12]) + (", ..." if len(pieces) > 12 else "")
    raise BadInput(f"{name} {visible(word)!r} is not one token: the tokenizer makes {len(pieces)} of it "
                   f"({shown}); give one of them, or a token by its id with {by_id}")


def mask_position(model: Any, ids: list[int]) -> int:
    """An encoder's read position: the last mask token in ``ids``; BadInput when there is none."""
    mask = _mask_token(model)
    where = [i for i, t in enumerate(ids) if t == mask]
    if mask is None or not where:
        name = visible(model.token_strings([mask])[0]) if mask is not None else "the mask token"
        raise BadInput(f"model '{visible(model.name)}' is an encoder: it predicts the token at a mask; put "
                       f"{name} in the text where the target goes")
    return where[-1]


def vocab_id(model: Any, word: str) -> int | None:
    """The id of the vocabulary entry ``word`` of ``model``, None when there is none."""
    return model.vocab_id(word)


def _mask_token(model: Any) -> int | None:
    for name in ("[MASK]", "<mask>"):
        found = vocab_id(model, name)
        if found is not None:
            return int(found)
    return None


def resolve(model: Any, ids: list[int], *, target: str | None, target_id: int | None = None,
            contrast: str | None = None, contrast_id: int | None = None, named: str = "option") -> Target:
    """The Target of ``ids`` on ``model`` (an encoder's MLM head is checked here: refused by name without one);
    ``named``: how a message names the target ("option": --target; "key": a --pairs line's "target")."""
    if not model.is_decoder:
        require(model, "mlm", ON_ENCODER)
        position = mask_position(model, ids)
    else:
        position = len(ids) - 1
    token = token_of(model, target, target_id, "target", named)
    other = None
    if contrast is not None or contrast_id is not None:
        other = token_of(model, contrast, contrast_id, "contrast", named)
        if other == token:
            raise BadInput(f"{'--contrast' if named == 'option' else repr('contrast')} is the target itself: the logit "
                           "difference would be 0")
    label = lambda i: model.token_strings([i])[0]  # noqa: E731
    text = lambda i: model.token_texts([i])[0]  # noqa: E731 - " an" for "Ġan"
    return Target(position, token, label(token), other, None if other is None else label(other),
                  text(token), None if other is None else text(other))
