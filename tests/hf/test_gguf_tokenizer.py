"""A GGUF's tokenizer metadata means what transformers says (hf/formats/gguf_tokenizer.py): the token ids
of AutoTokenizer.from_pretrained(dir, gguf_file=...) on the same file, for every family attn reads
from GGUF and both kinds of vocabulary llama.cpp's converter writes (byte-level BPE, "gpt2", and
sentencepiece, "llama"), each tokenizer field dropped, set true and set false. Tiny files written
by the gguf package (tests/_gguf_fixtures.py); the real SmolLM2 and Gemma 3 files: tests/real/."""

from __future__ import annotations

import pytest

from _gguf_fixtures import _byte_tokens, sentencepiece_meta, write_gguf
from conftest import needed

FAMILIES = ["llama", "mistral", "qwen2", "phi3", "gpt2", "gemma3"]
VOCABS = ["gpt2", "llama"]  # tokenizer.ggml.model: byte-level BPE, sentencepiece
SETTINGS = {"dropped": None, "true": True, "false": False}
TEXTS = ["hello world, or hell", " hello  world", "<s>or</s>", "<|endoftext|>he"]
PAIR = ("hello", "or world")
VOCAB = len(_byte_tokens())  # the fixtures' embedding rows


def _file(tmp_path, family: str, vocab: str, meta: dict | None = None, user_defined: str | None = None):
    given = sentencepiece_meta(VOCAB, user_defined=user_defined) if vocab == "llama" else {}
    return write_gguf(tmp_path / "m.gguf", family, layers=1, meta=given | (meta or {}))


def _both(path):
    """(attn's tokenizer, transformers') of one GGUF file."""
    needed("gguf")
    transformers = needed("transformers")
    from attncli.hf.formats.gguf_file import GGUFFile
    from attncli.hf.formats.gguf_tokenizer import tokenizer_of

    theirs = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return tokenizer_of(GGUFFile(path)), theirs


def _same_ids(ours, theirs, texts=TEXTS) -> list[list[int]]:
    got = []
    for text in texts:
        assert ours.encode(text).ids == theirs(text).input_ids, text
        got.append(ours.encode(text).ids)
    assert ours.encode(*PAIR).ids == theirs(*PAIR).input_ids
    return got


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("field", ["add_bos_token", "add_eos_token"])
def test_bos_and_eos_as_the_file_says(tmp_path, field, family, vocab, setting):
    """BOS before and EOS after each text as add_bos_token / add_eos_token say; dropped, a
    sentencepiece vocabulary adds BOS (llama.cpp's default, and transformers') and a byte-level
    one adds neither."""
    value = SETTINGS[setting]
    path = _file(tmp_path, family, vocab, {f"tokenizer.ggml.{field}": None if value is None else (value, "BOOL")})
    ours, theirs = _both(path)
    ids = _same_ids(ours, theirs)[0]
    bos, eos = (1, 2) if vocab == "llama" else (VOCAB - 1, VOCAB - 1)
    wants_bos = value if field == "add_bos_token" and value is not None else vocab == "llama"
    wants_eos = field == "add_eos_token" and bool(value)
    assert (ids[0] == bos) == wants_bos and (ids[-1] == eos) == wants_eos, ids


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("family", ["llama", "phi3", "gpt2"])
def test_space_prefix_as_transformers(tmp_path, family, vocab, setting):
    """add_space_prefix: transformers' builders decide the prefix space by vocabulary and family
    (Llama's sentencepiece puts "\u2581" before a text), whatever the flag; so does attn."""
    value = SETTINGS[setting]
    meta = {"tokenizer.ggml.add_space_prefix": None if value is None else (value, "BOOL")}
    ours, theirs = _both(_file(tmp_path, family, vocab, meta))
    _same_ids(ours, theirs, TEXTS + ["hello", "  or"])


# merges that cross where one split regex cuts and another does not: digits kept together (GPT-2),
# by three (llama-bpe), one by one (qwen2); "!" glued to the letters after it (llama-bpe, qwen2)
SPLIT_MERGES = [("1", "2"), ("2", "3"), ("\u0120", "1"), ("!", "h"), ("h", "e")]


