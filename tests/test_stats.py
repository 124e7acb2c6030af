"""``attn stats``: head statistics over a corpus equal a plain query-by-query count, whether the
corpus runs in one process, in four shards merged, in two worker processes, or killed after a
shard and resumed; the planted heads of the hand-built Llama each top their own statistic; bad
input is exit 2 and a damaged shard is named and skipped."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from _stats_helpers import assert_docs_equal, assert_same_stats, brute_force, cli, corpus_lines, said, write_corpus
from conftest import needed

needed("tokenizers")
needed("safetensors")

N_TEXTS = 30


@pytest.fixture(scope="module")
def gpt2_model(tiny_gpt2_dir):
    from attncli.transformer import load

    return load(str(tiny_gpt2_dir), backend="numpy")


@pytest.fixture(scope="module")
def one_process(tiny_gpt2_dir, tmp_path_factory) -> tuple[Path, dict]:
    corpus = write_corpus(tmp_path_factory.mktemp("stats") / "corpus.txt", N_TEXTS)
    return corpus, cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--json"])


def test_one_process_equals_a_plain_count(one_process, gpt2_model):
    corpus, doc = one_process
    assert doc["texts"] == N_TEXTS and doc["shards"] == 1 and doc["ranges"] == [[0, N_TEXTS]]
    assert doc["probes"] == len(range(0, N_TEXTS, 4)) and doc["stats"]["induction"]["count"] > 0
    assert_same_stats(doc, brute_force(gpt2_model, corpus_lines(N_TEXTS)))


def test_four_merged_shards_equal_one_process(one_process, tiny_gpt2_dir, tmp_path):
    corpus, whole = one_process
    out = tmp_path / "shards"
    run = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 8, "--json"])
    assert sorted(p.name for p in out.iterdir()) == [f"shard-{s:012d}-{e:012d}.json"
                                                     for s, e in ((0, 8), (8, 16), (16, 24), (24, 30))]
    merged = cli(["stats", "merge", out, "--json"])
    for doc in (run, merged):
        assert doc["shards"] == 4
        assert_docs_equal(doc, whole)
    # one shard's own numbers are its texts' alone (not the run's so far)
    shard = json.loads((out / "shard-000000000008-000000000016.json").read_text())
    assert shard["texts"] == 8 and shard["start"] == 8 and shard["end"] == 16


def test_two_workers_equal_one_process(one_process, tiny_gpt2_dir):
    corpus, whole = one_process
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--workers", 2, "--shard-texts", 8, "--json"])
    assert doc["shards"] == 4 and doc["computed"] == 4 and doc["ran"] == {"on": "processes", "workers": 2}
    assert_docs_equal(doc, whole)


def test_an_encoder_has_no_induction_and_equals_a_plain_count(tiny_bert_dir, tmp_path):
    from attncli.transformer import load

    corpus = write_corpus(tmp_path / "c.txt", 12, seed=3)
    doc = cli(["stats", corpus, "--transformer", tiny_bert_dir, "--json", "--shard-texts", 5])
    assert doc["stats"]["induction"]["mean"] is None and doc["probes"] == 0
    assert_same_stats(doc, brute_force(load(str(tiny_bert_dir), backend="numpy"), corpus_lines(12, seed=3)))


def test_killed_after_a_shard_and_resumed_equals_an_uninterrupted_run(one_process, tiny_gpt2_dir, tmp_path):
    from _pause import PYTHON, paused

    corpus, whole = one_process
    out = tmp_path / "run"
    argv = [PYTHON, "-m", "attncli", "stats", str(corpus), "--transformer", str(tiny_gpt2_dir), "--out", str(out),
            "--shard-texts", "8", "--json"]
    with paused(argv, tmp_path / "home", "stats-shard-written") as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert [p.name for p in out.iterdir() if p.name.startswith("shard-")] == ["shard-000000000000-000000000008.json"]
    resumed = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 8, "--json"])
    assert resumed["computed"] == 3 and resumed["shards"] == 4 and resumed["texts"] == N_TEXTS
    assert_docs_equal(resumed, whole)
    again = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 8, "--json"])
    assert again["computed"] == 0 and again["texts"] == N_TEXTS  # nothing counted twice
    assert_docs_equal(again, whole)


def test_a_resume_with_other_chunks_never_overlaps_a_shard(one_process, tiny_gpt2_dir, tmp_path):
    corpus, whole = one_process
    out = tmp_path / "run"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 7, "--max-texts", 10])
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 8, "--json"])
    assert_docs_equal(doc, whole)
    assert_docs_equal(cli(["stats", "merge", out, "--json"]), whole)
    # a gap before a shard (one lost): the chunk that fills it stops where the next shard starts
    gap = tmp_path / "gap"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", gap, "--shard-texts", 5])
    (gap / "shard-000000000005-000000000010.json").unlink()
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", gap, "--shard-texts", 8, "--json"])
    assert doc["computed"] == 1 and (gap / "shard-000000000005-000000000010.json").exists()
    assert_docs_equal(cli(["stats", "merge", gap, "--json"]), whole)


def test_top_examples_do_not_depend_on_the_merge_order():
    from attncli.stats.accumulate import Accumulator, add_text

    A = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]]])  # (1, 1, 3, 3): two queries tie on the sink
    kw = dict(tokens=["a", "b", "c"], ids=[1, 2, 3], special=[False] * 3, causal=True)
    orders = []
    for texts in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        parts = []
        for t in texts:
            acc = Accumulator(1, 1, top_k=3)
            add_text(acc, A, text_id=t, **kw)
            parts.append(acc)
        total = Accumulator(1, 1, top_k=3)
        for part in parts:
            total.merge(part)
        orders.append([(e["text"], e["position"]) for e in total.top("sink", 0, 0)])
    assert orders[0] == orders[1] == orders[2] == [(0, 1), (0, 2), (1, 1)]  # lower text, then lower position
    one = Accumulator(1, 1, top_k=1)  # the choice within a text, too
    add_text(one, A, text_id=0, **kw)
    assert [(e["text"], e["position"]) for e in one.top("sink", 0, 0)] == [(0, 1)]


def test_planted_heads_top_their_own_statistic(head_llama_dir, tmp_path):
    from _llama_head_fixtures import SENTENCES

    rng = np.random.default_rng(0)
    lines = [" ".join(SENTENCES[k] for k in rng.integers(0, len(SENTENCES), size=rng.integers(1, 3)))
             for _ in range(200)]
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n")
    doc = cli(["stats", tmp_path / "c.txt", "--transformer", head_llama_dir, "--json"])
    assert doc["texts"] == 200
    planted = {"sink": (0, 0), "previous_token": (0, 1), "induction": (1, 0), "duplicate_token": (1, 1)}
    for name, head in planted.items():
        mean = np.asarray(doc["stats"][name]["mean"])
        assert np.unravel_index(int(np.argmax(mean)), mean.shape) == head, (name, mean)
        others = np.delete(mean.ravel(), head[0] * mean.shape[1] + head[1])
        assert mean[head] > 0.9 and others.max() < 0.6, (name, mean)


@pytest.fixture(scope="module")
def head_llama_dir(tmp_path_factory):
    needed("torch")
    needed("transformers")
    from _llama_head_fixtures import build_head_llama

    return build_head_llama(tmp_path_factory.mktemp("head-llama") / "llama")


# --- the corpus readers ------------------------------------------------------------------------------

def test_every_reader_gives_the_same_result(one_process, tiny_gpt2_dir, tmp_path, monkeypatch):
    corpus, whole = one_process
    lines = corpus_lines(N_TEXTS)
    folder = tmp_path / "folder"
    folder.mkdir()
    for i, line in enumerate(lines):
        (folder / f"{i:03d}.txt").write_text(line + "\n")
    (folder / "notes.md").write_text("not a text of the corpus")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "body": line}) + "\n" for i, line in enumerate(lines)))
    sources = [[folder], [jsonl, "--field", "body"]]
    datasets = needed("datasets")
    datasets.Dataset.from_dict({"text": lines}).save_to_disk(str(tmp_path / "ds"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": lines})}).save_to_disk(str(tmp_path / "dd"))
    sources += [[tmp_path / "ds"], [tmp_path / "dd", "--field", "body", "--split", "train"]]
    for source in sources:
        assert_docs_equal(cli(["stats", *source, "--transformer", tiny_gpt2_dir, "--json"]), whole)
    from typer.testing import CliRunner

    import attncli.cli.app as cli_app
    from attncli.cli.main import app

    cli_app._consoles.clear()
    result = CliRunner().invoke(app, ["stats", "-", "--transformer", str(tiny_gpt2_dir), "--json"],
                                input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.stderr
    assert_docs_equal(json.loads(result.stdout), whole)


def test_max_texts_and_max_tokens_bound_the_run(one_process, tiny_gpt2_dir, gpt2_model):
    corpus, _ = one_process
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--max-texts", 5, "--json"])
    assert doc["texts"] == 5
    assert_same_stats(doc, brute_force(gpt2_model, corpus_lines(N_TEXTS)[:5]))
    lengths = [len(gpt2_model.encode(t).ids) for t in corpus_lines(N_TEXTS)]
    budget = sum(lengths[:7]) + lengths[7] - 1  # the eighth text would pass it
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--max-tokens", budget, "--json"])
    assert doc["texts"] == 7 and doc["tokens"] == sum(lengths[:7])


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
    from attncli.stats.shards import _checksum

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


def test_a_damaged_shard_is_named_and_skipped(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 10)
    out, first = tmp_path / "out", tmp_path / "first"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 5])
    first.mkdir()
    (first / "shard-000000000000-000000000005.json").write_bytes((out / "shard-000000000000-000000000005.json").read_bytes())
    damaged = out / "shard-000000000005-000000000010.json"
    text = damaged.read_text()
    damaged.write_text(text.replace('"texts": 5', '"texts": 6'))  # valid JSON, one number changed
    r = cli(["stats", "merge", out])
    assert said(r, damaged.name) and said(r, "checksum")
    doc = cli(["stats", "merge", out, "--json"])
    assert_docs_equal(doc, cli(["stats", "merge", first, "--json"]))
    damaged.write_text(text[: len(text) // 2])  # cut short
    r = cli(["stats", "merge", out])
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


def test_the_terminal_view_and_exports(one_process, tiny_gpt2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    corpus, _ = one_process
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--svg", tmp_path / "s.svg", "--html", tmp_path / "s.html"])
    for title in ("sink: mean attention", "entropy", "previous token", "duplicate token", "induction", "layer 1"):
        assert title in r.stdout
    assert "<svg" in (tmp_path / "s.svg").read_text() and "<html" in (tmp_path / "s.html").read_text().lower()


def test_patterns_come_from_a_trace_when_the_model_traces(gpt2_model):
    """The one seam the statistics read: ``model.trace(enc, keep="blocks.*.attn.pattern")`` when the
    model has it, stacked by layer; else ``model.attentions(enc)``."""
    from attncli.stats.runner import patterns
    from attncli.transformer.trace import Keep, Trace

    enc = gpt2_model.encode("the cat sat on the mat")
    A = gpt2_model.attentions(enc)  # (L, h, T, T)
    asked = []

    class Tracing:
        layers = gpt2_model.layers

        def trace(self, enc, keep):
            asked.append(keep)
            sites = {f"blocks.{l}.attn.pattern": A[l] * (l + 2) for l in range(self.layers)}  # marked per layer
            return Trace(enc.ids, sites)

        def attentions(self, enc):
            raise AssertionError("a tracing model is read through its trace")

    (got,) = patterns(Tracing(), [enc])
    np.testing.assert_array_equal(got, A * (np.arange(gpt2_model.layers) + 2)[:, None, None, None])
    assert asked and all("blocks.3.attn.pattern" in Keep.of(k) and "blocks.0.attn.z" not in Keep.of(k) for k in asked)
    np.testing.assert_array_equal(patterns(gpt2_model, [enc])[0], A)


def test_text_from_the_corpus_is_shown_escaped(one_process):
    """A context (the model's own token strings) and a model name reach the terminal and the
    exports with their control characters escaped; the JSON keeps the exact text."""
    import copy
    import io

    from rich.console import Console

    from attncli.views.stats_view import stats_caption, stats_renderables

    doc = copy.deepcopy(one_process[1])
    for heads in doc["top"].values():
        for entry in heads:
            for e in entry["examples"]:
                e["context"] = "the \x1b[2J\x1b]0;owned\x07 [cat]"
    doc["model"]["name"] = "evil\x1b[31m"
    console = Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None)
    for part in stats_renderables(doc, 200):
        console.print(part)
    shown = console.file.getvalue() + stats_caption(doc)
    assert "\\x1b[2J" in shown and "\x1b[2J" not in shown and "\x07" not in shown and "\x1b[31m" not in shown


def test_transformers_own_attention_gives_the_same_statistics(one_process, tiny_gpt2_dir):
    """The torch backend (transformers' eager attention, float32) against attn's NumPy path."""
    needed("torch")
    needed("transformers")
    corpus, whole = one_process
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--backend", "torch", "--json"])
    for name, stat in whole["stats"].items():
        assert doc["stats"][name]["count"] == stat["count"], name
        np.testing.assert_allclose(doc["stats"][name]["mean"], stat["mean"], rtol=0, atol=2e-5, err_msg=name)


def test_the_corpus_streams(gpt2_model):
    """An endless corpus with --max-texts ends; chunks are taken from the reader as they are
    computed (at most ``inflight`` ahead), never read whole first."""
    import itertools

    from attncli.stats.accumulate import Settings
    from attncli.stats.runner import ModelSpec, bounded, run

    read = []

    def endless():
        for n in itertools.count():
            read.append(n)
            yield "the cat sat on the mat"

    out = run(gpt2_model, endless(), spec=ModelSpec("x"), settings=Settings(), max_texts=10, shard_texts=3)
    assert out.acc.texts == 10 and len(read) == 10 and out.shards == 4
    pending, most = set(), [0]

    def submit(start, texts):
        pending.add(start)
        most[0] = max(most[0], len(pending))
        return start

    def get(start):
        pending.discard(start)
        return start

    assert list(bounded(((s, []) for s in range(10)), submit, get, 2)) == list(range(10)) and most[0] == 2


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
    from attncli.stats.runner import load_work

    other = tmp_path / "other"  # the same model with one weight changed: another fingerprint
    import shutil

    shutil.copytree(tiny_gpt2_dir, other)
    weights = other / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    from attncli.stats.runner import identity

    with pytest.raises(RuntimeFailure, match="not the one the run started on"):
        load_work(ModelSpec(str(other)), Settings(), identity(gpt2_model))
