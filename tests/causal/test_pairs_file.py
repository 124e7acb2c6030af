"""The --pairs JSONL reader (attncli/causal/pairs_file.py): every bad line refused with its number
before any model runs (exit 2, one line, no traceback), blank lines skipped, the bounds held."""

from __future__ import annotations

import json

import pytest

from _stats_helpers import cli

from attncli.causal import pairs_file
from attncli.causal.pairs_file import read_pairs
from attncli.errors import BadInput

GOOD = json.dumps({"clean": "the cat sat on the", "corrupt": "the dog sat on the", "target": "table"})

BAD_LINES = [
    ('{"clean": "a", "corrupt": "b", "target": NaN}', "line 2 is not a JSON object"),
    ('{"clean": "a", "corrupt": "b", "target": 1e999}', "'target' is float, not a string"),
    ('{"clean": "a", "corrupt": "b", "target": 3}', "'target' is int, not a string"),
    ('{"clean": " ", "corrupt": "b", "target": "c"}', "'clean' is blank"),
    ('{"clean": "a", "corrupt": "b", "target": ""}', "'target' is blank"),
    ('{"clean": "a", "target": "c"}', "has no 'corrupt'"),
    ('{"clean": "a", "corrupt": "b", "target": "c", "extra": 1}', "has the key 'extra'"),
    ('["a", "b", "c"]', "is not a JSON object with clean"),
    ('{"clean": "a", "corrupt": "b"', "line 2 is not a JSON object"),
    ('{"clean": "\\ud800", "corrupt": "b", "target": "c"}', "lone surrogate"),
    ('{"clean": "a", "corrupt": "b", "target": "c", "contrast": "d"}', "line 2: a contrast, where line 1 has none"),
    ("[" * 50_000, "nested too deep"),
    ('{"clean": "a", "corrupt": "b", "target": {"x": 1}}', "'target' is dict, not a string"),
]


@pytest.mark.parametrize("line,said", BAD_LINES, ids=range(len(BAD_LINES)))
def test_a_bad_line_is_refused_by_its_number(line, said, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(GOOD + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(BadInput, match="--pairs line 2" if "line 1" not in said else "line 2"):
        read_pairs(path)
    with pytest.raises(BadInput) as exc:
        read_pairs(path)
    assert said in str(exc.value)
    r = cli(["ablate", "--pairs", path], code=2)  # the command line: one line, exit 2, before any model loads
    assert "Traceback" not in r.output and "line 2" in r.stderr


def test_blank_lines_are_skipped_and_lines_counted(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n" + GOOD + "\n  \n" + GOOD.replace("table", "floor") + "\n", encoding="utf-8")
    pairs = read_pairs(path)
    assert [(p.line, p.target, p.contrast) for p in pairs] == [(2, "table", None), (4, "floor", None)]


def test_bounds_and_files_that_are_not_pairs(tmp_path, monkeypatch):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(BadInput, match="holds no pair"):
        read_pairs(empty)
    with pytest.raises(BadInput, match="--pairs"):
        read_pairs(tmp_path)  # a folder
    with pytest.raises(BadInput, match="not UTF-8"):
        (tmp_path / "latin.jsonl").write_bytes(b'{"clean": "\xe9"}\n')
        read_pairs(tmp_path / "latin.jsonl")
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"clean": "a " * 40_000, "corrupt": "b", "target": "c"}) + "\n", encoding="utf-8")
    with pytest.raises(BadInput, match="line 1 is longer than 65,536 bytes"):
        read_pairs(long)
    monkeypatch.setattr(pairs_file, "MAX_PAIRS", 2)
    many = tmp_path / "many.jsonl"
    many.write_text((GOOD + "\n") * 3, encoding="utf-8")
    with pytest.raises(BadInput, match="more than 2 pairs"):
        read_pairs(many)
    many.write_text((GOOD + "\n") * 2, encoding="utf-8")
    assert len(read_pairs(many)) == 2


def test_pairs_and_one_texts_options_do_not_mix(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(GOOD + "\n", encoding="utf-8")
    for args, said in ((["ablate", "the cat", "--pairs", path], "drop the text arguments"),
                       (["ablate", "--pairs", path, "--target", "x"], "drop --target"),
                       (["ablate", "--pairs", path, "--mode", "mean"], "--pairs ablates with --mode zero"),
                       (["ablate", "the cat", "--out", tmp_path / "o"], "--out goes with --pairs"),
                       (["patch", "a b", "c d", "--workers", 2], "--workers and --shard-pairs go with --pairs"),
                       (["ablate"], "give the text(s) to read, or --pairs FILE"),
                       (["patch", "--pairs", path, "--site", "nowhere"], "--site 'nowhere'"),
                       (["attribute", "--pairs", path], "give the model with --transformer"),
                       (["circuit", "--pairs", path, "--transformer", "x", "--faithfulness", 1.5], "--faithfulness"),
                       (["patch", "--pairs", path, "--shard-pairs", 0], "--shard-pairs must be between"),
                       (["patch", "--pairs", path, "--ray", "nohost"], "expected HOST:PORT")):
        r = cli(args, code=2)
        assert "".join(said.split()) in "".join(r.stderr.split()), (args, r.stderr)
