"""Tests written for the mutants of the second sampled mutmut run of the lm wing (seed 1;
docs/mutation.md (its git history), "Second sample (seed 1)"): tokens counted without padding, epochs_done's
three decimals, retraining a model that has attention, the thread count from the load
average, Brown's documents, the positions a config without the field names. Each checks a
documented behaviour against a reference written here (counts worked by hand, a fake nltk corpus
with its expected result written out). Training runs here are tiny (a few dozen tokens, width 8)."""

from __future__ import annotations

import json
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from _attention_fixtures import SENTENCES, make_random_attention, make_vectors
from test_mutation_kills_lm_2 import FakeClock
from attncli.cli.main import app
from attncli.lm import checkpoint, data as lm_data, model as trained, torch_model, train as train_attention, training_loop
from attncli.lm.train_config import TrainConfig
from attncli.vectors import store

torch = needed("torch")

D, N_OUT = 8, 5


def _tiny_model(cfg: TrainConfig):
    table = np.random.default_rng(0).normal(size=(10, D)).astype(np.float32)  # (U, d)
    torch.manual_seed(0)
    return torch_model.build_model(table, cfg, N_OUT, 8)


def test_seen_tokens_count_real_targets_not_the_padding_of_shorter_sentences():
    """Sentences of 2 and 6 targets in one 16-token batch: each step pads the short one to 6, but
    only 8 targets are real; 3 epochs see 3 x 8 = 24 tokens (with the padding counted: 3 x 12 = 36)."""
    rng = np.random.default_rng(1)
    train_set = [(rng.integers(0, 10, n).astype(np.int64), rng.integers(0, N_OUT, n).astype(np.int64)) for n in (2, 6)]
    cfg = TrainConfig(layers=1, heads=2, epochs=3, batch_tokens=16)
    fit = training_loop.fit(_tiny_model(cfg), train_set, cfg, np.random.default_rng(0), None)
    assert fit["steps"] == 3 and fit["seen_tokens"] == 3 * (2 + 6)


@pytest.mark.parametrize("cores, load, expected", [
    (4, 2.0, 2),  # 2 idle
    (4, 1.4, 3),  # 2.6 idle: rounded to 3
    (4, 1.6, 2),  # 2.4 idle: rounded to 2
    (2, 0.0, 2),  # idle machine: every core
    (2, 5.0, 1),  # overloaded: still 1
])
def test_auto_threads_takes_the_idle_cores_rounded(monkeypatch, cores, load, expected):
    monkeypatch.setattr(training_loop.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(training_loop.os, "getloadavg", lambda: (load, load, load))
    assert training_loop.auto_threads() == expected


def test_brown_documents_are_every_file_in_order_with_empty_sentences_dropped(monkeypatch):
    """A fake nltk Brown of two files: every file kept in order, as (fileid, sentences), tokens
    normalized (lower case), a sentence left empty by normalization dropped."""
    files = {"ca01": [["The", "Cat", "sat"], [], ["A", "dog"]], "cb02": [["Old", "man"]]}
    fake_brown = SimpleNamespace(fileids=lambda: list(files), sents=lambda fileid: files[fileid])
    corpus = ModuleType("nltk.corpus")
    corpus.brown = fake_brown
    monkeypatch.setitem(sys.modules, "nltk.corpus", corpus)
    assert lm_data.brown_documents() == [
        ("ca01", [["the", "cat", "sat"], ["a", "dog"]]),
        ("cb02", [["old", "man"]]),
    ]


# -- train: what a run stores ---------------------------------------------------------------------------

WORDS = "the a cat dog sat ran on mat park old man saw".split()


def _train(source: str, name: str, documents, **options):
    cfg = TrainConfig(**{"layers": 1, "heads": 2, "epochs": 2, "vocab_size": 6, "max_len": 8, "batch_tokens": 16,
                         "threads": 1, "seed": 3, "heldout": 0.5, **options})
    threads = torch.get_num_threads()
    try:
        return train_attention.train(source, name, cfg, documents=documents)
    finally:
        torch.set_num_threads(threads)


def test_epochs_done_keeps_three_decimals(monkeypatch):
    """One training document of 3 sentences of 8 words (8 targets each, 24 in all), 16-token
    batches (2 sentences, then 1); a time budget that stops it after the first step: 16 or 8 of
    the 24 targets seen, epochs_done 0.667 or 0.333 (three decimals, as the record states)."""
    make_vectors("v", WORDS, d=8)
    monkeypatch.setattr(training_loop, "time", SimpleNamespace(perf_counter=FakeClock()))
    sentence = WORDS[:8]
    docs = [("d0", [sentence, sentence[::-1], sentence[1:] + sentence[:1]]), ("d1", [WORDS[8:]])]
    att = _train("v", "frac", docs, epochs=10, max_minutes=0.3 / 60).attention
    assert att["train_targets"] == 24 and att["stopped_early"] is True and att["steps"] == 1
    assert att["epochs_done"] in (0.667, 0.333)


def test_training_from_a_model_with_attention_replaces_its_attention():
    """The source's attention/ is copied with the model, then replaced whole by the new training."""
    make_random_attention("rand", layers=2, heads=4)  # width 16
    docs = [(f"d{i}", [s.split()]) for i, s in enumerate(SENTENCES)]
    _train("rand", "again", docs, layers=1, heads=2)
    att = trained.load_trained("again")
    assert (att.layers, att.heads, att.d_model) == (1, 2, 16)
    assert not any(k.startswith("blocks.1.") for k in att.w)  # nothing of the old second layer left
    assert trained.load_trained("rand").layers == 2  # the source keeps its own


def test_a_config_without_positions_is_described_as_sinusoidal():
    """positions may be left out of config.json (the default, and only encoding, is sinusoidal);
    attn matrix --proj trained then names the sinusoidal encoding in its settings."""
    make_random_attention("rand", layers=1, heads=2)
    path = store.model_dir("rand") / checkpoint.SUBDIR / checkpoint.CONFIG
    config = json.loads(path.read_text())
    del config["positions"]
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["matrix", "the cat sat", "--proj", "trained", "--head", "0", "--model", "rand", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["settings"]["positions"] == "the trained model's own (sinusoidal)"
