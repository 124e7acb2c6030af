"""``attn stats`` refuses bad input with exit 2 and a message (an empty corpus, a JSONL file
without the field, shards of another model or attn version, an unreachable Ray address, bad
options), names and skips a damaged shard, and reports a worker's failure."""

from __future__ import annotations

import json

import pytest

from _stats_helpers import assert_docs_equal, cli, corpus_lines, said, write_corpus
from conftest import needed

needed("tokenizers")
needed("safetensors")


@pytest.fixture(scope="module")
def gpt2_model(tiny_gpt2_dir):
    from attncli.hf import load

    return load(str(tiny_gpt2_dir), backend="numpy")


# --- bad input, damaged shards ---------------------------------------------------------------------

def test_bad_input_is_exit_2(tiny_gpt2_dir, tiny_bert_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    r = cli(["stats", empty, "--transformer", tiny_gpt2_dir], code=2)
    assert said(r, "no text")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "the cat"}\n{"body": "a dog"}\n')
    r = cli(["stats", jsonl, "--transformer", tiny_gpt2_dir, "--field", "text"], code=2)
    assert said(r, "line 2") and said(r, "no field 'text'")
    corpus = write_corpus(tmp_path / "c.txt", 6)
    gpt2, bert = tmp_path / "gpt2", tmp_path / "bert"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", gpt2])
    cli(["stats", corpus, "--transformer", tiny_bert_dir, "--out", bert])
    r = cli(["stats", "merge", gpt2, bert], code=2)
    assert said(r, "another model")
    r = cli(["stats", corpus, "--transformer", tiny_bert_dir, "--out", gpt2], code=2)  # resume into another model's
    assert said(r, "another run")
    cli(["stats", "merge", tmp_path / "nothing-here"], code=2)


def test_a_shard_of_another_attn_version_is_refused(tiny_gpt2_dir, tmp_path):
    from attncli.stats.shards import checksum as _checksum

    corpus = write_corpus(tmp_path / "c.txt", 10)
    out = tmp_path / "out"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 5])
    path = out / "shard-000000000005-000000000010.json"
    doc = json.loads(path.read_text())
    doc["attn_version"] = "0.0.1"
    doc["checksum"] = _checksum(doc)
    path.write_text(json.dumps(doc))
    r = cli(["stats", "merge", out], code=2)
    assert said(r, "written by attn 0.0.1")


def test_a_damaged_shard_is_named_and_skipped_when_asked(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 10)
    out, first = tmp_path / "out", tmp_path / "first"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 5])
    first.mkdir()
    (first / "shard-000000000000-000000000005.json").write_bytes((out / "shard-000000000000-000000000005.json").read_bytes())
    damaged = out / "shard-000000000005-000000000010.json"
    text = damaged.read_text()
    damaged.write_text(text.replace('"texts": 5', '"texts": 6'))  # valid JSON, one number changed
    r = cli(["stats", "merge", out], code=1)
    assert said(r, damaged.name) and said(r, "checksum") and said(r, "--skip-damaged")
    r = cli(["stats", "merge", out, "--skip-damaged"])
    assert said(r, damaged.name) and said(r, "checksum")
    doc = cli(["stats", "merge", out, "--json", "--skip-damaged"])
    assert_docs_equal(doc, cli(["stats", "merge", first, "--json"]))
    assert doc["damaged_skipped"] == 1
    damaged.write_text(text[: len(text) // 2])  # cut short
    r = cli(["stats", "merge", out], code=1)
    assert said(r, damaged.name) and said(r, "not JSON")
    # a resume computes a damaged shard again
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 5, "--json"])
    assert doc["computed"] == 1 and doc["texts"] == 10


