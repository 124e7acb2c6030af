"""gguf_tokenizer_cache: a GGUF's tokenizer is built once (transformers' builders) and read back
from ATTN_HOME's cache after, with the same ids; another file's metadata builds again; a torn
cache file is built again and rewritten; a cache that cannot be written warns and goes on."""

from __future__ import annotations

import pytest

from _gguf_fixtures import write_gguf
from conftest import needed

TEXTS = ["hello world", "hello there: hell or world of hello", "<|endoftext|>hello"]


@pytest.fixture
def builds(monkeypatch):
    """The files gguf_model's tokenizer builder ran on."""
    needed("transformers")
    needed("gguf")
    from attncli.hf.backends import gguf_model

    built, build = [], gguf_model.tokenizer_of

    def counted(gguf):
        built.append(gguf.path.name)
        return build(gguf)

    monkeypatch.setattr(gguf_model, "tokenizer_of", counted)
    return built


def ids(model) -> list[list[int]]:
    return [model.encode(t).ids for t in TEXTS]


def test_built_once_then_read_back_with_the_same_ids(tmp_path, builds):
    from attncli.env import paths
    from attncli.hf.backends import gguf_model
    from attncli.hf.formats.gguf_file import GGUFFile
    from attncli.hf.loader import load

    path = write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    first, again = load(str(path)), load(str(path))
    assert builds == ["m.gguf"] and len(list((paths.cache_dir() / "gguf-tokenizers").glob("*.json"))) == 1
    built = gguf_model.tokenizer_of(GGUFFile(path))  # the builder itself (transformers'), whichever module holds it
    assert ids(first) == ids(again) == [built.encode(t).ids for t in TEXTS]


def test_other_metadata_builds_again(tmp_path, builds):
    """Two files alike but for one merge: each built, and each splits as its own merges say."""
    from _gguf_fixtures import MERGES
    from attncli.hf.loader import load

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a = write_gguf(tmp_path / "a" / "m.gguf", "llama", "Q8_0")
    b = write_gguf(tmp_path / "b" / "m.gguf", "llama", "Q8_0",
                   meta={"tokenizer.ggml.merges": ([f"{x} {y}" for x, y in MERGES[:2]], "ARRAY")})
    load(str(a)), load(str(b)), load(str(b))
    assert builds == ["m.gguf", "m.gguf"]
    assert ids(load(str(a))) != ids(load(str(b)))  # without "he ll", b cannot make "hell" one token


def test_a_torn_cache_file_is_built_again_and_rewritten(tmp_path, builds):
    from attncli.env import paths
    from attncli.hf.loader import load

    path = write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    want = ids(load(str(path)))
    (cached,) = (paths.cache_dir() / "gguf-tokenizers").glob("*.json")
    whole = cached.read_text()
    cached.write_text(whole[: len(whole) // 2])
    assert ids(load(str(path))) == want and builds == ["m.gguf", "m.gguf"]
    assert cached.read_text() == whole


def test_a_cache_that_cannot_be_written_warns(tmp_path, builds, monkeypatch, capsys):
    from attncli.hf.loader import load

    home = tmp_path / "home"
    home.mkdir()
    (home / "cache").write_text("a file where the cache folder would be")
    monkeypatch.setenv("ATTN_HOME", str(home))
    path = write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    assert ids(load(str(path))) == ids(load(str(path))) and builds == ["m.gguf", "m.gguf"]
    assert "could not keep m.gguf's tokenizer" in capsys.readouterr().err
