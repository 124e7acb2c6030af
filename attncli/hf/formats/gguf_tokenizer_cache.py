"""A GGUF file's tokenizer built once and kept: transformers' builders (importing transformers and
building SmolLM2's 49,152 tokens and 48,900 merges: about 1.4 s of CPU, more than the rest of a
head view) run on the first load, and the ``tokenizers.Tokenizer`` they give is kept as its own
JSON (tokenizer.json's format, no pickle) under ``paths.cache_dir()/gguf-tokenizers/``.

The key is a SHA-256 of everything the builder may read and of what built it: the file's metadata
(every key and value), the builder's own source file, and the versions of attn, transformers and
tokenizers; a file whose metadata differs in one token, or a new transformers, builds again. A
cached file that cannot be read back (torn, edited, not JSON) is built again and rewritten; a cache
that cannot be written only warns. The ids are the same either way (tests/hf/test_gguf_tokenizer_cache.py).
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from typing import Any, Callable

from attncli import __version__
from attncli.env import paths
from attncli.errors import RuntimeFailure
from attncli.io.fileio import FileProblem, atomic_write, read_bytes, read_text
from attncli.hf.checks.config_check import TOKENIZER_BYTES
from attncli.hf.text.encoding import tokenizer_errors
from attncli.hf.formats.gguf_file import GGUFFile
from attncli.io.messages import warn

FOLDER = "gguf-tokenizers"
SOURCE_BYTES = 4 * 2**20  # the builder's own source file, read for the key


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def key_of(gguf: GGUFFile, build: Callable[[GGUFFile], Any]) -> str:
    """The cache key of the tokenizer ``build`` makes of ``gguf``."""
    digest = hashlib.sha256()
    digest.update(json.dumps(gguf.metadata, sort_keys=True, ensure_ascii=True, default=repr).encode("ascii"))
    source = getattr(sys.modules.get(build.__module__), "__file__", None)
    digest.update(read_bytes(source, SOURCE_BYTES, follow_symlinks=True) if source else build.__qualname__.encode())
    digest.update(f"{__version__} {_version('transformers')} {_version('tokenizers')}".encode())
    return digest.hexdigest()


def cached_tokenizer(gguf: GGUFFile, build: Callable[[GGUFFile], Any]) -> Any:
    """``build(gguf)``, from the cache when it holds it (then neither transformers nor the builder runs)."""
    from tokenizers import Tokenizer

    path = paths.cache_dir() / FOLDER / f"{key_of(gguf, build)}.json"
    try:
        text = read_text(path, TOKENIZER_BYTES)
        with tokenizer_errors(gguf.path.name, "read its kept tokenizer"):
            return Tokenizer.from_str(text)
    except (FileProblem, UnicodeDecodeError, RuntimeFailure):  # missing, torn or edited: built again
        pass
    tokenizer = build(gguf)
    with tokenizer_errors(gguf.path.name, "write its tokenizer"):
        text = tokenizer.to_str()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    except OSError as exc:
        warn(f"could not keep {gguf.path.name}'s tokenizer in {path.parent} ({exc}); the next load builds it again")
    return tokenizer