def test_an_unreachable_ray_address_is_exit_2(tiny_gpt2_dir, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    corpus = write_corpus(tmp_path / "c.txt", 4)
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--ray", f"127.0.0.1:{port}"], code=2)
    assert said(r, "no Ray cluster answers")
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--ray", "not-an-address"], code=2)
    assert said(r, "HOST:PORT")


@pytest.mark.parametrize("lines, field, message", [
    ('{"text": "a b"}\nnot json\n', "text", "line 2 of"),
    ('{"text": 3}\n', "text", "is not a string"),
    ('["text"]\n', "text", "no field 'text'"),
])
def test_bad_jsonl_is_exit_2(lines, field, message, tiny_gpt2_dir, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(lines)
    r = cli(["stats", path, "--transformer", tiny_gpt2_dir, "--field", field], code=2)
    assert said(r, message)


def test_bad_corpora_and_options_are_exit_2(tiny_gpt2_dir, tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert said(cli(["stats", folder, "--transformer", tiny_gpt2_dir], code=2), "holds no text")
    assert said(cli(["stats", tmp_path / "missing.txt", "--transformer", tiny_gpt2_dir], code=2), "does not exist")
    corpus = write_corpus(tmp_path / "c.txt", 3)
    assert said(cli(["stats", corpus], code=2), "needs --transformer")
    assert said(cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", corpus], code=2), "is not a folder")
    assert said(cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--workers", 0], code=2), "--workers")
    assert said(cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--split", "train"], code=2), "--split")
    one_token = tmp_path / "one.txt"
    one_token.write_text("a\n")
    assert said(cli(["stats", one_token, "--transformer", tiny_gpt2_dir], code=2), "has a token to score")
    datasets = needed("datasets")
    datasets.DatasetDict({"a": datasets.Dataset.from_dict({"text": ["x y"]}),
                          "b": datasets.Dataset.from_dict({"text": ["x y"]})}).save_to_disk(str(tmp_path / "dd"))
    assert said(cli(["stats", tmp_path / "dd", "--transformer", tiny_gpt2_dir], code=2), "choose one with --split")
    assert said(cli(["stats", tmp_path / "dd", "--transformer", tiny_gpt2_dir, "--split", "a", "--field", "body"],
                    code=2), "has no field 'body'")


def test_a_worker_that_cannot_load_the_model_fails_the_run(tiny_gpt2_dir, gpt2_model, tmp_path):
    """A worker's failure reaches the parent as the run's error (no hang, no traceback)."""
    from attncli.errors import BadInput, RuntimeFailure
    from attncli.stats.accumulate import Settings
    from attncli.stats.runner import ModelSpec, run

    with pytest.raises(BadInput) as caught:
        run(gpt2_model, iter(corpus_lines(8)), spec=ModelSpec(str(tmp_path / "no-model")), settings=Settings(),
            workers=2, shard_texts=4)
    assert "no-model" in str(caught.value)
    from attncli.stats.chunk_work import load_work

    other = tmp_path / "other"  # the same model with one weight changed: another fingerprint
    import shutil

    shutil.copytree(tiny_gpt2_dir, other)
    weights = other / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    from attncli.stats.chunk_work import identity

    with pytest.raises(RuntimeFailure, match="not the one the run started on"):
        load_work(ModelSpec(str(other)), Settings(), identity(gpt2_model))


def test_a_corpus_that_is_not_a_regular_file_is_refused_before_it_is_read(tiny_gpt2_dir, tmp_path):
    """A corpus file goes through fileio's checked open: a FIFO is refused, never waited on or
    read (a writer is ready here, so a reader that read it would go on and exit 0), and a link to a
    device is followed to the device and refused; stdin (-) stays the way to stream a command."""
    import os
    import threading

    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)

    def writer():
        try:
            with open(fifo, "w") as fh:  # blocks until some reader opens the FIFO
                fh.write("the cat sat on the mat\n" * 4)
        except OSError:  # the reader looked and closed it: a broken pipe
            pass

    threading.Thread(target=writer, daemon=True).start()
    r = cli(["stats", fifo, "--transformer", tiny_gpt2_dir], code=2)
    assert said(r, "is a FIFO, not a regular file") and said(r, "give - as the corpus")
    device = tmp_path / "null.txt"
    device.symlink_to(os.devnull)
    assert said(cli(["stats", device, "--transformer", tiny_gpt2_dir], code=2), "is a device, not a regular file")
    linked = tmp_path / "linked.txt"
    linked.symlink_to(write_corpus(tmp_path / "c.txt", 4))
    assert cli(["stats", linked, "--transformer", tiny_gpt2_dir, "--json"])["texts"] == 4


@pytest.mark.parametrize("suffix,body", [(".txt", "first text\nsecond\n"),
                                         (".jsonl", '{"text": "first text"}\n{"text": "second"}\n')])
def test_a_byte_order_mark_at_the_start_of_a_corpus_is_dropped(tmp_path, suffix, body):
    from attncli.stats.corpus import texts

    path = tmp_path / f"c{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    assert list(texts(str(path))) == ["first text", "second"]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_attn_stats_help_is_the_group_s_own(flag):
    """`attn stats --help` once printed `Usage: attn stats run ...`: the group's help lists run and merge."""
    r = cli(["stats", flag])
    usage = next(line.strip() for line in r.stdout.splitlines() if "Usage:" in line)
    assert usage.startswith("Usage: attn stats [OPTIONS] COMMAND"), usage
    assert "│ run " in r.stdout and "│ merge " in r.stdout
    r = cli(["stats", "corpus.txt", flag])  # after a corpus: attn stats run's help, as it runs
    assert "Usage: attn stats run" in r.stdout
