"""Facebook fastText ``.bin`` models: checked here, read by gensim's ``load_facebook_vectors``.

gensim's reader trusts the file: a garbled header makes it allocate whatever the numbers say, a
truncated matrix fails an ``assert``, a word that is not UTF-8 is silently backslash-escaped and
two equal words are silently merged. ``scan`` walks the layout first (fastText's
``FastText::saveModel``: magic, version, the 12 ``Args`` ints and ``t``, the dictionary, then the
input matrix of ``nwords + bucket`` rows) and refuses all of that with a message; only a file
that passes goes to gensim. Nothing here is a pickle.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attncli.errors import BadInput
from attncli.vectors.vector_files import Imported, open_vectors

MAX_DIM = 10_000
MAX_NGRAM = 100
_ARGS = ("dim", "ws", "epoch", "min_count", "neg", "word_ngrams", "loss", "model", "bucket", "minn", "maxn", "lr_update_rate")
_HEAD = struct.Struct("<2i12id")  # magic, version, args, t
_OLD_HEAD = struct.Struct("<12id")  # before version 11 (2016): no magic, no version, args first
_DICT = struct.Struct("<3iqq")  # size, nwords, nlabels, ntokens, pruneidx_size
_OLD_DICT = struct.Struct("<3iq")  # no pruneidx_size
_ENTRY = struct.Struct("<qb")  # count, type
_MATRIX = struct.Struct("<?qq")  # quant, rows, cols
_OLD_MATRIX = struct.Struct("<qq")  # rows, cols
MAGIC = 793712314


@dataclass
class Layout:
    dim: int
    bucket: int
    minn: int
    maxn: int
    nwords: int
    words: list[str]
    matrix_end: int  # offset just after the input matrix


def scan(path: Path, size: int, progress) -> Layout:
    src = repr(str(path))
    with open_vectors(path) as fh:  # a regular file, through attncli.io.fileio
        head = fh.read(_HEAD.size + _DICT.size)
        if len(head) < _OLD_HEAD.size + _OLD_DICT.size:
            raise BadInput(f"{src} is truncated: it ends inside fastText's header")
        new = head.startswith(MAGIC.to_bytes(4, "little"))
        if new:
            if len(head) < _HEAD.size + _DICT.size:
                raise BadInput(f"{src} is truncated: it ends inside fastText's header")
            _magic, version, *rest = _HEAD.unpack_from(head)
            if version not in (11, 12):
                raise BadInput(f"{src} is a fastText model of file version {version}: attn reads versions 11 and 12")
        else:
            rest = list(_OLD_HEAD.unpack_from(head))
        args = dict(zip(_ARGS, rest[:12]))
        dim, bucket, minn, maxn = args["dim"], args["bucket"], args["minn"], args["maxn"]
        plausible = (1 <= dim <= MAX_DIM and 0 <= bucket <= 10**9 and 0 <= minn <= MAX_NGRAM and 0 <= maxn <= MAX_NGRAM
                     and args["loss"] in (1, 2, 3) and args["model"] in (1, 2, 3) and 0 < rest[12] < 1)
        if not plausible:
            raise BadInput(f"{src} is not a fastText .bin model" if not new else
                           f"{src}: its fastText header is damaged (dim {dim}, bucket {bucket}, minn {minn}, maxn {maxn})")
        if new:
            n_size, nwords, nlabels, _ntokens, prune = _DICT.unpack_from(head, _HEAD.size)
        else:
            n_size, nwords, nlabels, _ntokens = _OLD_DICT.unpack_from(head, _OLD_HEAD.size)
            prune = 0
            fh.seek(_OLD_HEAD.size + _OLD_DICT.size)
        if nlabels > 0:
            raise BadInput(f"{src} is a supervised fastText classifier ({nlabels} labels), not word vectors")
        if prune != -1 and prune != 0:
            raise BadInput(f"{src} is a pruned (quantized, .ftz-style) fastText model: import the full .bin model")
        if not 1 <= nwords == n_size:
            raise BadInput(f"{src}: its fastText dictionary is damaged ({n_size} entries, {nwords} words)")
        # each entry: a word of >= 1 byte, its NUL, count and type (9 bytes)
        if nwords * 11 > size:
            raise BadInput(f"{src} is truncated: its header announces {nwords:,} words, more than the file can hold")
        words: list[str] = []
        seen: set[str] = set()
        offset = fh.tell()
        buf = b""
        pos = 0
        for i in range(nwords):
            end = buf.find(b"\0", pos)
            while end < 0 or end + 1 + _ENTRY.size > len(buf):
                more = fh.read(1 << 22)
                if not more:
                    raise BadInput(f"{src} is truncated: it ends inside the dictionary (word {i + 1} of {nwords:,})")
                offset += pos
                buf, pos = buf[pos:] + more, 0
                end = buf.find(b"\0", pos)
                progress(offset, size)
            raw = buf[pos:end]
            try:
                word = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{src}, word {i + 1}: {raw[:40]!r} is not UTF-8 (byte {exc.start}); "
                               "attn stores words as UTF-8 text") from None
            if not word or "\n" in word or "\r" in word:
                raise BadInput(f"{src}, word {i + 1}: {word!r} is not a word attn can store (empty, or a line break)")
            if word in seen:
                raise BadInput(f"{src}: the word {word!r} occurs twice in the dictionary: the model is damaged")
            seen.add(word)
            words.append(word)
            _count, kind = _ENTRY.unpack_from(buf, end + 1)
            if kind != 0:
                raise BadInput(f"{src}, word {i + 1}: an entry of type {kind}, not a word: not a word-vector model")
            pos = end + 1 + _ENTRY.size
        offset += pos
        fh.seek(offset + 8 * max(prune, 0))
        matrix_header = _MATRIX if new else _OLD_MATRIX
        matrix = fh.read(matrix_header.size)
        if len(matrix) < matrix_header.size:
            raise BadInput(f"{src} is truncated: it ends before its vectors")
        quant, rows, cols = matrix_header.unpack(matrix) if new else (False, *matrix_header.unpack(matrix))
        if quant:
            raise BadInput(f"{src} is a quantized fastText model (.ftz): import the full .bin model")
        if rows != nwords + bucket or cols != dim:
            raise BadInput(f"{src}: its vector matrix is {rows} x {cols}, the header says {nwords + bucket} x {dim}: "
                           "the file is damaged")
        end = fh.tell() + rows * cols * 4
        if end > size:
            raise BadInput(f"{src} is truncated: its vectors need {end:,} bytes, the file has {size:,}")
        fh.seek(end)  # the output matrix (not imported) must be whole too: a cut file is a damaged file
        out = fh.read(matrix_header.size)
        if len(out) < matrix_header.size:
            raise BadInput(f"{src} is truncated: it ends before its output matrix")
        out_rows, out_cols = matrix_header.unpack(out)[-2:]
        whole = end + matrix_header.size + out_rows * out_cols * 4
        if out_rows < 0 or out_cols != dim or whole != size:
            problem = "is truncated" if whole > size else "goes on after its output matrix" if whole < size else "is damaged"
            raise BadInput(f"{src} {problem}: a fastText model of this header is {whole:,} bytes, the file {size:,}")
    return Layout(dim, bucket, minn, maxn, nwords, words, end)


def read_fasttext_bin(path: Path, size: int, *, limit: int | None, progress):
    """An ``Imported`` with the words' vectors, the n-gram table and the subword parameters."""
    import logging

    layout = scan(path, size, progress)
    logging.getLogger("gensim").setLevel(logging.ERROR)
    from gensim.models.fasttext import load_facebook_vectors

    try:
        wv = load_facebook_vectors(str(path))
    except MemoryError:
        raise BadInput(f"not enough memory to read {str(path)!r}") from None
    except Exception as exc:  # noqa: BLE001 - whatever gensim trips on, the file is not usable
        raise BadInput(f"{str(path)!r} could not be read as a fastText .bin model: {type(exc).__name__}: {exc}") from None
    words = list(wv.index_to_key)
    if sorted(words) != sorted(layout.words):  # pragma: no cover - gensim and scan disagree: refuse, do not guess
        raise BadInput(f"{str(path)!r}: gensim read another vocabulary than the file's dictionary")
    keep = len(words) if limit is None else min(limit, len(words))
    vectors = np.asarray(wv.vectors[:keep], dtype=np.float32)  # (V, d): word + n-gram vectors combined
    counts = wv.expandos.get("count") if hasattr(wv, "expandos") else None
    counts = np.asarray(counts[:keep], dtype=np.int64) if counts is not None else None
    ngrams = subword = None
    if layout.maxn >= 1 and layout.bucket >= 1:
        ngrams = np.asarray(wv.vectors_ngrams, dtype=np.float32)  # (B, d)
        subword = {"min_n": max(1, wv.min_n), "max_n": wv.max_n, "bucket": wv.bucket}
    for label, array in (("word vectors", vectors), ("n-gram vectors", ngrams)):
        if array is not None and not np.isfinite(array).all():
            raise BadInput(f"{str(path)!r}: its {label} hold NaN or infinite values")
    progress(size, size)
    return Imported(words[:keep], vectors, ngrams=ngrams, subword=subword, counts=counts,
                    words_in_file=layout.nwords)