@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2", "smollm", "gpt-4o", "dropped"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_pre_tokenizer_splits_as_transformers(tmp_path, family, pre):
    """tokenizer.ggml.pre picks the split regex of a byte-level vocabulary (digits by 1..3 for
    llama-bpe, one by one for qwen2; an unknown name such as smollm, or none, keeps GPT-2's)."""
    tokens = _byte_tokens()[:256] + [a + b for a, b in SPLIT_MERGES] + ["<|endoftext|>"]  # as many as the fixture's
    meta = {"tokenizer.ggml.pre": None if pre == "dropped" else (pre, "STRING"),
            "tokenizer.ggml.tokens": (tokens, "ARRAY"),
            "tokenizer.ggml.merges": ([f"{a} {b}" for a, b in SPLIT_MERGES], "ARRAY"),
            "tokenizer.ggml.token_type": ([1] * (len(tokens) - 1) + [3], "ARRAY")}
    ours, theirs = _both(_file(tmp_path, family, "gpt2", meta))
    ids = _same_ids(ours, theirs, TEXTS + ["a12345 b", " 123", "!hello", "a\n\n  c's"])
    gpt2_split = pre not in ("llama-bpe", "qwen2", "gpt-4o")
    assert (tokens.index("!h") in ids[-2]) != gpt2_split, ids[-2]


@pytest.mark.parametrize("vocab", VOCABS)
def test_control_and_user_defined_tokens_stay_whole(tmp_path, vocab):
    """A CONTROL token (<|endoftext|>, <s>) and a USER_DEFINED one (<think>) are matched whole in a
    text, as llama.cpp and transformers match them."""
    ours, theirs = _both(_file(tmp_path, "llama", vocab, user_defined="<think>"))
    texts = ["he<think>or", "<s>hello</s>", "<|endoftext|>or"]
    _same_ids(ours, theirs, texts)
    if vocab == "llama":
        think = ours.token_to_id("<think>")
        assert think in ours.encode("he<think>or").ids and ours.encode("<s>hello").ids[:2] == [1, 1]
    else:
        assert ours.encode("<|endoftext|>or").ids[0] == VOCAB - 1


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("role", ["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"])
def test_named_special_token_stays_whole(tmp_path, role, vocab):
    """The token the file names as BOS, EOS, unknown or padding is special in transformers even when
    not marked CONTROL: matched whole, so "ll" named so is one token in "all ll"."""
    tokens = sentencepiece_meta(VOCAB)["tokenizer.ggml.tokens"][0] if vocab == "llama" else _byte_tokens()
    ll = tokens.index("ll")
    ours, theirs = _both(_file(tmp_path, "phi3", vocab, {f"tokenizer.ggml.{role}": (ll, "UINT32")}))
    ids = _same_ids(ours, theirs, ["all ll", "hello world"])
    added = role == "bos_token_id" and vocab == "llama"  # and put first: a sentencepiece vocabulary adds BOS
    assert ids[0].count(ll) == 2 + added, ids[0]


def test_the_tokenizer_is_built_once_per_vocabulary(tmp_path, monkeypatch, attn_home):
    """The GGUF model keeps the tokenizer it built under $ATTN_HOME/cache (gguf_tokenizer_cache), keyed
    by the metadata: the same file reads it back (no build), a file whose add_bos_token differs is
    built anew, and a damaged entry is built again, never trusted."""
    needed("gguf")
    from attncli.hf.formats import gguf_tokenizer
    from attncli.hf.formats.gguf_file import GGUFFile
    from attncli.hf.formats.gguf_tokenizer_cache import cached_tokenizer

    def kept_tokenizer(path):
        return cached_tokenizer(GGUFFile(path), gguf_tokenizer.tokenizer_of)

    first = _file(tmp_path, "llama", "llama")
    want = kept_tokenizer(first).encode("hello world").ids
    kept = list((attn_home / "cache" / "gguf-tokenizers").iterdir())
    assert len(kept) == 1 and want[0] == 1
    built = gguf_tokenizer.build
    monkeypatch.setattr(gguf_tokenizer, "build", lambda *a: pytest.fail("built again: the kept one was not read"))
    assert kept_tokenizer(first).encode("hello world").ids == want
    monkeypatch.setattr(gguf_tokenizer, "build", built)
    other = write_gguf(tmp_path / "other.gguf", "llama", layers=1, meta=sentencepiece_meta(VOCAB)
                       | {"tokenizer.ggml.add_bos_token": (False, "BOOL")})
    assert kept_tokenizer(other).encode("hello world").ids == want[1:]
    kept[0].write_text("{not json")
    assert kept_tokenizer(first).encode("hello world").ids == want
    monkeypatch.setattr(gguf_tokenizer, "build", built)
    other = write_gguf(tmp_path / "other.gguf", "llama", layers=1, meta=sentencepiece_meta(VOCAB)
                       | {"tokenizer.ggml.add_bos_token": (False, "BOOL")})
    assert gguf_tokenizer.tokenizer_of(GGUFFile(other)).encode("hello world").ids == want[1:]
    kept[0].write_text("{not json")
    assert gguf_tokenizer.tokenizer_of(GGUFFile(first)).encode("hello world").ids == want
