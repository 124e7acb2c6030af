"""Property tests over hostile input: whatever a user types, attn answers with exit 0, 1 or 2,
never a traceback, and whatever --json prints parses as strict JSON (no NaN, no Infinity)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attncli.cli.main import app

runner = CliRunner()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

text = st.text(max_size=40)
# user text is passed after "--": a word such as "-h" is otherwise an option (as for any command line)
words = st.text(alphabet=st.characters(categories=["L", "N", "P", "Zs", "S"]), min_size=0, max_size=60)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


def _strict_json(s: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(s, parse_constant=refuse)


def check(result, *, json_lines: bool = False) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stdout and "Traceback" not in result.stderr
    if result.exit_code == 0 and result.stdout.strip():
        if json_lines:
            for line in result.stdout.split("\n"):  # JSON Lines end at \n only: a U+0085 or U+2028
                if line:  # inside a string is text (str.splitlines would cut there)
                    _strict_json(line)
        else:
            _strict_json(result.stdout)
    if result.exit_code != 0:
        assert result.stderr.strip(), "a failure must say why on stderr"
    # a bug reaches the user as "internal error ... This is a bug in attn" with exit 1: whatever
    # the exit code, that (or a traceback) is a failure of the test, never an accepted answer
    said = " ".join(result.stderr.split())
    assert "internal error" not in said and "bug in attn" not in said, said[:2000]
    if result.exit_code == 1:  # a runtime failure is a message of a known kind: "error: ..."
        assert said.startswith("error: "), said[:2000]


@SETTINGS
@given(query=words, temperature=st.floats(allow_nan=True, allow_infinity=True) | st.just(0.1), top_k=st.integers(-3, 6))
def test_lookup_any_query(query, temperature, top_k):
    result = runner.invoke(app, ["lookup", "--json", "--temperature", repr(temperature), "--top-k", str(top_k), "--", query])
    check(result)


@SETTINGS
@given(dictionary=st.dictionaries(text, json_values, max_size=6), query=words)
def test_lookup_any_dictionary(tmp_path_factory, dictionary, query):
    path = tmp_path_factory.mktemp("d") / "d.json"
    path.write_text(json.dumps(dictionary), encoding="utf-8")
    check(runner.invoke(app, ["lookup", "--dict", str(path), "--json", "--", query or "x"]))


@SETTINGS
@given(raw=st.binary(max_size=80))
def test_lookup_any_bytes_as_dictionary(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("d") / "d.json"
    path.write_bytes(raw)
    check(runner.invoke(app, ["lookup", "colour", "--dict", str(path), "--json"]))


@SETTINGS
@given(queries=st.lists(words, max_size=5))
def test_lookup_batch(queries):
    result = runner.invoke(app, ["lookup", "--queries", "-", "--json"], input="\n".join(queries))
    check(result, json_lines=True)


VARIANT_NAMES = ["dot", "scaled", "additive", "multiplicative", "cosine", "multihead", "relative", "local", "nope"]


@SETTINGS
@given(
    sentence=words,
    variant=st.sampled_from(VARIANT_NAMES),
    causal=st.booleans(),
    window=st.none() | st.integers(-2, 5),
    pad_to=st.none() | st.integers(-1, 12),
    heads=st.none() | st.integers(-1, 7),
    show=st.sampled_from(["weights", "scores", "output"]),
)
def test_matrix_any_sentence_and_options(sentence, variant, causal, window, pad_to, heads, show):
    argv = ["matrix", "--variant", variant, "--show", show, "--json"]
    if causal:
        argv.append("--causal")
    if window is not None:
        argv += ["--window", str(window)]
    if pad_to is not None:
        argv += ["--pad-to", str(pad_to)]
    if heads is not None:
        argv += ["--heads", str(heads)]
    check(runner.invoke(app, argv + ["--", sentence]))


@SETTINGS
@given(sentence=words, context=words, i=st.integers(-2, 8), j=st.integers(-2, 8))
def test_matrix_cross_attention_and_explain(sentence, context, i, j):
    check(runner.invoke(app, ["matrix", "--context", context, "--json", "--", sentence]))
    result = runner.invoke(app, ["matrix", "--explain", str(i), str(j), "--", sentence])
    assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output
    assert "internal error" not in " ".join(result.stderr.split()), result.stderr[:2000]


@SETTINGS
@given(ws=st.lists(words, min_size=1, max_size=4), k=st.integers(-2, 30))
def test_similar_any_words(ws, k):
    result = runner.invoke(app, ["similar", "-k", str(k), "--json", "--", *ws])
    check(result, json_lines=True)


@pytest.mark.parametrize("argv", [["demo", "--json"], ["variants", "--json"], ["models", "--json"]])
def test_fixed_commands_print_strict_json(argv):
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    _strict_json(result.stdout)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corpus=st.text(max_size=300), dim=st.integers(-1, 8), epochs=st.integers(-1, 2))
def test_train_any_corpus_and_numbers(tmp_path_factory, corpus, dim, epochs):
    path = tmp_path_factory.mktemp("c") / "corpus.txt"
    path.write_text(corpus, encoding="utf-8")
    argv = ["train", "--corpus", str(path), "--dim", str(dim), "--epochs", str(epochs), "--min-count", "1", "--name", "prop", "--json"]
    check(runner.invoke(app, argv))
