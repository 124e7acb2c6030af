"""The one tokenization every command shares.

A token is a run of letters and digits, optionally joined by internal apostrophes or hyphens
("don't", "self-confidence", "3.5" is two tokens "3" and "5"), lower-cased with ``str.lower``.
Anything else (punctuation, symbols, whitespace) separates tokens and is dropped. Brown's own
tokens go through the same rule (:func:`normalize_sentence`): tokens with no letter or digit
(Brown's ``''``, ``--``, ``;``) vanish and ``U.S.`` becomes ``u s``, so a sentence typed by a user
and the same sentence read from Brown give the same tokens.
"""

from __future__ import annotations

import re

TOKENIZER_VERSION = 1  # bump when the rules change: it keys the corpus cache

# [^\W_] is "a letter or a digit" in every script; joiners are ' ’ and -.
_TOKEN_RE = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")


def tokenize(text: str) -> list[str]:
    """Split free text into lower-cased tokens."""
    return [m.group(0).replace("’", "'").lower() for m in _TOKEN_RE.finditer(text)]


def normalize_sentence(tokens: list[str]) -> list[str]:
    """Re-tokenize a pre-tokenized corpus sentence with :func:`tokenize`, token by token."""
    return [t for token in tokens for t in tokenize(token)]
