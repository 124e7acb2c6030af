"""The lookup core's documents (attncli/lookup/dictionary.py): a dictionary file or stdin parsed and
checked value by value (nesting, non-finite numbers, surrogates, an empty dictionary), a queries
file, the JSON document and the result's fields, worked by hand; every message names what it read."""

from __future__ import annotations

import json
import math

import pytest
from _lookup_fixtures import save_axes, save_fasttext_like

from attncli.errors import BadInput
from attncli.lookup import dictionary as core
from attncli.lookup.keyindex import KeyIndex
from attncli.vectors.model import load_vectors

NESTED_MESSAGE = ("my.json is nested more than 100 levels deep: attn reads at most 100 "
                  "(values are shown and written back as JSON)")


@pytest.fixture
def tiny(attn_home):
    save_fasttext_like("tiny")
    return load_vectors("tiny")


# ---------------------------------------------------------------- results and queries files


def test_head_gives_the_first_n_entries(tiny):
    res = core.lookup("colour", {"brand": "Porche", "model": "Taycan", "color": "black"}, tiny)
    everything = res.entries
    assert len(everything) == 3 and [e.key for e in everything][0] == "color"
    assert [e.key for e in res.head(2)] == [e.key for e in everything[:2]]
    assert len(res.head(1)) == 1 and len(res.head(0)) == 0 and len(res.head(10)) == 3


def test_an_unreadable_queries_file_is_named_with_what_it_should_hold(tmp_path):
    with pytest.raises(BadInput, match=r"^queries file '.*missing.txt' does not exist$"):
        core.read_queries(tmp_path / "missing.txt")
    with pytest.raises(BadInput, match=r"^queries file '.*' is a directory: give one query per line$"):
        core.read_queries(tmp_path)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\t\n", encoding="utf-8")
    with pytest.raises(BadInput, match="^no query to look up: the queries input has no non-blank line$"):
        core.read_queries(blank)


def test_the_json_document_holds_each_keys_weight_and_the_soft_value(attn_home):
    """docs/lookup.md's ``--json`` document for the axes example: softmax((1, 0, 0) / 0.5) by hand."""
    save_axes("axes")
    axes = load_vectors("axes")
    e2 = math.exp(2.0)
    hi, lo = e2 / (2 + e2), 1 / (2 + e2)
    for values, soft in ((["Porche", "Taycan", "black"], None), ([10, 20, 30], 30 * hi + 10 * lo + 20 * lo)):
        seed = dict(zip(["brand", "model", "color"], values))
        index = KeyIndex(axes, list(seed), ngram_weight=0.0, center=False)
        doc = core.lookup("color", seed, axes, temperature=0.5, exact=False, index=index).to_json()
        assert doc == {
            "query": "color", "model": "axes", "temperature": 0.5,
            "entries": [{"key": "color", "similarity": 1.0, "weight": pytest.approx(hi), "value": values[2]},
                        {"key": "brand", "similarity": 0.0, "weight": pytest.approx(lo), "value": values[0]},
                        {"key": "model", "similarity": 0.0, "weight": pytest.approx(lo), "value": values[1]}],
            "best": {"key": "color", "value": values[2], "weight": pytest.approx(hi)},
            "soft_value": None if soft is None else pytest.approx(soft),
        }
        assert json.loads(json.dumps(doc, allow_nan=False)) == doc  # plain Python numbers: strict JSON


def test_parse_dictionary_names_the_dictionary_by_default():
    with pytest.raises(BadInput, match=r"^the dictionary must be a JSON object \{\"key\": value, ...\}, got an array$"):
        core.parse_dictionary("[1]")
    with pytest.raises(BadInput, match="^my file is empty: a lookup needs at least one key$"):
        core.parse_dictionary("{}", "my file")


@pytest.mark.parametrize("text, kind", [("3", "a number"), ("-2.5e3", "a number"), ("true", "a boolean"),
                                        ("null", "null"), ('"x"', "a string"), ("[]", "an array")])
def test_a_dictionary_that_is_not_an_object_says_what_it_is(text, kind):
    with pytest.raises(BadInput, match=rf"^the dictionary must be a JSON object .*, got {kind}$"):
        core.parse_dictionary(text)


def test_a_dictionary_nested_beyond_the_parsers_recursion_is_refused_with_a_message():
    deep = "[" * 100_000 + "]" * 100_000  # deeper than json's recursion limit
    with pytest.raises(BadInput, match="^d.json is nested too deeply to read$"):
        core.parse_dictionary('{"a": ' + deep + "}", "d.json")


