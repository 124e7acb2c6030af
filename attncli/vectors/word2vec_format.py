"""The streaming NumPy readers of the word2vec-style formats: text (``glove``, ``word2vec``) and
``word2vec-binary``. Every word, count and number is checked as it is read; a duplicate word, a
short row or a header that lies is a BadInput naming the line (see ``imports.py`` for why these
are not gensim's readers).

Shapes: V words, d dimensions.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from attncli.errors import BadInput
from attncli.io.textio import MAX_LINE_BYTES
from attncli.vectors.vector_files import Imported, Progress, has_control_bytes, looks_like_text

MAX_DIM = 10_000
MAX_WORD_BYTES = 1_000  # a longer "word" in a binary file means the file is not what it was said to be
CHUNK = 1 << 22  # bytes read at a time
# a text file is read CHUNK bytes at a time, cut at its last newline; a line longer than
# MAX_LINE_BYTES (1 MiB: 10,000 numbers of 100 characters) is refused, so reading costs at most
# about 2 x (CHUNK + MAX_LINE_BYTES) besides the vectors themselves, whatever the file holds


# ---------------------------------------------------------------- word2vec-style headers


def _parse_header(line: bytes, path: Path, fmt: str) -> tuple[int, int]:
    fields = line.split()
    try:
        count, dim = (int(f) for f in fields)
    except ValueError:
        shown = line[:60].decode("utf-8", "replace").strip()
        hint = " (a GloVe file has none: use --format glove)"
        raise BadInput(f"{str(path)!r} has no word2vec header: its first line {shown!r} is not 'COUNT DIM'{hint}") from None
    if count < 1:
        raise BadInput(f"{str(path)!r}: its header announces {count} words: there is nothing to import")
    _check_dim(dim, path)
    return count, dim


def _check_dim(dim: int, path: Path) -> None:
    if not 1 <= dim <= MAX_DIM:
        raise BadInput(f"{str(path)!r}: vectors of {dim} dimensions (attn takes 1 to {MAX_DIM:,})")


def _word(raw: bytes, path: Path, where: str) -> str:
    try:
        word = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{str(path)!r}, {where}: the word {raw[:40]!r} is not UTF-8 (byte {exc.start}); "
                       "attn stores words as UTF-8 text: re-encode the file") from None
    if not word or word.isspace():
        raise BadInput(f"{str(path)!r}, {where}: an empty word")
    if "\r" in word or "\n" in word:
        raise BadInput(f"{str(path)!r}, {where}: the word {word[:40]!r} holds a line break: attn stores one word a line")
    return word


class _Words:
    """The words read so far, refusing a duplicate with both places named."""

    def __init__(self, path: Path):
        self.path = path
        self.words: list[str] = []
        self.seen: dict[str, str] = {}

    def add(self, word: str, where: str) -> None:
        first = self.seen.setdefault(word, where)
        if first is not where:
            raise BadInput(f"{str(self.path)!r}: the word {word!r} occurs twice ({first} and {where}); "
                           "a word must have one vector: remove one of them")
        self.words.append(word)


def _finite_rows(block: np.ndarray, path: Path, where: Callable[[int], str]) -> None:
    bad = ~np.isfinite(block).all(axis=1)
    if bad.any():
        raise BadInput(f"{str(path)!r}, {where(int(np.argmax(bad)))}: a value is NaN or infinite")


# ---------------------------------------------------------------- text: GloVe, word2vec


def read_text_vectors(fh, path: Path, size: int, *, header: bool, limit: int | None, progress: Progress) -> Imported:
    fmt = "word2vec" if header else "glove"
    count = dim = None
    line_no = 0
    if header:
        first = fh.readline(1 << 16)
        line_no = 1
        count, dim = _parse_header(first, path, fmt)
    sample = fh.read(1 << 14)
    fh.seek(-len(sample), os.SEEK_CUR)
    if has_control_bytes(sample):
        raise BadInput(f"{str(path)!r} is not a text vectors file: it holds binary data"
                       + (" after its header (use --format word2vec-binary)" if header else " (check --format)"))
    want = limit  # None: read to the end (and compare with the header's count)
    words = _Words(path)
    blocks: list[np.ndarray] = []
    n = 0
    done = False
    for first_line, lines in _line_blocks(fh, path, line_no + 1):
        ws: list[bytes] = []
        rests: list[bytes] = []
        nos: list[int] = []
        for i, line in enumerate(lines):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue  # blank lines (a final one, say) carry no word
            word, _, rest = line.lstrip(b" ").partition(b" ")
            ws.append(word)
            rests.append(rest.strip(b" "))
            nos.append(first_line + i)
        if not ws:
            continue
        if dim is None:
            dim = _first_dim(ws[0], rests[0], path)
        if want is not None and n + len(ws) >= want:
            ws, rests, nos = ws[: want - n], rests[: want - n], nos[: want - n]
            done = True
        block = _parse_block(rests, nos, dim, path, header)
        _finite_rows(block, path, lambda r: f"line {nos[r]}")
        for word, no in zip(ws, nos):
            words.add(_word(word, path, f"line {no}"), f"line {no}")
        blocks.append(block)
        n += len(ws)
        progress(fh.tell(), size)
        if done:
            break
    if n == 0:
        raise BadInput(f"{str(path)!r} holds no vectors")
    if count is not None and n != count and not (done and n < count):
        how = f"ends after {n:,}" if n < count else f"holds {n:,}"
        raise BadInput(f"{str(path)!r}: its header announces {count:,} words but the file {how}: "
                       "the file is truncated, or the header's count is wrong")
    progress(size, size)
    vectors = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
    blocks.clear()
    return Imported(words.words, vectors, words_in_file=None if done and limit is not None else n)


def _line_blocks(fh, path: Path, first: int):
    """(number of the first line, lines) for blocks of about CHUNK bytes of ``fh``, each line
    without its newline. A line longer than MAX_LINE_BYTES is a BadInput as soon as it is seen
    (one huge line, ``/dev/zero``, a file without newlines), so memory stays bounded."""
    carry = b""
    while True:
        data = fh.read(CHUNK)
        if not data:
            if carry:
                yield first, [carry]
            return
        data = carry + data
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            _check_line_length(len(carry), first, path)
            continue
        lines = data[:cut].split(b"\n")
        carry = data[cut + 1:]
        longest = max(range(len(lines)), key=lambda i: len(lines[i]))
        _check_line_length(len(lines[longest]), first + longest, path)
        _check_line_length(len(carry), first + len(lines), path)
        yield first, lines
        first += len(lines)


def _check_line_length(n: int, line: int, path: Path) -> None:
    if n > MAX_LINE_BYTES:
        raise BadInput(f"{str(path)!r}: line {line:,} is longer than {MAX_LINE_BYTES // 2**20:,} MiB, the most attn "
                       "reads in a line: it is not a text vectors file (check --format)")


def _first_dim(word: bytes, rest: bytes, path: Path) -> int:
    fields = rest.split()
    if len(fields) == 1 and word.isdigit() and fields[0].isdigit():
        raise BadInput(f"{str(path)!r} starts with a word2vec header ('{word.decode()} {fields[0].decode()}'): "
                       "use --format word2vec")
    _check_dim(len(fields), path)
    return len(fields)


def _parse_block(rests: list[bytes], nos: list[int], dim: int, path: Path, header: bool) -> np.ndarray:
    """(n, d) float32 from the number parts of n lines; BadInput naming the first bad line."""
    if not rests:
        return np.zeros((0, dim), dtype=np.float32)
    if all(r.count(b" ") == dim - 1 for r in rests):  # the usual case: one C parse for the whole block
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                flat = np.fromstring(b" ".join(rests), dtype=np.float32, sep=" ")
        except (ValueError, DeprecationWarning):
            flat = None
        if flat is not None and flat.size == len(rests) * dim:
            return flat.reshape(len(rests), dim)
    out = np.empty((len(rests), dim), dtype=np.float32)  # something is off: find the line, line by line
    for r, (rest, no) in enumerate(zip(rests, nos)):
        fields = rest.split()
        if len(fields) != dim:
            what = "the header says" if header else "the first line has"
            raise BadInput(f"{str(path)!r}, line {no}: {len(fields)} numbers after the word, but {what} {dim}: "
                           "every vector must have the same dimension")
        try:
            out[r] = [float(f) for f in fields]
        except ValueError:
            bad = next(f for f in fields if not _is_float(f))
            raise BadInput(f"{str(path)!r}, line {no}: {bad[:30].decode('utf-8', 'replace')!r} is not a number") from None
    return out


def _is_float(text: bytes) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- word2vec binary


def read_binary_vectors(fh, path: Path, size: int, limit: int | None, progress: Progress) -> Imported:
    count, dim = _parse_header(fh.readline(1 << 16), path, "word2vec-binary")
    start = fh.tell()
    row = 4 * dim
    if count * (row + 2) > size - start:  # each entry: a word of >= 1 byte, a space, d floats
        raise BadInput(f"{str(path)!r}: its header announces {count:,} vectors of {dim} dimensions, "
                       f"{count * (row + 2):,} bytes at least, but the file has {size - start:,} after the header: "
                       "it is truncated, or the header's count is wrong")
    sample = fh.read(min(1 << 14, size - start))
    fh.seek(start)
    if looks_like_text(sample) and len(sample) >= 16:
        raise BadInput(f"{str(path)!r} is text, not binary, after its header: use --format word2vec")
    want = count if limit is None else min(count, limit)
    vectors = np.empty((want, dim), dtype=np.float32)
    words = _Words(path)
    buf = b""
    pos = 0
    eof = False
    for i in range(want):
        while True:  # the next word: skip separating newlines, read to the space
            while pos < len(buf) and buf[pos] in (10, 13):
                pos += 1
            space = buf.find(b" ", pos, pos + MAX_WORD_BYTES + 1)
            if space >= 0 and space + 1 + row <= len(buf):
                break
            if space < 0 and len(buf) - pos > MAX_WORD_BYTES:
                raise BadInput(f"{str(path)!r}, vector {i + 1}: no word ends within {MAX_WORD_BYTES} bytes: "
                               "the file is damaged, or not word2vec binary")
            if eof:
                raise BadInput(f"{str(path)!r} ends in the middle of vector {i + 1} of the {count:,} its header "
                               "announces: the file is truncated (or the header's count is wrong)")
            more = fh.read(CHUNK)
            eof = not more
            buf = buf[pos:] + more
            pos = 0
            progress(fh.tell(), size)
        where = f"vector {i + 1}"
        words.add(_word(buf[pos:space], path, where), where)
        vectors[i] = np.frombuffer(buf, dtype="<f4", count=dim, offset=space + 1)
        pos = space + 1 + row
    _finite_rows(vectors, path, lambda r: f"vector {r + 1}")
    if want == count:
        rest = buf[pos:] + fh.read(1 << 16)
        if rest.strip(b"\r\n \t"):
            raise BadInput(f"{str(path)!r}: the file goes on after the {count:,} vectors its header announces: "
                           "fix the header's count")
    progress(size, size)
    return Imported(words.words, vectors, words_in_file=count if want == count else None)
