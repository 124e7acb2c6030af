"""One tokenized input (a text, or a sentence pair as one input), as the model's tokenizer splits it.

Both backends build an ``Encoding`` from a ``tokenizers.Encoding``: the numpy backend's comes from
``tokenizer.json`` through the ``tokenizers`` library, the torch backend's from transformers' fast
tokenizer (whose ``BatchEncoding.encodings[0]`` is the same kind of object), so segments, special
tokens and words are read the same way on both.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from attncli.errors import AttnError, BadInput, RuntimeFailure, Stopped, TooLong
from attncli.hf.text.token_text import token_texts
from attncli.io.textio import check_length, visible

SEGMENTS = ("a", "b")


@dataclass(frozen=True)
class Encoding:
    """One input. Every list has one entry per token (T)."""

    ids: list[int]
    tokens: list[str]  # the model's own pieces: "[CLS]", "fl", "##ies", "Ġflies"
    segments: list[str | None]  # "a" / "b" per token, None for a special token
    special: list[bool]
    word_ids: list[int | None]  # index into `words`, None for a special token
    words: list[str]  # each word's text as written (across both sentences of a pair)
    type_ids: list[int]  # what the model is fed as token_type_ids (zeros where it has none)
    text: str
    pair: str | None = None
    truncated: bool = False
    texts: list[str] | None = None  # each token's text (attncli.hf.text.token_text): " John" for "ĠJohn"; None: the tokens

    def __len__(self) -> int:
        return len(self.ids)


def from_tokenizers(enc: Any, texts: Sequence[str], *, use_type_ids: bool, truncated: bool = False,
                    decoder: Sequence[dict] = ()) -> Encoding:
    """An ``Encoding`` from a ``tokenizers.Encoding`` of ``texts`` (one text, or a pair); ``decoder``:
    the tokenizer's decoder steps (attncli.hf.text.token_text.decoder_steps), which give each token's text."""
    sequence_ids = list(enc.sequence_ids)
    special = [bool(s) for s in enc.special_tokens_mask]
    raw_words = list(enc.word_ids)
    offsets = list(enc.offsets)
    T = len(enc.ids)
    segments: list[str | None] = []
    word_ids: list[int | None] = []
    spans: dict[tuple[int, int], int] = {}  # (sequence, word in sequence) -> index in words
    bounds: list[list[int]] = []  # per word: sequence, start, end, first token
    for t in range(T):
        seq = sequence_ids[t]
        if special[t] or seq is None:
            special[t] = True
            segments.append(None)
            word_ids.append(None)
            continue
        segments.append(SEGMENTS[seq] if len(texts) > 1 else "a")
        key = (seq, raw_words[t] if raw_words[t] is not None else -1 - t)
        start, end = offsets[t]
        if key not in spans:
            spans[key] = len(bounds)
            bounds.append([seq, start, end, t])
        else:
            w = bounds[spans[key]]
            w[1], w[2] = min(w[1], start), max(w[2], end)
        word_ids.append(spans[key])
    tokens = list(enc.tokens)
    # a word's text as written; a tokenizer without offsets (a slow one) gives its pieces instead
    words = [texts[seq][start:end].strip() or tokens[first] for seq, start, end, first in bounds]
    type_ids = list(enc.type_ids) if use_type_ids else [0] * T
    return Encoding(ids=list(enc.ids), tokens=tokens, segments=segments, special=special,
                    word_ids=word_ids, words=words, type_ids=type_ids, text=texts[0],
                    pair=texts[1] if len(texts) > 1 else None, truncated=truncated,
                    texts=token_texts(tokens, special, decoder))


def too_long(n: int, limit: int, pair: bool) -> TooLong:
    return TooLong(n, limit, pair)  # its message names --truncate; a command without it says .shorten()


def check_text(text: Any, name: str = "text") -> str:
    if not isinstance(text, str):
        raise BadInput(f"the {name} must be a string, not {type(text).__name__}")
    return check_length(text, f"the {name}")


@contextlib.contextmanager
def tokenizer_errors(name: str, what: str) -> Iterator[None]:
    """The one door into a model's tokenizer (the ``tokenizers`` library, or transformers' over
    it): whatever it raises (its own ``Exception``, a Rust panic, which pyo3 raises as a
    BaseException, a TypeError from a damaged file) is a damaged model, exit 1, naming the model
    and what the tokenizer was doing. attn's own errors, a signal and no memory pass through."""
    try:
        yield
    except (AttnError, KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError, Stopped):
        raise
    except BaseException as exc:  # noqa: BLE001 - a Rust panic is a BaseException
        line = next((part.strip() for part in str(exc).splitlines() if part.strip()), type(exc).__name__)[:200]
        raise RuntimeFailure(f"damaged model '{visible(name)}': its tokenizer fails to {what}: {visible(line)}") from None


def tokenized(what: str) -> Callable:
    """A model's method (the model named by ``self.name``) that calls its tokenizer, run inside
    :func:`tokenizer_errors`."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def method(self, *args: Any, **kwargs: Any) -> Any:
            with tokenizer_errors(self.name, what):
                return fn(self, *args, **kwargs)

        return method

    return wrap
