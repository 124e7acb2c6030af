"""The tokenizer of a GGUF file: the ``tokenizers.Tokenizer`` transformers builds from its
tokenizer.ggml.* metadata, so a GGUF's token ids are transformers' for the same file."""

from __future__ import annotations

from typing import Any

from attncli.errors import BadInput
from attncli.hf.config_check import damaged
from attncli.hf.gguf_file import GGUFFile
from attncli.hf.gguf_reader import architecture


def tokenizer_of(gguf: GGUFFile) -> Any:
    """The ``tokenizers.Tokenizer`` transformers builds from the file's tokenizer.ggml.* metadata
    (transformers' integrations.gguf builders: the vocabulary, merges and special tokens)."""
    from transformers.integrations.gguf import convert_gguf_tokenizer
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    meta = gguf.metadata
    wanted = {name: meta["tokenizer." + key] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
              if "tokenizer." + key in meta}
    if not isinstance(wanted.get("tokens"), list) or not all(isinstance(t, str) for t in wanted["tokens"]):
        raise BadInput(f"{gguf.path.name} carries no tokenizer (tokenizer.ggml.tokens): attn cannot tokenize text for it")
    try:
        tokenizer, _ = convert_gguf_tokenizer(architecture(gguf), wanted)
    except Exception as exc:  # a stranger's vocabulary transformers cannot build
        raise damaged(gguf.path.name, f"its tokenizer metadata cannot be built ({type(exc).__name__}: "
                                      f"{str(exc)[:120]!r})") from None
    return tokenizer
