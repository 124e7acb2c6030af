"""``attn lookup`` through the CLI runner: table and answer, JSON keys, batch, --explain, bad input
(exit 2, a message on stderr, no traceback), and a lookup path free of torch, gensim and nltk."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from _lookup_fixtures import save_fasttext_like, save_plain
from attncli.cli.main import app
from attncli.lookup.params import DEFAULT_TEMPERATURE, NGRAM_WEIGHT

runner = CliRunner()
JSON_KEYS = {"query", "model", "temperature", "entries", "best", "soft_value"}


@pytest.fixture(autouse=True)
def tiny(attn_home, monkeypatch):
    save_fasttext_like("tiny")
    monkeypatch.setenv("ATTN_MODEL", "tiny")


def run(*args, input=None):
    return runner.invoke(app, ["lookup", *args], input=input)


def ok_json(*args, input=None):
    result = run(*args, "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_colour_answers_black_on_the_seed():
    result = run("colour")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("answer: black" in line for line in lines)
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 3 and rows[0].split("│")[1].strip() == "color"
    assert result.stderr == ""


def test_json_document():
    doc = ok_json("colour")
    assert set(doc) == JSON_KEYS
    assert doc["query"] == "colour" and doc["model"] == "tiny" and doc["temperature"] == DEFAULT_TEMPERATURE
    assert all(set(e) == {"key", "similarity", "weight", "value"} for e in doc["entries"])
    weights = [e["weight"] for e in doc["entries"]]
    assert weights == sorted(weights, reverse=True) and sum(weights) == pytest.approx(1.0)
    first = doc["entries"][0]
    assert doc["best"] == {"key": first["key"], "value": first["value"], "weight": first["weight"]}
    assert doc["best"]["value"] == "black" and doc["best"]["weight"] >= 0.5
    assert doc["soft_value"] is None  # the seed's values are strings
    assert {e["key"]: e["value"] for e in doc["entries"]} == {"brand": "Porche", "model": "Taycan", "color": "black"}


def test_numeric_dictionary_has_a_soft_value(tmp_path):
    from attncli.env.paths import data_dir

    doc = ok_json("speed", "--dict", str(data_dir() / "car_specs.json"), "--temperature", "0.5")
    assert doc["soft_value"] == pytest.approx(sum(e["weight"] * e["value"] for e in doc["entries"]))
    result = run("speed", "--dict", str(data_dir() / "car_specs.json"))
    assert "soft value" in result.stdout


def test_dictionary_from_stdin_and_mixed_values():
    doc = ok_json("price", "--dict", "-", "--no-exact", input='{"price": 10, "prices": null, "cost": 3}')
    assert doc["best"]["key"] == "price" and doc["soft_value"] is None


def test_exact_key_and_no_exact():
    assert ok_json("model")["best"] == {"key": "model", "value": "Taycan", "weight": 1.0}
    assert ok_json("model", "--no-exact")["best"]["weight"] < 1.0


def test_top_k():
    doc = ok_json("colour", "--top-k", "2")
    assert len(doc["entries"]) == 2 and sum(e["weight"] for e in doc["entries"]) == pytest.approx(1.0)


def test_temperature_option_changes_the_sharpness():
    sharp = ok_json("colour", "--temperature", "0.02")["best"]["weight"]
    flat = ok_json("colour", "--temperature", "5")["best"]["weight"]
    assert sharp > flat and flat < 0.5


def test_explain_prints_the_formula():
    result = run("colour", "--explain")
    assert result.exit_code == 0, result.stderr
    assert "softmax" in result.stdout or "exp(similarity" in result.stdout
    lam = NGRAM_WEIGHT
    assert f"similarity = {1 - lam:g} * cosine + {lam:g} * ngram" in result.stdout
    both = run("colour", "--explain", "--json")
    json.loads(both.stdout)  # the JSON stays clean
    assert "exp(similarity" in both.stderr


def test_batch_json_lines(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("colour\n\nmaker\ntop speed\n", encoding="utf-8")
    result = run("--queries", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["query"] for d in docs] == ["colour", "maker", "top speed"]
    assert all(set(d) == JSON_KEYS for d in docs)
    stdin = run("--queries", "-", "--json", input="colour\nmaker\n")
    assert [json.loads(x)["query"] for x in stdin.stdout.splitlines()] == ["colour", "maker"]


def test_batch_table_has_one_answer_per_query():
    result = run("--queries", "-", input="colour\nmodel\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("answer:") == 2


def test_big_result_is_compact_json(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({f"key {i}": i for i in range(1500)} | {"color": -1}), encoding="utf-8")
    result = run("colour", "--dict", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("\n") == 1 and len(json.loads(result.stdout)["entries"]) == 1501


def test_rows_limits_the_table(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({f"word{i}": i for i in range(30)}), encoding="utf-8")
    result = run("colour", "--dict", str(path), "--rows", "5")
    assert result.exit_code == 0, result.stderr
    assert "25 more keys" in result.stdout


@pytest.mark.parametrize(
    "args,input,message",
    [
        (["colour", "--dict", "-"], '{"a": 1,\n "b" 2}', "line 2, column 6"),
        (["colour", "--dict", "-"], "[1, 2, 3]", "JSON object"),
        (["colour", "--dict", "-"], "{}", "empty"),
        (["colour", "--dict", "/nonexistent/d.json"], None, "does not exist"),
        (["", ], None, "empty"),
        (["?!"], None, "no word"),
        (["colour", "--dict", "-"], '{"?!": 1}', "no word"),
        (["colour", "--temperature", "0"], None, "temperature"),
        (["colour", "--temperature", "-2"], None, "temperature"),
        (["colour", "--top-k", "0"], None, "top-k"),
        (["colour", "--model", "nope"], None, "unknown model"),
        (["colour", "-m", ""], None, "invalid model name ''"),
        (["colour", "--ngram-weight", "1.5"], None, "ngram-weight"),
        ([], None, "QUERY"),
        (["colour", "--queries", "-"], "maker", "not both"),
        (["--queries", "-", "--dict", "-"], "x", "stdin"),
        (["--queries", "-"], "colour\n!!\n", "line 2"),
    ],
)
def test_bad_input_exits_2_without_traceback(args, input, message):
    result = run(*args, input=input)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_bad_query_line_leaves_no_partial_output_and_is_numbered_like_an_editor():
    result = run("--queries", "-", "--json", input="colour\nmaker\x0chue\u2028x\n\u200b\n")
    assert result.exit_code == 2 and "--queries line 3" in result.stderr, result.stderr
    assert result.stdout == ""  # lines 1 and 2 were fine, but nothing is printed before the bad line is found
    fine = run("--queries", "-", "--json", input="colour\nmaker\x0chue\n")
    assert [json.loads(line)["query"] for line in fine.stdout.splitlines()] == ["colour", "maker\x0chue"]


def test_unknown_word_in_a_model_without_subwords():
    save_plain("plain")
    result = run("colour", "--model", "plain")
    assert result.exit_code == 2 and "unknown word 'colour'" in result.stderr


def test_lookup_imports_no_torch_gensim_nltk(attn_home):
    code = (
        "import sys\n"
        "from attncli.cli.main import main\n"
        "sys.argv = ['attn', 'lookup', 'colour', '--json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = sorted(m for m in ('torch', 'gensim', 'nltk', 'scipy', 'transformers', 'tokenizers', 'safetensors', 'huggingface_hub') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    env = dict(os.environ, ATTN_HOME=str(attn_home), ATTN_MODEL="tiny")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"]["value"] == "black"
    assert "HEAVY []" in proc.stderr


@pytest.mark.parametrize("columns", [40, 60, 100])
def test_narrow_terminal_folds_instead_of_cutting(attn_home, columns):
    from attncli.env.paths import data_dir

    env = dict(os.environ, ATTN_HOME=str(attn_home), ATTN_MODEL="tiny", COLUMNS=str(columns))
    proc = subprocess.run([sys.executable, "-m", "attncli", "lookup", "price", "--no-exact", "--explain",
                           "--dict", str(data_dir() / "car_specs.json")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), max(lines, key=len)
    rows = [line for line in lines if line.startswith("│")]
    assert any("185000" in row for row in rows), "a number must never be cut by the terminal edge"
    assert "answer: 185000" in proc.stdout.replace("\n", " ")


def test_explain_numbers_match_the_json():
    import math

    doc = ok_json("colour")
    sims = [e["similarity"] for e in doc["entries"]]
    z = sum(math.exp((s - max(sims)) / doc["temperature"]) for s in sims)
    text = run("colour", "--explain").stdout.replace("\n", " ")
    assert f"is {z:.4g};" in text
    for e in doc["entries"]:
        assert f"{e['key']}: similarity {e['similarity']:.4f}" in text
        assert f"weight {e['weight']:.4f}" in text


def test_an_exact_key_answers_like_a_dict_even_beside_a_key_with_no_vector(tmp_path):
    """'id' is out of the built-in vocabulary and too short for its 5-6-character n-grams: it
    has no vector, so attention over the keys is bad input, but d['color'] still works."""
    path = tmp_path / "d.json"
    path.write_text('{"id": 1, "color": "red"}', encoding="utf-8")
    exact = run("color", "--dict", str(path), "--json", "--model", "default")
    assert exact.exit_code == 0, exact.stderr
    doc = json.loads(exact.stdout)
    assert doc["best"] == {"key": "color", "value": "red", "weight": 1.0}
    assert {e["key"]: e["weight"] for e in doc["entries"]} == {"color": 1.0, "id": 0.0}
    assert "have no word vector" in exact.stderr and "'id'" in exact.stderr
    itself = json.loads(run("id", "--dict", str(path), "--json", "--model", "default").stdout)  # the vectorless key is itself exact
    assert itself["best"]["value"] == 1 and itself["best"]["weight"] == 1.0
    fuzzy = run("colour", "--dict", str(path), "--model", "default")
    assert fuzzy.exit_code == 2 and "key 'id': unknown word 'id'" in fuzzy.stderr and fuzzy.stdout == ""
    no_exact = run("color", "--dict", str(path), "--no-exact", "--model", "default")
    assert no_exact.exit_code == 2 and "key 'id'" in no_exact.stderr
    batch = run("--queries", "-", "--dict", str(path), "--json", "--model", "default", input="color\ncolour\n")
    assert batch.exit_code == 2 and "--queries line 2: key 'id'" in batch.stderr and batch.stdout == ""


def test_exact_key_beside_an_unknown_key_in_a_model_without_subwords():
    save_plain("plain")
    from _lookup_fixtures import WORDS

    known = WORDS[0]
    d = json.dumps({known: "yes", "zzzunknownzzz": "no"})
    exact = run(known, "--dict", "-", "--model", "plain", "--json", input=d)
    assert exact.exit_code == 0 and json.loads(exact.stdout)["best"]["value"] == "yes"
    fuzzy = run(known + "s", "--dict", "-", "--model", "plain", input=d)
    assert fuzzy.exit_code == 2 and "unknown word 'zzzunknownzzz'" in fuzzy.stderr


def test_the_docs_say_why_the_default_dictionary_says_porche():
    """Where docs/lookup.md first introduces the default dictionary, one line says what "Porche"
    is: the seed's misspelling of Porsche, kept."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "lookup.md").read_text(encoding="utf-8")
    paragraph = next(p for p in docs.split("\n\n") if "default dictionary" in p and "Porche" in p)
    assert "Porsche" in paragraph and "misspelt" in paragraph, paragraph


@pytest.mark.parametrize("args", [["lookup", "colour"], ["heads"]])
def test_a_centred_title_carries_no_trailing_spaces(args, monkeypatch):
    """rich pads a centred table title to the table's width: the lines end at their last character
    (views/result.py's Trimmed), the title still centred over the table."""
    import attncli.cli.common as cli_common
    from typer.testing import CliRunner

    from attncli.cli.main import app

    if args == ["heads"]:
        monkeypatch.delenv("ATTN_MODEL")  # the built-in model's learned heads
    cli_common._consoles.clear()
    out = CliRunner().invoke(app, args, env={"COLUMNS": "100"}).stdout
    title, top = out.splitlines()[:2]
    assert title == title.rstrip() and title.startswith("  "), repr(title)
    middle = len(title) - len(title.lstrip()) + len(title.strip()) / 2
    assert abs(middle - len(top) / 2) <= 1, (title, top)  # centred over the table's box
    assert all(line == line.rstrip() for line in out.splitlines())
