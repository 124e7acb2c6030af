"""The tokenizer of a GGUF file: the ``tokenizers.Tokenizer`` transformers builds from its
tokenizer.ggml.* metadata, so a GGUF's token ids are transformers' for the same file
(``AutoTokenizer.from_pretrained(dir, gguf_file=...)``).

What each field means, as transformers reads it (integrations/gguf/gguf_tokenizer_mapping.py and
TokenizersBackend.__init__), which is llama.cpp's meaning where the two agree:

- ``model`` ("gpt2" byte-level BPE, "llama" sentencepiece, "t5" unigram) and the architecture
  choose the builder (Gemma's and Phi-3's sentencepiece have their own); ``pre`` chooses the
  split regex of a byte-level vocabulary (llama-bpe, qwen2, ...; an unknown one keeps GPT-2's);
- tokens marked CONTROL (3) are special, USER_DEFINED (4) added, both matched whole in the text;
  the BOS, EOS, unknown and padding tokens are special too, whatever their mark;
- ``add_bos_token`` / ``add_eos_token``: the BOS / EOS token put around every text. Absent, a
  sentencepiece ("llama") vocabulary adds BOS (llama.cpp's default), and another keeps its
  builder's post-processor (none for byte-level BPE);
- ``add_space_prefix``: read by neither transformers' builders nor here: a sentencepiece
  vocabulary's own builder decides (Llama's adds "\u2581" before the text, Gemma's does not), as in
  transformers. llama.cpp honours the flag, so a file that contradicts its builder (rare) is
  split as transformers splits it.
"""

from __future__ import annotations

from typing import Any

from attncli.errors import BadInput
from attncli.hf.checks.config_check import damaged
from attncli.hf.formats.gguf_file import GGUFFile
from attncli.hf.formats.gguf_reader import architecture

# tokenizer.ggml.<key> -> the special token it names (transformers' _SPECIAL_TOKENS)
NAMED_SPECIALS = {"bos_token_id": "bos", "eos_token_id": "eos", "unknown_token_id": "unk",
                  "padding_token_id": "pad"}


def tokenizer_of(gguf: GGUFFile) -> Any:
    """The ``tokenizers.Tokenizer`` transformers builds from the file's tokenizer.ggml.* metadata
    (transformers' integrations.gguf builders: the vocabulary, merges and special tokens), with
    BOS / EOS added as the file's add_bos_token / add_eos_token say. gguf_model keeps what it
    builds (gguf_tokenizer_cache: keyed by the metadata and by this file's source)."""
    return build(architecture(gguf), gguf.metadata, gguf.path.name)


def build(arch: str, meta: dict[str, Any], name: str) -> Any:
    """The tokenizer of a file ``name`` of architecture ``arch`` whose metadata is ``meta`` (checked
    by gguf_check)."""
    from transformers.integrations.gguf import convert_gguf_tokenizer
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    wanted = {field: meta["tokenizer." + key] for key, field in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
              if "tokenizer." + key in meta}
    tokens = wanted.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise BadInput(f"{name} carries no tokenizer (tokenizer.ggml.tokens): attn cannot tokenize text for it")
    try:
        tokenizer, _ = convert_gguf_tokenizer(arch, wanted)
        specials = _named_specials(meta, tokens)
        _add_specials(tokenizer, specials)
        added = _added_around(meta, wanted.get("tokenizer_type"))
        if added is not None:
            _post_process(tokenizer, tokens, specials, *added)
    except Exception as exc:  # a stranger's vocabulary transformers cannot build
        raise damaged(name, f"its tokenizer metadata cannot be built ({type(exc).__name__}: "
                            f"{str(exc)[:120]!r})") from None
    return tokenizer


def _named_specials(meta: dict[str, Any], tokens: list[str]) -> dict[str, int]:
    """bos / eos / unk / pad -> the token id the file names for it (ids past the vocabulary left out)."""
    found = {}
    for key, role in NAMED_SPECIALS.items():
        at = meta.get(f"tokenizer.ggml.{key}")
        if isinstance(at, int) and not isinstance(at, bool) and 0 <= at < len(tokens):
            found[role] = at
    return found


def _add_specials(tokenizer: Any, specials: dict[str, int]) -> None:
    """The named special tokens matched whole in a text, as transformers' TokenizersBackend adds
    those its added vocabulary lacks (AddedToken, special)."""
    from tokenizers import AddedToken

    have = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    vocab = tokenizer.get_vocab()
    words = [tokenizer.id_to_token(at) for at in dict.fromkeys(specials.values())]
    missing = [AddedToken(w, special=True) for w in words if w is not None and w not in have and w in vocab]
    if missing:
        tokenizer.add_tokens(missing)


def _added_around(meta: dict[str, Any], model: Any) -> tuple[bool, bool] | None:
    """(add BOS, add EOS) as the file asks, with transformers' default (a sentencepiece vocabulary
    adds BOS); None: the file says nothing and the builder's post-processor stays."""
    said = {key: meta[f"tokenizer.ggml.{key}"] for key in ("add_bos_token", "add_eos_token")
            if f"tokenizer.ggml.{key}" in meta}
    if model == "llama":
        said.setdefault("add_bos_token", True)
    if not said:
        return None
    return bool(said.get("add_bos_token", False)), bool(said.get("add_eos_token", False))


def _post_process(tokenizer: Any, tokens: list[str], specials: dict[str, int], bos: bool, eos: bool) -> None:
    """BOS before and EOS after each text (and each of a pair), as transformers' update_post_processor."""
    from tokenizers import processors

    bos, eos = bos and "bos" in specials, eos and "eos" in specials
    b = tokens[specials["bos"]] if bos else ""
    e = tokens[specials["eos"]] if eos else ""
    single = f"{b + ':0 ' if bos else ''}$A:0{' ' + e + ':0' if eos else ''}"
    pair = f"{single}{' ' + b + ':1' if bos else ''} $B:1{' ' + e + ':1' if eos else ''}"
    pairs = ([(b, specials["bos"])] if bos else []) + ([(e, specials["eos"])] if eos else [])
    tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=pairs)
