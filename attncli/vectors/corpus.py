"""Training corpora: the Brown corpus through nltk (cached, tokenized), or a user's UTF-8 text.

Both go through the one tokenization (:mod:`attncli.vectors.tokenize`): Brown's own tokens through
``normalize_sentence``, a user's lines through ``tokenize``. Sentences left with no token are
dropped.

Brown is read through nltk once (about 4 s) and cached under ``paths.cache_dir()`` as plain
UTF-8 text, one sentence per line, tokens separated by single spaces (tokens never contain
whitespace). The cache file name carries the categories and ``TOKENIZER_VERSION``, so a change
of either reads Brown again; it is written to a temporary file and moved into place with
``os.replace``, so a crash never leaves half a cache. A cache not exactly in that form (torn,
or edited: an empty line, a double space, a tab) is ignored and rewritten. The corpus checksum
is the SHA-256 of that token stream (the cache file's bytes), so it names exactly what a model
was trained on.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attncli.env import paths
from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import atomic_writer
from attncli.io.messages import info, warn
from attncli.io.textio import read_user_text
from attncli.vectors.safeio import FileProblem, read_text
from attncli.vectors.tokenize import TOKENIZER_VERSION, normalize_sentence, tokenize

BROWN_URL_HINT = (
    "set NLTK_DATA to a directory that holds corpora/brown.zip, "
    "or run 'python -m nltk.downloader brown' on a machine with internet access"
)


@dataclass
class Corpus:
    """Tokenized sentences plus a description of where they came from (stored in model metadata)."""

    sentences: list[list[str]]
    source: str  # "brown" or the user file's path
    categories: list[str] | None = None  # Brown categories, None = all of them
    sha256: str = ""  # of the token stream: sentences joined by "\n", tokens by " ", UTF-8
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.sentences)

    def describe(self) -> dict[str, Any]:
        """What goes into meta.json's ``corpus`` field."""
        return {
            "source": self.source,
            "categories": self.categories,
            "sentences": len(self.sentences),
            "tokens": self.n_tokens,
            "sha256": self.sha256,
            "tokenizer_version": TOKENIZER_VERSION,
            **self.extra,
        }

    def label(self) -> str:
        """A short human label: ``brown``, ``brown:news,fiction`` or the file name."""
        if self.source == "brown":
            text = "brown" + (":" + ",".join(self.categories) if self.categories else "")
        else:
            text = Path(self.source).name
        if self.extra.get("max_sentences"):
            text += f" (first {len(self.sentences)} sentences)"
        return text


def token_stream_sha256(sentences: list[list[str]]) -> str:
    import hashlib

    h = hashlib.sha256()
    for s in sentences:
        h.update((" ".join(s) + "\n").encode("utf-8"))
    return h.hexdigest()


def load_corpus(
    *,
    corpus_path: Path | str | None = None,
    categories: list[str] | None = None,
    max_sentences: int | None = None,
) -> Corpus:
    """The training corpus: the user's file if given, else Brown (all or some categories)."""
    if max_sentences is not None and max_sentences < 1:
        raise BadInput(f"--max-sentences must be at least 1, got {max_sentences}")
    if corpus_path is not None:
        if categories:
            raise BadInput("--categories selects parts of Brown; it cannot be used with --corpus")
        corpus = read_text_corpus(Path(corpus_path))
    else:
        corpus = load_brown(categories)
    if max_sentences is not None and max_sentences < len(corpus.sentences):
        corpus.sentences = corpus.sentences[:max_sentences]
        corpus.sha256 = token_stream_sha256(corpus.sentences)
        corpus.extra["max_sentences"] = max_sentences
    return corpus


# -- a user's text file -------------------------------------------------------------------------


MAX_CORPUS_BYTES = 2**30  # 1 GiB of text (Brown is 6 MB)
MAX_SENTENCE_TOKENS = 10_000  # gensim trains on at most this many tokens of one sentence (MAX_WORDS_IN_BATCH)


def _sentences(lines, source: str) -> list[list[str]]:
    """The tokens of each non-empty line; a line longer than gensim's limit is split into pieces
    of at most ``MAX_SENTENCE_TOKENS`` tokens (gensim would silently drop the rest), with a warning."""
    sentences: list[list[str]] = []
    split = 0
    for line in lines:
        toks = tokenize(line)
        if len(toks) > MAX_SENTENCE_TOKENS:
            split += 1
            sentences += [toks[i : i + MAX_SENTENCE_TOKENS] for i in range(0, len(toks), MAX_SENTENCE_TOKENS)]
        elif toks:
            sentences.append(toks)
    if split:
        warn(f"{split:,} line(s) of {source} have more than {MAX_SENTENCE_TOKENS:,} tokens, the most gensim trains "
             f"on in one sentence: each was split into pieces of {MAX_SENTENCE_TOKENS:,} tokens (nothing is dropped; "
             "a context window does not cross a cut)")
    return sentences


def read_text_corpus(path: Path) -> Corpus:
    """One sentence per non-empty line of a UTF-8 text file, tokenized with ``tokenize``."""
    hint = "give a UTF-8 text file, one sentence per line (convert others, e.g. 'iconv -f latin1 -t utf-8')"
    text = read_user_text(path, "corpus file", hint=hint, limit=MAX_CORPUS_BYTES, binary_check=True)
    if not text.strip():
        raise BadInput(f"corpus file {path} is empty: give a UTF-8 text file, one sentence per line")
    sentences = _sentences(text.splitlines(), str(path))
    if not sentences:
        raise BadInput(f"corpus file {path} has no words (letters or digits) in it")
    return Corpus(sentences, source=str(path), sha256=token_stream_sha256(sentences))


