"""Reading a user's text (a file, or stdin for ``-``) with errors a person can act on."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from attncli.errors import BadInput


MAX_INPUT_BYTES = 64 * 2**20  # a file or stdin read whole (--dict, --queries, --file): 64 MiB
MAX_LINE_BYTES = 1 * 2**20  # one line read from a stream (similar -): 1 MiB
BOM = "\ufeff"  # a UTF-8 byte-order mark: dropped at the start of a file a user gives
_CHUNK = 1 << 20
MAX_TEXT_CHARS = 1_000_000  # one text a model reads (a sentence, a --pair, a prompt): ~200,000 words, past any context
MAX_WORD_CHARS = 100_000  # one word built from character n-grams: all its n-gram rows are held at once


def read_user_text(path: str | Path, what: str, *, hint: str = "", limit: int = MAX_INPUT_BYTES,
                   binary_check: bool = False) -> str:
    """The UTF-8 text of ``path`` (stdin when it is ``-``); a BOM is dropped.

    ``what`` names the input in messages ("dictionary file", "--file"); ``hint`` says what a
    valid input looks like. Every failure is a BadInput (exit 2) that names the input. At most
    ``limit`` bytes are read, a chunk at a time: a bigger input (a huge file, ``/dev/zero``) is
    refused as soon as it passes the limit, and invalid UTF-8 (or, with ``binary_check``, a NUL
    byte) as soon as its chunk is read, so no input costs more than ``limit`` bytes of memory.
    """
    hint = f": {hint}" if hint else ""
    source = f"{what} on stdin" if str(path) == "-" else f"{what} {str(path)!r}"
    try:
        if str(path) == "-":
            return _read_limited(stdin_bytes(what), source, limit, hint, binary_check)
        with open(path, "rb") as fh:
            return _read_limited(fh, source, limit, hint, binary_check)
    except FileNotFoundError:
        raise BadInput(f"{source} does not exist") from None
    except IsADirectoryError:
        raise BadInput(f"{source} is a directory{hint}") from None
    except OSError as exc:
        import errno

        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            raise  # the environment's problem (attncli.cli.common reports it), not the input's
        raise BadInput(f"cannot read {source}: {exc.strerror or exc}") from None


def _read_limited(fh, source: str, limit: int, hint: str, binary_check: bool) -> str:
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    parts: list[str] = []
    total = 0
    while True:
        chunk = fh.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            break
        if binary_check:
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise BadInput(f"{source} looks binary (NUL byte at byte offset {total + nul}){hint}")
        try:
            parts.append(decoder.decode(chunk))
        except UnicodeDecodeError as exc:
            raise BadInput(f"{source} is not UTF-8 text (byte 0x{chunk[exc.start]:02x} at byte offset "
                           f"{total + exc.start}){hint}") from None
        total += len(chunk)
        if total > limit:
            raise BadInput(f"{source} is larger than {limit // 2**20:,} MiB, the most attn reads{hint}")
    try:
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        raise BadInput(f"{source} is not UTF-8 text (it ends inside a character){hint}") from None
    return "".join(parts).removeprefix(BOM)


def read_lines(stream, what: str, *, limit: int = MAX_LINE_BYTES):
    """(line number, text) for each line of a binary stream, read lazily, each decoded strictly;
    a line longer than ``limit`` bytes (``/dev/zero`` has no end of line) is a BadInput. A UTF-8
    byte-order mark at the start of the first line is dropped (Windows editors write one)."""
    for number in itertools.count(1):
        raw = stream.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit and not raw.endswith(b"\n"):
            raise BadInput(f"line {number} of {what} is longer than {limit // 2**20:,} MiB, the most attn reads in a line")
        if number == 1:
            raw = raw.removeprefix(BOM.encode("utf-8"))
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"line {number} of {what} is not UTF-8 text (byte {exc.start})") from None


def stdin_bytes(what: str):
    """stdin as a binary stream, to be decoded strictly by the caller: the text layer may use
    surrogateescape (C/POSIX locale), which would let invalid bytes through to the output.
    BadInput naming ``what`` if stdin is closed (<&-)."""
    import io

    if sys.stdin is None:
        raise BadInput(f"cannot read {what} from stdin: it is closed")
    if hasattr(sys.stdin, "buffer"):
        return sys.stdin.buffer
    return io.BytesIO(sys.stdin.read().encode("utf-8"))  # a text-only stand-in (tests)


def check_text(text: str, what: str) -> str:
    """``text`` itself if it is valid Unicode; BadInput naming ``what`` if it holds a lone surrogate
    (a JSON escape such as "\\ud800", or a command-line byte that was not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise BadInput(f"{what} is not valid Unicode text: it holds the lone surrogate U+{ord(bad):04X} "
                       "(invalid UTF-8 bytes or a broken \\u escape)") from None
    return text


def check_length(text: str, what: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` itself if it holds at most ``limit`` characters; else a BadInput naming ``what``
    ("the text", "the --pair sentence"), before any tokenizer or model spends time and memory on it."""
    if len(text) > limit:
        raise BadInput(f"{what} is {len(text):,} characters long, more than the {limit:,} attn reads in one "
                       "text: shorten it")
    return text


def check_word_length(word: str) -> str:
    """``word`` itself if it is at most MAX_WORD_CHARS characters: a word vector built from the
    character n-grams of a longer one (a 2,000,000-letter run) would hold gigabytes of rows."""
    if len(word) > MAX_WORD_CHARS:
        raise BadInput(f"the word {clip(word, 20)} is longer than {MAX_WORD_CHARS:,} characters, the most attn builds "
                       "a word vector for from its character n-grams: split it or shorten it")
    return word


# Characters a terminal acts on instead of showing: C0 controls (ESC starts every escape sequence:
# colours, clearing the screen, setting the title, OSC 52 writing the clipboard), DEL, C1
# controls (U+009B is a one-character CSI, U+009D an OSC), and the invisible characters that
# reorder or break the text around them (bidi embeddings, overrides and isolates, line and
# paragraph separators). ``visible`` replaces each with a visible escape: ``\x1b``, ``\u202e``.
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_INVISIBLE = (list(range(0x00, 0x20)) + list(range(0x7F, 0xA0))
              + [0x061C, 0x200E, 0x200F, 0x2028, 0x2029] + list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)))
_VISIBLE = {cp: _NAMED.get(chr(cp), f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}") for cp in _INVISIBLE}


def visible(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1) and every bidi or line-separator
    control replaced by a visible escape (``\x1b``, ``\u202e``): what came from a user's or a
    model's data can then be drawn on a terminal without acting on it. For views only: JSON
    output carries the exact text."""
    return text.translate(_VISIBLE)


def clip(text: str, limit: int = 60) -> str:
    """A short quotation of ``text`` for a message: its repr, cut to about ``limit`` characters
    with the full length said, so a huge input never floods the terminal."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def span(first: int, last: int, one: str, many: str | None = None) -> str:
    """'row 2' or 'rows 2-5': a closed range of numbered things, named once."""
    return f"{one} {first}" if first == last else f"{many or one + 's'} {first}-{last}"


# A token's text in a view. A leading space is how byte-level BPE (GPT-2's 'Ġ') and SentencePiece
# ('▁') tokens say a word starts: it is shown as U+2423 OPEN BOX, Unicode's own symbol for a space,
# one column wide in every terminal (east-asian width N, where the middle dot is ambiguous), drawn
# by DejaVu Sans Mono (the PNG's font), and rare in text (the middle dot is Catalan's l·l and
# attn's own masked cell). Other invisible characters (no-break and other Unicode spaces, zero-width
# and format characters) are escaped as ``\u00a0``, so a token made of them is never blank.
SPACE_MARK = "\u2423"
EMPTY_TOKEN = "\u2205"  # a token whose text is empty: '∅'
MAX_TOKEN_LABEL = 40  # characters of a token's text a view shows; the JSON keeps all of it


def texts_of(enc) -> list[str]:
    """Each token's text of an input (``hf.text.encoding.Encoding.texts``: " John" for "ĠJohn"), its
    tokens where it has none (the built-in LM's words, a slow tokenizer's pieces): what a view
    draws through :func:`token_label`."""
    texts = getattr(enc, "texts", None)
    return list(texts) if texts is not None else list(enc.tokens)


def _invisible(c: str) -> bool:
    import unicodedata

    return c != " " and unicodedata.category(c) in ("Zs", "Zl", "Zp", "Cf")


def token_label(text: str, limit: int = MAX_TOKEN_LABEL) -> str:
    """``text`` (a token's text, attncli.hf.text.token_text) as a view shows it: each space as ``␣``,
    other blank characters escaped (``\\u00a0``), controls made visible by :func:`visible`, and at
    most ``limit`` characters of it, the rest as ``…`` (a stranger's vocabulary may hold a huge
    piece). An empty text is ``∅``."""
    if not text:
        return EMPTY_TOKEN
    cut = len(text) > limit
    text = text[:limit]
    text = "".join(f"\\u{ord(c):04x}" if _invisible(c) else c for c in text)
    return visible(text.replace(" ", SPACE_MARK)) + ("…" if cut else "")