def test_read_dictionary_reads_a_file_or_stdin_and_names_it_in_messages(tmp_path, monkeypatch):
    import io
    import sys

    good = tmp_path / "car.json"
    good.write_text('{"color": "black", "top speed": 260}', encoding="utf-8")
    assert core.read_dictionary(good) == {"color": "black", "top speed": 260}
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": }', encoding="utf-8")
    with pytest.raises(BadInput, match=rf"^dictionary file '{bad}' is not valid JSON: Expecting value at line 1, column 7$"):
        core.read_dictionary(bad)
    with pytest.raises(BadInput, match=rf"^dictionary file '{tmp_path}' is a directory: give a UTF-8 JSON object$"):
        core.read_dictionary(tmp_path)
    with pytest.raises(BadInput, match=rf"^dictionary file '{tmp_path / 'none.json'}' does not exist$"):
        core.read_dictionary(tmp_path / "none.json")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"hue": 1}'), encoding="utf-8"))
    assert core.read_dictionary("-") == {"hue": 1}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[1]"), encoding="utf-8"))
    with pytest.raises(BadInput, match="^the dictionary on stdin must be a JSON object"):
        core.read_dictionary("-")
    for empty in (b"", b" \n\t\n"):  # nothing piped in: "empty", not "not valid JSON"
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(empty), encoding="utf-8"))
        with pytest.raises(BadInput, match="^the dictionary on stdin is empty: a lookup needs at least one key$"):
            core.read_dictionary("-")


@pytest.mark.parametrize("text, message", [('{"a": {"b": [1e400]}}', "too large for a float"),
                                           ('{"a": "\\ud800"}', "a value of my.json")])
def test_parse_dictionary_checks_every_value_it_holds(text, message):
    with pytest.raises(BadInput, match=message):
        core.parse_dictionary(text, "my.json")


def test_an_empty_query_or_dictionary_is_refused_with_its_message(tiny):
    with pytest.raises(BadInput, match="^the query is empty: give a word or phrase to look up$"):
        core.lookup(" \t ", {"color": 1}, tiny)
    with pytest.raises(BadInput, match="^the dictionary is empty: a lookup needs at least one key$"):
        core.lookup("colour", {}, tiny)


def test_nesting_is_read_to_100_levels_below_the_top_object():
    # counted by hand: the top object is level 0, each list or object inside it one more
    lists = lambda n: '{"a": ' + "[" * n + "]" * n + "}"  # noqa: E731 - innermost list at level n
    objects = lambda n: '{"a": ' * n + "1" + "}" * n  # noqa: E731 - n objects: the 1 at level n
    assert core.parse_dictionary(lists(100), "my.json")["a"] is not None
    assert core.parse_dictionary(objects(100), "my.json")["a"] is not None
    for text in (lists(101), objects(101)):
        with pytest.raises(BadInput) as info:
            core.parse_dictionary(text, "my.json")
        assert str(info.value) == NESTED_MESSAGE


def test_finite_numbers_null_and_booleans_are_values_a_key_with_a_surrogate_is_not():
    assert core.parse_dictionary('{"a": 1.5, "b": null, "c": true, "d": -0.0, "e": [2.5, {"f": 1e300}]}') == {
        "a": 1.5, "b": None, "c": True, "d": -0.0, "e": [2.5, {"f": 1e300}]}
    with pytest.raises(BadInput, match=r"^a key of my.json is not valid Unicode text: it holds the lone surrogate U\+D800"):
        core.parse_dictionary('{"ok": 1, "\\ud800": 2}', "my.json")
    with pytest.raises(BadInput) as info:
        core.parse_dictionary('{"a": [1, 1e400]}', "my.json")
    assert str(info.value) == ("my.json has a number too large for a float (it reads as infinity): "
                               "write it as a string, or scale it down")


def test_result_fields_and_the_order_of_zero_weight_entries(tiny):
    seed = {"brand": 1, "model": 2, "color": 3, "paint": 4, "top speed": 5}
    res = core.lookup("Top speed", seed, tiny, top_k=4)
    assert (res.query, res.model, res.top_k, res.n_keys) == ("Top speed", "tiny", 4, 5)
    assert res.query_tokens == ["top", "speed"]
    exact = core.lookup("color", seed, tiny)  # weight 1 on color; the rest by similarity, descending
    assert exact.keys[0] == "color" and exact.top_k is None and exact.n_keys == 5
    rest = exact.similarity[1:].tolist()
    assert rest == sorted(rest, reverse=True) and len(set(rest)) == len(rest)