# -- Brown ----------------------------------------------------------------------------------------


def _cache_path(categories: list[str] | None) -> Path:
    key = "all" if not categories else "+".join(categories)
    return paths.cache_dir() / f"brown-{key}-tok{TOKENIZER_VERSION}.txt"


def load_brown(categories: list[str] | None = None) -> Corpus:
    """Brown, all of it or the named categories (in Brown's own order), tokenized; cached."""
    if categories is not None:
        categories = sorted(set(c.strip() for c in categories if c.strip())) or None
    cache = _cache_path(categories)
    sentences = _read_cache(cache)  # a cache hit needs no nltk at all
    if sentences is None:
        if categories:
            _check_categories(categories)
        sentences = _read_brown(categories)
        _write_cache(cache, sentences)
    return Corpus(sentences, source="brown", categories=categories, sha256=token_stream_sha256(sentences))


# Whitespace other than the separators: a token never holds any (tokenize splits on it).
_FOREIGN_SPACE = re.compile(r"[^\S \n]")


def _read_cache(cache: Path) -> list[list[str]] | None:
    """The cached sentences, or None (read Brown again) if the file is missing or not as we write it.

    We write one sentence per line, each ending with a newline, tokens joined by single spaces;
    tokens and sentences are never empty and hold no whitespace. A file that breaks any of these
    rules (torn, edited, damaged) would give empty words or the wrong token stream (and checksum),
    so it is ignored and rewritten.
    """
    try:  # a regular file of bounded size only: a FIFO or /dev/zero in its place is ignored, never read
        text = read_text(cache, MAX_CORPUS_BYTES)  # no newline translation: a CR is not ours either
    except FileProblem:
        return None
    if not text.endswith("\n"):
        return None  # torn: ours always end with a newline
    body = text[:-1]
    if (
        not body
        or body[0] in " \n"
        or body[-1] == " "
        or any(pair in body for pair in ("  ", "\n\n", " \n", "\n "))
        or _FOREIGN_SPACE.search(body)
    ):
        return None  # an empty sentence or token, or a stray space, tab or CR: not as we write it
    return [line.split(" ") for line in body.split("\n")]


def _write_cache(cache: Path, sentences: list[list[str]]) -> None:
    """Atomic (:func:`attncli.io.fileio.atomic_writer`). A failure only warns."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(cache) as fh:
            fh.write("".join(" ".join(s) + "\n" for s in sentences).encode("utf-8"))
    except OSError as exc:
        warn(f"could not cache the tokenized corpus in {cache.parent} ({exc}); the next training reads Brown again")


def _nltk_paths() -> None:
    """nltk reads $NLTK_DATA only when first imported: honour a value set later, too."""
    import nltk

    for entry in reversed([p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]):
        if entry not in nltk.data.path:
            nltk.data.path.insert(0, entry)


def brown_installed() -> bool:
    """Whether nltk can find Brown (zipped or unpacked) without downloading it."""
    import nltk

    _nltk_paths()
    for resource in ("corpora/brown.zip/brown/", "corpora/brown"):
        try:
            nltk.data.find(resource)
            return True
        except LookupError:
            pass
    return False


def _brown_reader():
    """A fresh Brown corpus reader (not nltk.corpus.brown, which remembers a failed lookup)."""
    from nltk.corpus.reader import CategorizedTaggedCorpusReader
    from nltk.corpus.util import LazyCorpusLoader

    _nltk_paths()
    loader = LazyCorpusLoader(
        "brown", CategorizedTaggedCorpusReader, r"c[a-z]\d\d", cat_file="cats.txt", tagset="brown", encoding="ascii"
    )
    try:
        loader.categories()  # forces the lookup
    except LookupError:
        loader = None
    if loader is None:
        loader = download_brown()
    return loader


def download_brown():
    """Brown fetched with nltk's downloader (said on stderr) and its reader; RuntimeFailure when that fails."""
    import nltk

    info("The Brown corpus is not installed: downloading it with nltk's downloader (about 3 MB)...")
    try:
        ok = nltk.download("brown", quiet=True, raise_on_error=False)
    except Exception:  # noqa: BLE001 - any network or disk failure means the same to the user
        ok = False
    if ok:
        from nltk.corpus.reader import CategorizedTaggedCorpusReader
        from nltk.corpus.util import LazyCorpusLoader

        loader = LazyCorpusLoader(
            "brown", CategorizedTaggedCorpusReader, r"c[a-z]\d\d", cat_file="cats.txt", tagset="brown", encoding="ascii"
        )
        try:
            loader.categories()
            return loader
        except LookupError:
            pass
    raise RuntimeFailure(f"the Brown corpus is not installed and could not be downloaded (offline?): {BROWN_URL_HINT}")


def brown_categories() -> list[str]:
    return list(_brown_reader().categories())


def _check_categories(categories: list[str]) -> None:
    known = brown_categories()
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise BadInput(
            f"unknown Brown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))}: "
            f"choose from {', '.join(known)}"
        )


def _read_brown(categories: list[str] | None) -> list[list[str]]:
    reader = _brown_reader()
    info("Reading and tokenizing the Brown corpus (once; it is cached for the next training)...")
    raw = reader.sents(categories=categories) if categories else reader.sents()
    return [toks for sent in raw if (toks := normalize_sentence(sent))]
