"""The training corpus: Brown through nltk with its cache, a user's text file, and their errors."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from attncli.vectors import corpus

from attncli.env import paths
from attncli.cli.main import app
from attncli.errors import BadInput
from attncli.vectors.tokenize import TOKENIZER_VERSION, normalize_sentence, tokenize

runner = CliRunner()


@pytest.fixture
def brown():
    """Skip (do not try to download) when the Brown corpus is not installed; fail under CI."""
    from conftest import skip_without_brown

    skip_without_brown()


needs_brown = pytest.mark.usefixtures("brown")


# -- user text files ------------------------------------------------------------------------------


def test_text_file_one_sentence_per_nonempty_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("The cat sat.\n\n   \nDon't stop -- U.S. 3.5 ÉCOLE!\n", encoding="utf-8")
    c = corpus.load_corpus(corpus_path=path)
    assert c.sentences == [tokenize("The cat sat."), tokenize("Don't stop -- U.S. 3.5 ÉCOLE!")]
    assert c.sentences[1] == ["don't", "stop", "u", "s", "3", "5", "école"]
    assert c.n_tokens == 10
    assert c.source == str(path)
    assert c.sha256 == corpus.token_stream_sha256(c.sentences)


def test_text_file_with_bom_and_crlf(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffone two\r\nthree\r\n".encode("utf-8"))
    assert corpus.load_corpus(corpus_path=path).sentences == [["one", "two"], ["three"]]


def test_max_sentences_cuts_and_rehashes(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b\nc d\ne f\n", encoding="utf-8")
    full = corpus.load_corpus(corpus_path=path)
    cut = corpus.load_corpus(corpus_path=path, max_sentences=2)
    assert cut.sentences == full.sentences[:2]
    assert cut.sha256 != full.sha256
    with pytest.raises(BadInput, match="--max-sentences"):
        corpus.load_corpus(corpus_path=path, max_sentences=0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b" \n\n\t\n", "is empty"),
        (b"hello\x00world\n", "binary (NUL byte at byte offset 5)"),
        (b"good line\ncaf\xe9 au lait\n", "not UTF-8 text (byte 0xe9 at byte offset 13)"),
        (b"-- ... !!!\n", "has no words"),
    ],
)
def test_bad_text_files(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(BadInput) as info:
        corpus.load_corpus(corpus_path=path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_directory_is_not_a_corpus(tmp_path):
    with pytest.raises(BadInput, match="is a directory"):
        corpus.load_corpus(corpus_path=tmp_path)


def test_categories_with_a_user_corpus_is_refused(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b\n", encoding="utf-8")
    with pytest.raises(BadInput, match="--categories"):
        corpus.load_corpus(corpus_path=path, categories=["news"])


# -- Brown ----------------------------------------------------------------------------------------


@needs_brown
def test_brown_category_tokenized_and_cached(monkeypatch):
    c = corpus.load_corpus(categories=["news"])
    assert c.source == "brown" and c.categories == ["news"]
    reader = corpus._brown_reader()
    raw = reader.sents(categories=["news"])
    expected = [t for t in (normalize_sentence(s) for s in raw) if t]
    assert c.sentences == expected
    assert all(t == t.lower() and t for s in c.sentences for t in s)
    cache = paths.cache_dir() / f"brown-news-tok{TOKENIZER_VERSION}.txt"
    assert cache.is_file()
    assert cache.read_text(encoding="utf-8") == "".join(" ".join(s) + "\n" for s in expected)
    assert c.sha256 == corpus.token_stream_sha256(expected)

    # The second load reads the cache alone: nltk must not be touched at all.
    def boom(*a, **k):
        raise AssertionError("Brown was read again despite the cache")

    monkeypatch.setattr(corpus, "_brown_reader", boom)
    again = corpus.load_corpus(categories=["news"])
    assert again.sentences == expected and again.sha256 == c.sha256


@needs_brown
def test_categories_are_order_and_duplicate_insensitive():
    a = corpus.load_corpus(categories=["romance", "humor"], max_sentences=50)
    b = corpus.load_corpus(categories=["humor", "romance", "humor"], max_sentences=50)
    assert a.categories == b.categories == ["humor", "romance"]
    assert a.sentences == b.sentences


@needs_brown
def test_unknown_category_names_the_choices():
    with pytest.raises(BadInput) as info:
        corpus.load_corpus(categories=["news", "poetry"])
    assert "'poetry'" in str(info.value) and "fiction" in str(info.value)


@needs_brown
def test_torn_cache_is_ignored_and_rewritten():
    cache = paths.cache_dir() / f"brown-humor-tok{TOKENIZER_VERSION}.txt"
    cache.parent.mkdir(parents=True)
    cache.write_text("half a sente", encoding="utf-8")  # no final newline: not ours
    c = corpus.load_corpus(categories=["humor"])
    assert len(c.sentences) > 900
    assert cache.read_text(encoding="utf-8").endswith("\n")


def test_nltk_data_set_after_import_is_honoured(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))
    monkeypatch.setenv("NLTK_DATA", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    corpus._nltk_paths()
    assert nltk.data.path[:2] == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_missing_brown_download_fails_names_both_ways_out(tmp_path, monkeypatch):
    """Brown nowhere and the downloader offline: exit 1, and the message says what to do."""
    import nltk

    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    calls = []

    def offline(*args, **kwargs):
        calls.append(args)
        return False

    monkeypatch.setattr(nltk, "download", offline)
    result = runner.invoke(app, ["train", "--max-sentences", "10"])
    assert result.exit_code == 1, result.output
    assert calls == [("brown",)]
    flat = " ".join(result.stderr.split())  # rich wraps long lines
    assert "downloading it with nltk" in flat
    assert "NLTK_DATA" in flat and "python -m nltk.downloader brown" in flat
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (paths.models_dir()).exists() or not any(paths.models_dir().iterdir())


# -- the shared tokenizer -------------------------------------------------------------------------


@pytest.mark.parametrize("text,tokens", [
    ("Time flies, like an ARROW!", ["time", "flies", "like", "an", "arrow"]),
    ("don’t self-confidence 3.5 U.S.", ["don't", "self-confidence", "3", "5", "u", "s"]),
    ("nai\u0308ve", ["naïve"]),  # decomposed (NFD, as macOS often writes it) == composed
    ("naïve café", ["naïve", "café"]),
    ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # vowel signs are combining marks: they stay in their word
    ("\u0301abc", ["abc"]),  # a mark with no letter before it starts nothing
    ("über-groß", ["über-groß"]),
])
def test_tokenize(text, tokens):
    assert tokenize(text) == tokens


def test_non_ascii_rule_equals_the_ascii_rule_on_ascii_text():
    from attncli.vectors.tokenize import _TOKEN_RE, _unicode_token_re

    text = "It's a self-made, 2-for-1 deal -- isn't it? U.S.A. 3.14 o'clock' -x- ''"
    assert [m.group(0) for m in _unicode_token_re().finditer(text)] == [m.group(0) for m in _TOKEN_RE.finditer(text)]


def test_the_tests_fetch_a_missing_brown_once_and_skip_outside_ci_when_they_cannot(monkeypatch):
    """conftest.skip_without_brown: Brown missing, nltk's downloader is tried once per session; when
    it fails the test skips outside CI and fails under CI; when it works the test runs."""
    import nltk

    import conftest

    calls = []
    monkeypatch.setattr(corpus, "brown_installed", lambda: bool(calls) and calls[-1] == "works")
    monkeypatch.setattr(conftest, "_BROWN", {})
    monkeypatch.setattr(nltk, "download", lambda *args, **kwargs: calls.append("offline") or False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="could not be downloaded"):
        conftest.skip_without_brown()
    with pytest.raises(pytest.skip.Exception):
        conftest.skip_without_brown()
    assert calls == ["offline"]  # once per session
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the Brown tests"):
        conftest.skip_without_brown()
    monkeypatch.setattr(conftest, "_BROWN", {})
    monkeypatch.setattr(nltk, "download", lambda *args, **kwargs: calls.append("works") or True)
    conftest.skip_without_brown()  # fetched: the test goes on
    assert calls == ["offline", "works"]
