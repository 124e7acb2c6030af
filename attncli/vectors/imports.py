"""``attn import``: a user's pretrained word vectors, stored as an attn model.

Formats (Shapes: V words, d dimensions, B n-gram buckets):

* ``glove``: text, one ``word v_1 ... v_d`` per line, no header (Pennington et al. 2014).
* ``word2vec``: the same with a ``COUNT DIM`` first line (word2vec's ``-binary 0``, fastText's ``.vec``).
* ``word2vec-binary``: a ``COUNT DIM`` line, then per word its UTF-8 bytes, a space and d
  little-endian float32 (word2vec's ``-binary 1``; gensim's ``save_word2vec_format(binary=True)``).
* ``fasttext-bin``: Facebook fastText's ``.bin`` model with its n-gram table, so unknown words
  still get vectors. Checked here (``fasttext_bin.scan``), then read with gensim's own
  ``load_facebook_vectors``: not a pickle.

The two word2vec-style formats are read by a streaming NumPy reader (``word2vec_format.py``) instead of gensim's
``load_word2vec_format``: gensim's text reader parses every number in Python (about 35 s for
400,000 x 100 GloVe on this machine, against the 30 s budget), it silently keeps the first of
two duplicate words and ignores what follows the count a header announces, and it cannot report
progress. tests/vectors/test_imports.py checks that both readers give exactly gensim's vectors.

Everything is read and checked before the store is touched; ``store.save_vectors`` then writes
the model whole or not at all. A gensim ``.model`` file is a pickle and is refused unread.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from attncli import __version__
from attncli.errors import BadInput
from attncli.vectors import store
from attncli.vectors.fasttext_bin import read_fasttext_bin
from attncli.vectors.vector_files import PRECISIONS, Imported, Progress, check_format, open_vectors, sniff
from attncli.vectors.word2vec_format import read_binary_vectors, read_text_vectors

__all__ = ["PRECISIONS", "Imported", "check_format", "import_file", "sniff", "store_imported"]


def import_file(path: str | Path, fmt: str, *, limit: int | None = None, progress: Progress | None = None) -> Imported:
    """Read and check the vectors of ``path`` (nothing is stored)."""
    check_format(fmt)
    if limit is not None and limit < 1:
        raise BadInput(f"--limit must be at least 1, got {limit}")
    path = Path(path)
    size = sniff(path, fmt)
    progress = progress or (lambda done, total: None)
    if fmt == "fasttext-bin":
        return read_fasttext_bin(path, size, limit=limit, progress=progress)
    with open_vectors(path) as fh:
        if fmt == "word2vec-binary":
            return read_binary_vectors(fh, path, size, limit, progress)
        return read_text_vectors(fh, path, size, header=fmt == "word2vec", limit=limit, progress=progress)


# ---------------------------------------------------------------- storing


def store_imported(name: str, data: Imported, *, fmt: str, path: Path, precision: str = "float32") -> dict[str, Any]:
    """Write the vectors as model ``name`` (atomically) and return its meta.json."""
    if precision not in PRECISIONS:
        raise BadInput(f"unknown --precision {precision!r}: choose {' or '.join(PRECISIONS)}")
    store.check_new_name(name)
    if precision == "float16":
        big = max(float(np.abs(data.vectors).max(initial=0.0)),
                  float(np.abs(data.ngrams).max(initial=0.0)) if data.ngrams is not None else 0.0)
        if big > 65504:
            raise BadInput(f"a value of {big:g} does not fit float16 (at most 65,504): use --precision float32")
    algorithm = {"glove": "glove", "word2vec": "word2vec", "word2vec-binary": "word2vec", "fasttext-bin": "fasttext"}[fmt]
    meta = {
        "algorithm": algorithm,
        "corpus": {"source": "imported", "file": path.name, "format": fmt, "words_in_file": data.words_in_file},
        "corpus_label": f"imported: {path.name}",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "evaluation": None,  # attn eval --model NAME computes it on demand
        "attn_version": __version__,
    }
    store.save_vectors(name, data.words, data.vectors, ngrams=data.ngrams, subword=data.subword,
                       counts=data.counts, meta=meta, dtype=precision)
    return store.read_meta(store.model_dir(name))
