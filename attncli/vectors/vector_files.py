"""A user's word-vectors file for ``attn import``: the formats, opening it through attncli.io.fileio's
door, refusing at a glance what it is not (a pickle, an archive, the wrong format), and what
reading it gives (``Imported``). The readers are ``word2vec_format.py`` and ``fasttext_bin.py``;
``imports.py`` chooses between them and stores the result.

Shapes: V words, d dimensions, B n-gram buckets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from attncli.errors import BadInput
from attncli.io.fileio import FileProblem, open_regular

FORMATS = ("word2vec", "word2vec-binary", "glove", "fasttext-bin")
PRECISIONS = ("float32", "float16")
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)

_MAGIC = {
    b"\x1f\x8b": "gzip-compressed: decompress it first (gunzip)",
    b"PK\x03\x04": "a zip archive: extract the vectors file from it first (unzip)",
    b"BZh": "bzip2-compressed: decompress it first (bunzip2)",
    b"\xfd7zXZ": "xz-compressed: decompress it first (unxz)",
    b"\x93NUMPY": "a NumPy .npy array (gensim's save() writes these beside a pickled .model): "
                  "export the vectors with gensim's save_word2vec_format and import that file",
}
_PICKLE_HINT = (
    "is a Python pickle (gensim's .model / save() format, or a .pkl): attn never loads pickles, because "
    "unpickling runs code stored in the file. Export the vectors from your own trusted Python session "
    "with model.wv.save_word2vec_format('vectors.bin', binary=True) and import that with "
    "--format word2vec-binary (a fastText model: gensim.models.fasttext.save_facebook_model(model, "
    "'model.bin'), then --format fasttext-bin)"
)
FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")


@dataclass
class Imported:
    words: list[str]
    vectors: np.ndarray  # (V, d) float32
    ngrams: np.ndarray | None = None  # (B, d) float32, fastText only
    subword: dict[str, int] | None = None
    counts: np.ndarray | None = None  # (V,) int64, fastText only
    words_in_file: int | None = None  # None when --limit stopped the reading early


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise BadInput(f"unknown --format {fmt!r}: choose {', '.join(FORMATS)}")
    return fmt


def sniff(path: Path, fmt: str) -> int:
    """The file's size, after refusing what is not a readable file of format ``fmt`` at a glance."""
    source = f"{str(path)!r}"
    with open_vectors(path) as fh:
        try:
            head = fh.read(16)
        except OSError as exc:
            raise BadInput(f"cannot read {source}: {exc.strerror or exc}") from None
        size = os.fstat(fh.fileno()).st_size
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5 or path.suffix.lower() in (".model", ".pkl", ".pickle"):
        raise BadInput(f"{source} {_PICKLE_HINT}")
    if not head:
        raise BadInput(f"{source} is empty: it holds no vectors")
    for magic, what in _MAGIC.items():
        if head.startswith(magic):
            raise BadInput(f"{source} is {what}")
    is_fasttext = head.startswith(FASTTEXT_MAGIC)
    if fmt == "fasttext-bin" and looks_like_text(head):
        raise BadInput(f"{source} is not a fastText .bin model: it is text (try --format glove or word2vec)")
    if fmt != "fasttext-bin" and is_fasttext:
        raise BadInput(f"{source} is a fastText .bin model, not {fmt}: use --format fasttext-bin")
    return size


def open_vectors(path: Path):
    """The vectors file, opened for reading in binary: a regular file (a symbolic link to one is
    followed), never a FIFO or a device (``/dev/zero``), through attncli.io.fileio's door."""
    source = f"{str(path)!r}"
    try:
        return os.fdopen(open_regular(path, follow_symlinks=True), "rb")
    except FileProblem as exc:
        why = str(exc)
        if why == "it is missing":
            raise BadInput(f"{source} does not exist") from None
        if why.startswith("it is a directory"):
            raise BadInput(f"{source} is a directory: give the vectors file") from None
        raise BadInput(f"cannot read {source}: {why}") from None


def has_control_bytes(sample: bytes) -> bool:
    """A NUL or another control byte than tab, CR, LF: binary data, not text."""
    return bool(sample.translate(None, bytes(range(0x20, 0x100)) + b"\t\n\r"))


def looks_like_text(sample: bytes) -> bool:
    """No control byte but tab/CR/LF, and valid UTF-8 (a cut last character allowed)."""
    if has_control_bytes(sample):
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(sample) - 3 and exc.reason == "unexpected end of data"
    return True
