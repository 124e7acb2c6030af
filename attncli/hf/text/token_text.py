"""Each token's text, decoded by the model's own tokenizer: GPT-2's ``ĠJohn`` is `` John``,
SentencePiece's ``▁John`` is `` John``, a byte piece ``<0x0A>`` is a newline, WordPiece's
``##ing`` stays ``##ing`` (a continuation), a special token is itself.

A token's text is what the tokenizer's decoder (``tokenizer.json``'s ``decoder``) makes of that
token within a text, read step by step from the decoder's own description, so every family that
the ``tokenizers`` library decodes is decoded here the same way, with no rule per family:

- ``ByteLevel``: the piece's characters are bytes through GPT-2's byte table (the table the
  library decodes with); ``ByteFallback``: a piece ``<0xNN>`` is the byte NN;
- ``Replace`` (SentencePiece's ``▁`` -> space; a regex pattern through the library's own Replace),
  ``Metaspace`` (the same), ``BPEDecoder`` (a word's end suffix ``</w>`` -> space) as the library
  applies them to a token inside a text;
- ``Strip`` and the first token's dropped space (``Metaspace``'s prepend scheme) act on the ends
  of a whole text, not on a token: a token keeps the space it holds (`` When``, not ``When``);
- ``WordPiece``: a token alone keeps its ``##`` (the decoder glues it to the word before);
- ``Fuse``, ``CTC``, an unknown step: the token as it is.

Bytes that are not a whole UTF-8 character alone (one byte of a multi-byte character, which the
library's decode shows as U+FFFD) are written ``<0xNN>``, SentencePiece's own name for a byte
piece, so they stay distinguishable. The texts are exact (the JSON's ``token_texts``); a view
shows them through ``attncli.io.textio.token_label`` (spaces as ``␣``, controls escaped, bounded).
"""

from __future__ import annotations

import codecs
import json
import re
from functools import lru_cache
from typing import Any, Sequence

BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_pieces(err: UnicodeDecodeError) -> tuple[str, int]:
    return "".join(f"<0x{b:02X}>" for b in err.object[err.start:err.end]), err.end


codecs.register_error("attn-byte-pieces", _byte_pieces)


def bytes_text(data: bytes) -> str:
    """``data`` as UTF-8 text, each byte that is not part of a whole character as ``<0xNN>``."""
    return data.decode("utf-8", errors="attn-byte-pieces")


@lru_cache(maxsize=1)
def byte_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet (Radford et al. 2019, ``bytes_to_unicode``), character -> byte:
    printable bytes stand for themselves, the others (space, controls, ...) for the characters
    from U+0100 on, in byte order (space is 'Ġ', newline 'Ċ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def decoder_steps(tokenizer: Any) -> list[dict[str, Any]]:
    """The steps of a tokenizer's decoder as ``tokenizer.json`` describes them, from a
    ``tokenizers.Tokenizer`` or transformers' fast tokenizer over one; [] without a decoder (a
    slow tokenizer: its tokens are shown as they are)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return []
    try:
        spec = json.loads(decoder.__getstate__())  # the decoder's own JSON, as tokenizer.json holds it
    except Exception:  # noqa: BLE001 - a decoder that cannot describe itself: tokens shown as they are
        return []
    steps = spec.get("decoders", []) if spec.get("type") == "Sequence" else [spec]
    return [s for s in steps if isinstance(s, dict)]


def token_text(piece: str, steps: Sequence[dict[str, Any]]) -> str:
    """The text of one (not special) token ``piece`` through the decoder ``steps``."""
    text = piece
    for step in steps:
        kind = step.get("type")
        if kind == "ByteLevel":
            table = byte_table()
            if all(c in table for c in text):  # an added token outside the alphabet is its own text
                text = bytes_text(bytes(table[c] for c in text))
        elif kind == "ByteFallback":
            m = BYTE_PIECE.fullmatch(text)
            if m:
                text = bytes_text(bytes([int(m[1], 16)]))
        elif kind == "Replace":
            pattern, content = step.get("pattern") or {}, str(step.get("content", ""))
            if isinstance(pattern.get("String"), str) and pattern["String"]:
                text = text.replace(pattern["String"], content)
            elif isinstance(pattern.get("Regex"), str):
                text = _regex_replace(pattern["Regex"], content, text)
        elif kind == "Metaspace":
            text = text.replace(str(step.get("replacement") or "▁"), " ")
        elif kind == "BPEDecoder":
            suffix = str(step.get("suffix") or "")
            if suffix:
                text = text.replace(suffix, " ")
    return text


def _regex_replace(pattern: str, content: str, text: str) -> str:
    """The library's own Replace on a regex pattern (Oniguruma, as the tokenizer reads it, with its
    bound on backtracking; Python's re has none, and a stranger's pattern could run for ever). A
    pattern it cannot read or run leaves the token as it is: this is a label, not the model's input."""
    try:
        from tokenizers import Regex, decoders

        return decoders.Replace(Regex(pattern), content).decode([text])
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except BaseException:  # noqa: BLE001 - a Rust panic (the backtracking bound) is a BaseException
        return text


def token_texts(pieces: Sequence[str], special: Sequence[bool], steps: Sequence[dict[str, Any]]) -> list[str]:
    """Each token's text (see the module docstring); a special token ([CLS], <s>, <|im_start|>)
    is its own piece."""
    cache: dict[str, str] = {}
    out = []
    for piece, sp in zip(pieces, special):
        if sp:
            out.append(piece)
            continue
        if piece not in cache:
            cache[piece] = token_text(piece, steps)
        out.append(cache[piece])
    return out
