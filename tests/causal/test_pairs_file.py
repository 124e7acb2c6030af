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
    ('{"clean": "a", "corrupt": "b", "target": "c", "target_id": 3}', "has both 'target' and 'target_id'"),
    ('{"clean": "a", "corrupt": "b", "target_id": "3"}', "'target_id' is str, not a whole number"),
    ('{"clean": "a", "corrupt": "b", "target_id": -1}', "'target_id' must be a whole number from 0"),
    ('{"clean": "a", "corrupt": "b", "target_id": 100000000000000000000}', "'target_id' must be a whole number"),
    ('{"clean": "a", "corrupt": "b", "target_id": true}', "'target_id' is bool"),
    ('{"clean": "a", "corrupt": "b", "target": "c", "contrast_id": 4}', "line 2: a contrast, where line 1 has none"),
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


def test_a_token_by_its_id_on_a_line_is_the_token_by_its_word_and_the_advice_names_the_key(tmp_path):
    """A target the tokenizer splits (or that the model cannot predict) is refused with advice that
    works in a --pairs file: its "target_id" key (the --target-id option is refused with --pairs)."""
    from attncli.tinylm.traced import load_builtin

    model = load_builtin()
    table, floor = model.vocab_id("table"), model.vocab_id("floor")
    words, ids = tmp_path / "words.jsonl", tmp_path / "ids.jsonl"
    words.write_text(json.dumps({"clean": "the cat sat on the", "corrupt": "the dog sat on the", "target": "table",
                                 "contrast": "floor"}) + "\n", encoding="utf-8")
    ids.write_text(json.dumps({"clean": "the cat sat on the", "corrupt": "the dog sat on the", "target_id": table,
                               "contrast_id": floor}) + "\n", encoding="utf-8")
    assert [(p.target, p.target_id, p.contrast_id, p.has_contrast) for p in read_pairs(ids)] == [(None, table, floor, True)]
    by_word, by_id = cli(["ablate", "--pairs", words, "--json"]), cli(["ablate", "--pairs", ids, "--json"])
    assert by_id["mean"] == by_word["mean"] and by_id["metric"] == "logit_diff"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"clean": "the cat sat on the", "corrupt": "the dog sat on the",
                               "target": "tablezzzq"}) + "\n", encoding="utf-8")
    r = cli(["ablate", "--pairs", bad], code=2)
    said = " ".join(r.stderr.split())
    assert "--pairs line 1: 'target' 'tablezzzq'" in said and '"target_id": ID on the line' in said, said
    assert "--target-id" not in said
    r = cli(["ablate", "--pairs", bad, "--target-id", str(table)], code=2)  # the option stays refused with --pairs
    bad.write_text(json.dumps({"clean": "the cat sat on the", "corrupt": "the dog sat on the",
                               "target_id": 10**9}) + "\n", encoding="utf-8")
    r = cli(["ablate", "--pairs", bad], code=2)
    assert "'target_id' 1000000000 is outside the vocabulary" in " ".join(r.stderr.split())


def test_a_key_with_a_token_id_keeps_the_digest_of_a_file_without_one():
    """Shards written before the ids existed resume: a pair without ids has the key it had."""
    from attncli.causal.pairs_file import Pair

    assert Pair(1, "a", "b", "c", "d").key() == json.dumps(["a", "b", "c", "d"])
    assert Pair(1, "a", "b", None, None, 5).key() == json.dumps(["a", "b", None, None, 5, None])


def test_a_byte_order_mark_at_the_start_is_not_part_of_the_first_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (GOOD + "\r\n" + GOOD + "\n").encode("utf-8"))
    assert [(p.line, p.clean, p.target) for p in read_pairs(path)] == [(1, "the cat sat on the", "table")] * 1 + \
        [(2, "the cat sat on the", "table")]
    path.write_bytes(b"\n\xef\xbb\xbf" + GOOD.encode("utf-8"))  # only at the start of the file
    with pytest.raises(BadInput, match="line 2 is not a JSON object"):
        read_pairs(path)


def test_a_file_past_the_pair_limit_is_refused_at_the_pair_past_it_without_parsing_or_reading_on(tmp_path, monkeypatch):
    """Counted, not timed: with MAX_PAIRS pairs allowed, the file is read up to the pair past them and
    no line is parsed; what follows (here bytes that are not UTF-8) is never read."""
    limit = 50
    monkeypatch.setattr(pairs_file, "MAX_PAIRS", limit)
    parsed, lines_read = [], []
    real_parse, real_lines = pairs_file.parse_line, pairs_file.read_lines
    monkeypatch.setattr(pairs_file, "parse_line", lambda *a, **k: parsed.append(a) or real_parse(*a, **k))

    def counted(*args, **kwargs):
        for item in real_lines(*args, **kwargs):
            lines_read.append(item[0])
            yield item

    monkeypatch.setattr(pairs_file, "read_lines", counted)
    path = tmp_path / "many.jsonl"
    path.write_bytes(((GOOD + "\n\n") * (limit + 1)).encode("utf-8") + b"\xff\xfe not UTF-8\n" * 1000)
    with pytest.raises(BadInput, match=f"more than {limit} pairs \\(line {2 * limit + 1}\\)"):
        read_pairs(path)
    assert parsed == [] and max(lines_read) == 2 * limit + 1
    path.write_bytes(((GOOD + "\n") * limit).encode("utf-8"))
    parsed.clear()
    assert len(read_pairs(path)) == limit and len(parsed) == limit
