"""attn qk through the command line: on all-MiniLM-L6-v2 (a real model) and a tiny GPT-2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")

from typer.testing import CliRunner  # noqa: E402

from attncli.cli.main import app  # noqa: E402

runner = CliRunner()
TEXT = "the cat sat on the mat because it was tired"


def run(*args):
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_the_json_holds_every_part_and_they_add_up_to_the_score(minilm_dir):
    code, out = run("qk", TEXT, "--transformer", str(minilm_dir), "--layer", "3", "--head", "5", "--query", "8",
                    "--key", "2", "--top", "5", "--json")
    assert code == 0, out
    doc = json.loads(out)
    parts = np.asarray(doc["parts"])  # (C, C)
    C = len(doc["components"])
    assert parts.shape == (C, C) and C == 1 + 3 * (12 + 4) + 1  # embed; per earlier layer (3) 12 heads, b_O, LN1 b, MLP, LN2 b; bias
    assert abs(parts.sum() - doc["score"]) <= 1e-9 * max(1.0, np.abs(parts).sum())
    assert doc["query"] == {"position": 8, "token": "it", "text": "it"}  # its text beside it: WordPiece's is the token
    assert doc["key"] == {"position": 2, "token": "cat", "text": "cat"}
    assert np.allclose(doc["key_side"], parts.sum(axis=0)) and np.allclose(doc["query_side"], parts.sum(axis=1))
    sizes = [abs(p["value"]) for p in doc["top"]]
    assert len(sizes) == 5 and sizes == sorted(sizes, reverse=True) and sizes[0] == np.abs(parts).max()


def test_the_terminal_view_lists_the_largest_parts(minilm_dir):
    code, out = run("qk", TEXT, "--transformer", str(minilm_dir), "--layer", "3", "--head", "5", "--query", "8",
                    "--key", "2", "--top", "3")
    assert code == 0, out
    assert "score of query 8 'it'" in out and "key 2 'cat'" in out and "sum of every part" in out


@pytest.mark.parametrize("args, said", [
    (("--layer", "9"), "layer 9 is out of range"),
    (("--head", "12"), "head 12 is out of range"),
    (("--query", "40"), "--query 40 is out of range"),
    (("--key", "40"), "--key 40 is out of range"),
])
def test_bad_positions_are_exit_2_with_one_line(minilm_dir, args, said):
    code, out = run("qk", TEXT, "--transformer", str(minilm_dir), *args)
    assert code == 2 and said in out and "Traceback" not in out


def test_a_masked_key_is_refused(tiny_gpt2_dir):
    code, out = run("qk", "the cat sat on the mat", "--transformer", str(tiny_gpt2_dir), "--query", "1", "--key", "3")
    assert code == 2 and "masked" in out


def test_without_a_model_it_says_how_to_give_one():
    code, out = run("qk", TEXT)
    assert code == 2 and "--transformer" in out


@pytest.mark.parametrize("flag", ["--query", "--key"])
def test_a_negative_position_is_refused_not_counted_from_the_end(tiny_gpt2_dir, flag):
    """--query -2 once meant the last token: a count from the end is not a position."""
    code, out = run("qk", "the cat sat on the mat", "--transformer", str(tiny_gpt2_dir), flag, "-2")
    assert code == 2 and f"{flag}" in out and "-2" in out and "from 0 to" in " ".join(out.split()), out


@pytest.mark.parametrize("name", ["query", "key"])
def test_a_negative_position_in_python_is_refused(name):
    from attncli.errors import BadInput
    from attncli.pipeline.qk_compute import QKRequest

    with pytest.raises(BadInput, match=f"--{name} -2 is not a token position"):
        QKRequest("the cat", transformer="m", **{name: -2}).check()


def test_the_positions_default_to_the_last_token_and_the_query(tiny_gpt2_dir):
    code, out = run("qk", "the cat sat on the mat", "--transformer", str(tiny_gpt2_dir), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["query"] == doc["key"] == {"position": 9, "token": "at", "text": "at"}, out  # the last of 10


@pytest.mark.parametrize("args, said", [
    (("   ",), "the sentence is empty"),
    (("",), "the sentence is empty"),
    (("the cat", "--pair", ""), "the --pair sentence is empty"),
    (("the cat", "--pair", " \t\n"), "the --pair sentence is empty"),
])
def test_a_blank_text_or_pair_is_refused_as_attn_matrix_refuses_it(tiny_gpt2_dir, args, said):
    code, out = run("qk", *args, "--transformer", str(tiny_gpt2_dir))
    assert code == 2 and said in out and "attn matrix" not in " ".join(out.split()), out
