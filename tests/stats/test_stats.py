"""``attn stats``: head statistics over a corpus equal a plain query-by-query count, whether the
corpus runs in one process, in four shards merged, in two worker processes, or killed after a
shard and resumed; the planted heads of the hand-built Llama each top their own statistic; every
reader gives the same texts; the statistics come through the trace seam when a model traces.
Bad input and damaged shards: test_stats_input.py; Ray: test_stats_ray.py."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from _stats_helpers import assert_docs_equal, assert_same_stats, brute_force, cli, corpus_lines, write_corpus
from _tolerance import f32_close
from _transformer_fixtures import SIZES
from conftest import needed

needed("tokenizers")
needed("safetensors")

N_TEXTS = 30
EXACT = ["--precision", "float64"]  # compared to 1e-12 (the float32 pass: test_stats_batch.py)


@pytest.fixture(scope="module")
def gpt2_model(tiny_gpt2_dir):
    from attncli.hf import load

    return load(str(tiny_gpt2_dir), backend="numpy")


@pytest.fixture(scope="module")
def one_process(tiny_gpt2_dir, tmp_path_factory) -> tuple[Path, dict]:
    corpus = write_corpus(tmp_path_factory.mktemp("stats") / "corpus.txt", N_TEXTS)
    return corpus, cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--json"])


def test_one_process_equals_a_plain_count(one_process, gpt2_model):
    corpus, doc = one_process
    assert doc["texts"] == N_TEXTS and doc["shards"] == 1 and doc["ranges"] == [[0, N_TEXTS]]
    assert doc["probes"] == len(range(0, N_TEXTS, 4)) and doc["stats"]["induction"]["count"] > 0
    assert_same_stats(doc, brute_force(gpt2_model, corpus_lines(N_TEXTS)))


def test_four_merged_shards_equal_one_process(one_process, tiny_gpt2_dir, tmp_path):
    corpus, whole = one_process
    out = tmp_path / "shards"
    run = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", out, "--shard-texts", 8, "--json"])
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
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--workers", 2, "--shard-texts", 8, "--json"])
    assert doc["shards"] == 4 and doc["computed"] == 4 and doc["ran"] == {"on": "processes", "workers": 2}
    assert_docs_equal(doc, whole)


def test_an_encoder_has_no_induction_and_equals_a_plain_count(tiny_bert_dir, tmp_path):
    from attncli.hf import load

    corpus = write_corpus(tmp_path / "c.txt", 12, seed=3)
    doc = cli(["stats", corpus, "--transformer", tiny_bert_dir, *EXACT, "--json", "--shard-texts", 5])
    assert doc["stats"]["induction"]["mean"] is None and doc["probes"] == 0
    assert_same_stats(doc, brute_force(load(str(tiny_bert_dir), backend="numpy"), corpus_lines(12, seed=3)))


def test_killed_after_a_shard_and_resumed_equals_an_uninterrupted_run(one_process, tiny_gpt2_dir, tmp_path):
    from _pause import PYTHON, paused

    corpus, whole = one_process
    out = tmp_path / "run"
    argv = [PYTHON, "-m", "attncli", "stats", str(corpus), "--transformer", str(tiny_gpt2_dir), *EXACT, "--out", str(out),
            "--shard-texts", "8", "--json"]
    with paused(argv, tmp_path / "home", "stats-shard-written") as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert [p.name for p in out.iterdir() if p.name.startswith("shard-")] == ["shard-000000000000-000000000008.json"]
    resumed = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", out, "--shard-texts", 8, "--json"])
    assert resumed["computed"] == 3 and resumed["shards"] == 4 and resumed["texts"] == N_TEXTS
    assert_docs_equal(resumed, whole)
    again = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", out, "--shard-texts", 8, "--json"])
    assert again["computed"] == 0 and again["texts"] == N_TEXTS  # nothing counted twice
    assert_docs_equal(again, whole)


def test_ctrl_c_after_a_shard_says_the_same_command_resumes(tiny_gpt2_dir, tmp_path):
    """Ctrl-C with --out: exit 130 and one line that names the folder and says the run resumes."""
    from _pause import PYTHON, paused

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the cat sat on mat {i}\n" for i in range(16)), encoding="utf-8")
    out = tmp_path / "run"
    argv = [PYTHON, "-m", "attncli", "stats", str(corpus), "--transformer", str(tiny_gpt2_dir), *EXACT, "--out",
            str(out), "--shard-texts", "8"]
    with paused(argv, tmp_path / "home", "stats-shard-written") as proc:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-600:]
    assert stderr.strip().splitlines()[-1] == (f"interrupted; the finished shards are kept in {out}: the same "
                                               "command resumes from them")


def test_a_resume_with_other_chunks_never_overlaps_a_shard(one_process, tiny_gpt2_dir, tmp_path):
    corpus, whole = one_process
    out = tmp_path / "run"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", out, "--shard-texts", 7, "--max-texts", 10])
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", out, "--shard-texts", 8, "--json"])
    assert_docs_equal(doc, whole)
    assert_docs_equal(cli(["stats", "merge", out, "--json"]), whole)
    # a gap before a shard (one lost): the chunk that fills it stops where the next shard starts
    gap = tmp_path / "gap"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", gap, "--shard-texts", 5])
    (gap / "shard-000000000005-000000000010.json").unlink()
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--out", gap, "--shard-texts", 8, "--json"])
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
        assert_docs_equal(cli(["stats", *source, "--transformer", tiny_gpt2_dir, *EXACT, "--json"]), whole)
    from typer.testing import CliRunner

    import attncli.cli.common as cli_app
    from attncli.cli.main import app

    cli_app._consoles.clear()
    result = CliRunner().invoke(app, ["stats", "-", "--transformer", str(tiny_gpt2_dir), *EXACT, "--json"],
                                input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.stderr
    assert_docs_equal(json.loads(result.stdout), whole)


def test_max_texts_and_max_tokens_bound_the_run(one_process, tiny_gpt2_dir, gpt2_model):
    corpus, _ = one_process
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--max-texts", 5, "--json"])
    assert doc["texts"] == 5
    assert_same_stats(doc, brute_force(gpt2_model, corpus_lines(N_TEXTS)[:5]))
    lengths = [len(gpt2_model.encode(t).ids) for t in corpus_lines(N_TEXTS)]
    budget = sum(lengths[:7]) + lengths[7] - 1  # the eighth text would pass it
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *EXACT, "--max-tokens", budget, "--json"])
    assert doc["texts"] == 7 and doc["tokens"] == sum(lengths[:7])


def test_the_terminal_view_and_exports(one_process, tiny_gpt2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    corpus, _ = one_process
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--svg", tmp_path / "s.svg", "--html", tmp_path / "s.html"])
    for title in ("sink: mean attention", "entropy", "previous token", "duplicate token", "induction", "layer 1"):
        assert title in r.stdout
    assert "<svg" in (tmp_path / "s.svg").read_text() and "<html" in (tmp_path / "s.html").read_text().lower()


def test_patterns_come_from_a_trace_when_the_model_traces(gpt2_model):
    """The one seam the statistics read: ``model.trace(enc, keep="blocks.*.attn.pattern")`` when the
    model has a traced pass (``traced``), stacked by layer; else ``model.attentions(enc)``."""
    from attncli.stats.chunk_work import patterns
    from attncli.model.trace import Keep, Trace

    enc = gpt2_model.encode("the cat sat on the mat")
    A = gpt2_model.attentions(enc)  # (L, h, T, T)
    asked = []

    class Tracing:
        layers = gpt2_model.layers
        can = frozenset({"trace"})  # model/interface.py: a traced pass, no batch

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
        # float32 on both sides (tests/_tolerance.py): the tiny GPT-2's layers and widest reduction
        f32_close(doc["stats"][name]["mean"], stat["mean"], depth=SIZES["layers"],
                  length=max(SIZES["hidden"], SIZES["intermediate"]), what=name)


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
