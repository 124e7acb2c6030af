"""A text or a word too long to read is refused up front (exit 2, the limit named), on every path
that reads a sentence: word vectors (attn matrix, lookup's queries and keys, whose unknown words
are built from character n-grams: every n-gram row of a word is held at once), and a pretrained
model's tokenizer (--transformer, lens, generate, lookup --encoder).

A sentence of one 2,000,000-letter word ran out of memory (word vectors: 2.5 GB, 32 s) before
these bounds; it now fails in a child process held to 1 GiB of address space, at once.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.errors import BadInput
from attncli.io.textio import MAX_TEXT_CHARS, MAX_WORD_CHARS, check_length, check_word_length

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
MEMORY = 1 << 30
WORD_LIMIT = f"is longer than {MAX_WORD_CHARS:,} characters, the most attn builds a word vector for from its character n-grams"


def flat(text: str) -> str:
    return " ".join(text.split())


def attn_bounded(*argv: str) -> subprocess.CompletedProcess:
    """``attn ARGV`` in a child process held to 1 GiB of address space."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "attncli", *argv], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit, env=env)


def test_the_bounds_and_their_edges():
    assert check_length("a" * MAX_TEXT_CHARS, "the text") == "a" * MAX_TEXT_CHARS
    with pytest.raises(BadInput, match=f"the text is {MAX_TEXT_CHARS + 1:,} characters long, more than the "
                                       f"{MAX_TEXT_CHARS:,} attn reads in one text: shorten it"):
        check_length("a" * (MAX_TEXT_CHARS + 1), "the text")
    assert check_word_length("b" * MAX_WORD_CHARS) == "b" * MAX_WORD_CHARS
    with pytest.raises(BadInput) as refused:
        check_word_length("\x1b" + "b" * MAX_WORD_CHARS)
    message = str(refused.value)
    assert f"({MAX_WORD_CHARS + 1:,} characters)" in message and "\x1b" not in message  # quoted short, escaped


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv", [["matrix"], ["lookup", "--queries"]], ids=["matrix", "lookup-query"])
def test_a_two_million_letter_word_is_refused_at_once_in_bounded_memory(argv, tmp_path):
    text = tmp_path / "word.txt"
    text.write_text("a" * 2_000_000, encoding="utf-8")  # no newline: one 2,000,000-character text
    args = argv + [str(text)] if argv[0] == "lookup" else argv + ["-f", str(text)]
    done = attn_bounded(*args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    said = flat(done.stderr)
    if argv[0] == "matrix":
        assert f"the sentence is 2,000,000 characters long, more than the {MAX_TEXT_CHARS:,} attn reads" in said
    else:
        assert "--queries line 1: the word 'aaaaaaaaaaaaaaaaaaaa'... (2,000,000 characters) " + WORD_LIMIT in said


def test_matrix_refuses_a_word_past_the_bound_and_takes_one_at_it():
    result = runner.invoke(app, ["matrix", "time " + "x" * (MAX_WORD_CHARS + 1), "--json"])
    assert result.exit_code == 2 and WORD_LIMIT in flat(result.output)
    result = runner.invoke(app, ["matrix", "time " + "x" * MAX_WORD_CHARS, "--json"])
    assert result.exit_code == 0, result.output


def test_matrix_refuses_a_text_past_the_bound_before_tokenizing(tmp_path):
    """1,000,001 characters of short words: the text's length is refused, not its tokens counted."""
    path = tmp_path / "long.txt"
    path.write_text("ab " * (MAX_TEXT_CHARS // 3) + "ab", encoding="utf-8")
    assert len(path.read_text()) == MAX_TEXT_CHARS + 1
    for extra in ([], ["--context", "time flies"]):
        result = runner.invoke(app, ["matrix", "-f", str(path), *extra])
        assert result.exit_code == 2
        assert f"the sentence is {MAX_TEXT_CHARS + 1:,} characters long" in flat(result.output)


@pytest.mark.parametrize("where", ["query", "key"])
def test_lookup_refuses_a_word_past_the_bound_in_a_query_or_a_key(where, tmp_path):
    word = "q" * (MAX_WORD_CHARS + 1)
    keys = {"colour": "black", "speed": "fast"}
    if where == "key":
        keys[word] = "long"
    path = tmp_path / "d.json"
    import json

    path.write_text(json.dumps(keys), encoding="utf-8")
    result = runner.invoke(app, ["lookup", word if where == "query" else "color", "--dict", str(path)])
    assert result.exit_code == 2 and WORD_LIMIT in flat(result.output)


def test_the_transformer_paths_refuse_a_text_past_the_bound(tiny_gpt2_dir, tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("a" * (MAX_TEXT_CHARS + 1), encoding="utf-8")
    said = f"the text is {MAX_TEXT_CHARS + 1:,} characters long, more than the {MAX_TEXT_CHARS:,} attn reads in one text"
    result = runner.invoke(app, ["matrix", "-f", str(path), "--transformer", str(tiny_gpt2_dir), "--truncate"])
    assert result.exit_code == 2 and said in flat(result.output)
    from attncli.hf import load

    model = load(str(tiny_gpt2_dir))
    for call in (lambda: model.encode("a" * (MAX_TEXT_CHARS + 1), truncate=True),
                 lambda: model.embed(["a" * (MAX_TEXT_CHARS + 1)])):
        with pytest.raises(BadInput, match=said):
            call()
    assert len(model.encode("a " * 10, truncate=True).ids) > 0
