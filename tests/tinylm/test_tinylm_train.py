"""A training run of attn's own LM (attncli/tinylm/train.py): every option's range at both ends (as
``attn train-attention --help`` states them), the learning-rate schedule worked by hand, the time
budget and progress figures under a fake clock, the thread count, the tokens counted, the name
from ATTN_MODEL, and what a run stores (split, architecture, vectors' checksum, epochs done).
Training runs here are tiny (a few dozen tokens, width 8)."""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from attncli.tinylm import checkpoint, torch_model, training_loop
from _attention_fixtures import SENTENCES, make_random_attention, make_vectors
from conftest import needed
from _tolerance import f32_close

from attncli.errors import BadInput
from attncli.tinylm import model as trained, train as train_attention
from attncli.tinylm.train_config import TrainConfig
from attncli.vectors import store


torch = needed("torch")


# -- TrainConfig.check_options: every bounded option at both ends --------------------------------------

# (field, option, lowest, highest): the ranges `attn train-attention --help` states
RANGES = [
    ("layers", "--layers", 1, 64),
    ("heads", "--heads", 1, 1_024),
    ("epochs", "--epochs", 1, 10_000),
    ("vocab_size", "--vocab-size", 2, 10_000_000),
    ("max_len", "--max-len", 2, 4_096),
    ("batch_tokens", "--batch-tokens", 16, 10_000_000),
    ("limit_sentences", "--limit-sentences", 2, 1_000_000_000),
    ("threads", "--threads", 1, 1_024),
]


@pytest.mark.parametrize("field, option, low, high", RANGES)
def test_every_training_option_takes_its_whole_range_and_names_itself_outside_it(field, option, low, high):
    TrainConfig(**{field: low}).check_options()
    TrainConfig(**{field: high}).check_options()
    with pytest.raises(BadInput) as caught:
        TrainConfig(**{field: low - 1}).check_options()
    assert str(caught.value) == f"{option} must be at least {low} (got {low - 1})"
    with pytest.raises(BadInput) as caught:
        TrainConfig(**{field: high + 1}).check_options()
    assert str(caught.value) == f"{option} must be in [{low}, {high:,}] (got {high + 1})"


MINUTES = "--max-minutes must be a number in (0, 10080] (7 days) (got {})"
LR = "--lr must be a number in (0, 10] (got {}); the default is 3e-3"


@pytest.mark.parametrize("field, value, message", [
    ("seed", 0, None), ("seed", 2**32 - 1, None),
    ("seed", -1, "--seed must be in [0, 2^32) (got -1)"), ("seed", 2**32, "--seed must be in [0, 2^32) (got 4294967296)"),
    ("max_minutes", 0.5, None), ("max_minutes", 10_080, None),
    ("max_minutes", 0, "--max-minutes must be positive (got 0)"), ("max_minutes", -1, "--max-minutes must be positive (got -1)"),
    ("max_minutes", 10_080.5, MINUTES.format(10080.5)), ("max_minutes", math.nan, MINUTES.format("nan")),
    ("max_minutes", math.inf, MINUTES.format("inf")),
    ("dropout", 0, None), ("dropout", 0.99, None),
    ("dropout", 1, "--dropout must be in [0, 1) (got 1)"), ("dropout", -0.1, "--dropout must be in [0, 1) (got -0.1)"),
    ("heldout", 0.01, None), ("heldout", 0.99, None),
    ("heldout", 0, "--heldout must be between 0 and 1 (got 0)"), ("heldout", 1, "--heldout must be between 0 and 1 (got 1)"),
    ("lr", 1e-9, None), ("lr", 10, None),
    ("lr", 0, "--lr must be positive (got 0)"), ("lr", -1e-3, "--lr must be positive (got -0.001)"),
    ("lr", 10.5, LR.format(10.5)), ("lr", math.nan, LR.format("nan")), ("lr", math.inf, LR.format("inf")),
])
def test_the_seed_time_and_rate_options_take_their_range_and_refuse_the_rest(field, value, message):
    """The ranges `attn train-attention --help` states: seed 0 to 2^32-1, (0, 10080] minutes,
    dropout [0, 1), heldout (0, 1), lr (0, 10]; NaN and infinity are refused."""
    if message is None:
        TrainConfig(**{field: value}).check_options()
        return
    with pytest.raises(BadInput) as caught:
        TrainConfig(**{field: value}).check_options()
    assert str(caught.value) == message


def test_heads_must_divide_the_width_and_the_message_lists_the_divisors():
    TrainConfig(heads=4).check(16)
    TrainConfig(heads=16).check(16)
    with pytest.raises(BadInput) as caught:
        TrainConfig(heads=5).check(16)
    assert str(caught.value) == ("--heads 5 does not divide the width 16 (the word-vector dimension): "
                                 "use one of 1, 2, 4, 8, 16")
    with pytest.raises(BadInput, match=r"^--layers must be at least 1 \(got 0\)$"):  # and every range first
        TrainConfig(layers=0).check(16)


PARAMS = ("--layers 2 at width 100 with an output vocabulary of 997,501 words makes 100,000,100 parameters "
          "(at most 100,000,000): lower --layers or --vocab-size")
CELLS = ("--batch-tokens {} is too large for this model: a batch would hold about {:,} logits and attention "
         "weights (at most 268,435,456): lower --batch-tokens (or --vocab-size, --layers, --heads)")


@pytest.mark.parametrize("options, d, n_out, longest, message", [
    # parameters (biases aside) = d^2 (W_in) + layers (4 d^2 + 2 d d_ff) + d n_out, d_ff = 4 d: at most 10^8
    ({"layers": 2, "batch_tokens": 16}, 100, 997_500, 10, None),  # 100^2 (1 + 2 * 12) + 100 * 997,500 = 10^8 exactly
    ({"layers": 2, "batch_tokens": 16}, 100, 997_501, 10, PARAMS),
    # a batch's cells = max(batch tokens, T) (n_out + layers heads T), T = min(longest, max_len): at most 2^28
    ({"batch_tokens": 2**20}, 16, 176, 10, None),  # 2^20 (176 + 2 * 4 * 10) = 2^28
    ({"batch_tokens": 2**20 + 1}, 16, 176, 10, CELLS.format(2**20 + 1, (2**20 + 1) * 256)),
    ({"batch_tokens": 2**20, "max_len": 10}, 16, 176, 5000, None),  # sentences cut to 10 tokens
    ({"batch_tokens": 16, "max_len": 4096, "layers": 1, "heads": 1}, 16, 61_440, 4096, None),  # 4096 (61,440 + 4096) = 2^28
    ({"batch_tokens": 16, "max_len": 4096, "layers": 1, "heads": 1}, 16, 61_441, 4096, CELLS.format(16, 4096 * 65_537)),
])
def test_a_model_or_batch_too_large_for_memory_is_refused_at_the_limits(options, d, n_out, longest, message):
    cfg = TrainConfig(**options)
    if message is None:
        cfg.check_size(d, n_out, longest)
        return
    with pytest.raises(BadInput) as caught:
        cfg.check_size(d, n_out, longest)
    assert str(caught.value) == message


# -- _lr_at: linear warm-up, then cosine decay to 10% -----------------------------------------------


@pytest.mark.parametrize("step, progress, expected", [
    (0, 0.0, 0.2 * 1 / 10), (4, 0.9, 0.2 * 5 / 10), (9, 0.0, 0.2),  # warm-up: lr (step + 1) / warm-up steps
    (10, 0.0, 0.2), (50, 0.5, 0.2 * 0.55), (90, 1.0, 0.2 * 0.1),  # 10% + 90% of a half cosine: 1, 0.55, 0.1
    (90, 1.0 / 3, 0.2 * (0.1 + 0.9 * 0.75)), (99, 2.0, 0.2 * 0.1),  # cos(pi/3) = 1/2; past the end: the floor
])
def test_the_learning_rate_warms_up_then_decays_to_a_tenth_on_a_cosine(step, progress, expected):
    cfg = TrainConfig(lr=0.2, warmup_steps=10)
    assert training_loop._lr_at(cfg, step, progress) == pytest.approx(expected, rel=1e-12)


# -- _fit: the time budget, the progress figures ------------------------------------------------------

D, N_OUT = 8, 5


def _tiny_model(cfg: TrainConfig):
    table = np.random.default_rng(0).normal(size=(10, D)).astype(np.float32)  # (U, d)
    torch.manual_seed(0)
    return torch_model.build_model(table, cfg, N_OUT, 8)


def _same_length_set(n: int, rng_seed: int = 1):
    """n sentences of 4 tokens, every target real: 4 sentences = 16 targets fill one 16-token batch."""
    rng = np.random.default_rng(rng_seed)
    return [(rng.integers(0, 10, 4).astype(np.int64), rng.integers(0, N_OUT, 4).astype(np.int64)) for _ in range(n)]


class FakeClock:
    """time.perf_counter for train.py: each reading 0.25 s after the one before, starting at 0."""

    def __init__(self):
        self.now = -0.25

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def _fit_with_clock(monkeypatch, cfg: TrainConfig, train_set):
    clock, seen = FakeClock(), []
    monkeypatch.setattr(training_loop, "time", SimpleNamespace(perf_counter=clock))

    def on_progress(**fields):
        seen.append(dict(fields, now=clock.now))

    fit = training_loop.fit(_tiny_model(cfg), train_set, cfg, np.random.default_rng(0), on_progress)
    return fit, seen


def test_the_training_stops_at_its_time_budget_and_says_so(monkeypatch):
    """8 sentences of 4 tokens, 16 tokens a batch: 2 batches an epoch, 20 steps in 10 epochs; a 3 s budget
    on a clock that moves 0.25 s a reading stops it early, with the steps done so far."""
    cfg = TrainConfig(layers=1, heads=2, epochs=10, batch_tokens=16, max_minutes=3 / 60)
    fit, seen = _fit_with_clock(monkeypatch, cfg, _same_length_set(8))
    assert fit["stopped_early"] is True
    assert 1 <= fit["steps"] < 20 and fit["steps"] == len(seen) and fit["seen_tokens"] == 16 * fit["steps"]
    assert all(s["now"] <= 3.0 + 0.25 for s in seen)  # no step starts after the budget
    whole = training_loop.fit(_tiny_model(cfg), _same_length_set(8), TrainConfig(layers=1, heads=2, epochs=10, batch_tokens=16),
                                 np.random.default_rng(0), None)
    assert whole["stopped_early"] is False and whole["steps"] == 20 and whole["seen_tokens"] == 320


def test_the_progress_reports_steps_epochs_and_tokens_per_second_of_the_clock(monkeypatch):
    cfg = TrainConfig(layers=1, heads=2, epochs=3, batch_tokens=16)
    fit, seen = _fit_with_clock(monkeypatch, cfg, _same_length_set(8))
    assert [s["step"] for s in seen] == [1, 2, 3, 4, 5, 6] and fit["steps"] == 6
    assert [s["epoch"] for s in seen] == [1, 1, 2, 2, 3, 3] and {s["total"] for s in seen} == {6}
    for s in seen:  # tokens so far / seconds since the start (the clock started at 0)
        assert s["tokens_per_s"] == pytest.approx(16 * s["step"] / s["now"], rel=1e-12)


def test_the_reported_loss_is_a_running_average_of_the_step_losses():
    """One batch repeated, at a learning rate too small to move the weights: every step's loss is
    the loss before training (torch's cross-entropy), and so is their running average."""
    cfg = TrainConfig(layers=1, heads=2, epochs=6, batch_tokens=16, lr=1e-9)
    model, train_set = _tiny_model(cfg), _same_length_set(4)
    ids = torch.as_tensor(np.stack([x for x, _ in train_set]))  # (4, 4)
    tgt = torch.as_tensor(np.stack([y for _, y in train_set]))  # (4, 4)
    with torch.no_grad():
        before = float(torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), tgt.flatten()))
    losses = []
    training_loop.fit(model, train_set, cfg, np.random.default_rng(0), lambda **f: losses.append(f["loss"]))
    assert len(losses) == 6
    f32_close(losses, before, depth=cfg.layers + 1, length=cfg.d_ff_mult * D)  # float32 passes (lr 1e-9: steps under the weights' spacing)


# -- train: the name from ATTN_MODEL, the note on replacing attention ---------------------------------


def test_an_unknown_model_named_by_attn_model_says_where_the_name_came_from(monkeypatch):
    monkeypatch.setenv("ATTN_MODEL", "nosuch")
    with pytest.raises(BadInput) as caught:
        train_attention.train(None, None, TrainConfig())
    message = str(caught.value)
    assert message.startswith("unknown model 'nosuch'")
    assert message.endswith(" (the name comes from the ATTN_MODEL environment variable)")
    with pytest.raises(BadInput) as caught:  # a name given by --model: ATTN_MODEL is not its source
        train_attention.train("other", None, TrainConfig())
    assert str(caught.value).startswith("unknown model 'other'") and "ATTN_MODEL" not in str(caught.value)


def test_training_over_a_model_with_attention_says_it_will_replace_it(capsys):
    make_random_attention("rand", layers=1, heads=2)  # width 16
    with pytest.raises(BadInput, match="--heads 5 does not divide the width 16"):
        train_attention.train("rand", None, TrainConfig(heads=5))  # refused after the note
    assert ("model 'rand' already has trained attention: this training replaces it when it finishes "
            "(an interrupted or failed training keeps it)") in " ".join(capsys.readouterr().err.split())  # wrapped or not


# -- train: what a run stores --------------------------------------------------------------------------

WORDS = "the a cat dog sat ran on mat park old man saw".split()


def _documents(n: int, seed: int = 0) -> list[tuple[str, list[list[str]]]]:
    rng = np.random.default_rng(seed)
    return [(f"doc{i}", [list(rng.choice(WORDS, size=int(rng.integers(3, 6)))) for _ in range(4)]) for i in range(n)]


def _train(name: str, documents, **options):
    cfg = TrainConfig(**{"layers": 1, "heads": 2, "epochs": 2, "vocab_size": 6, "max_len": 8, "batch_tokens": 16,
                         "threads": 1, "seed": 3, "heldout": 0.34, **options})
    threads = torch.get_num_threads()
    try:
        return train_attention.train("v", name, cfg, documents=documents)
    finally:
        torch.set_num_threads(threads)


def test_a_training_run_stores_the_split_the_architecture_and_the_vectors_checksum():
    """6 documents of 4 sentences, a third held out: round(0.34 * 6) = 2 documents, 8 sentences."""
    make_vectors("v", WORDS, d=8)
    _train("a", _documents(6))
    config = json.loads((store.model_dir("a") / checkpoint.SUBDIR / checkpoint.CONFIG).read_text())
    record = config["training"]
    assert (record["train_documents"], record["heldout_documents"]) == (4, 2)
    assert (record["train_sentences"], record["heldout_sentences"]) == (16, 8)
    vectors_file = store.model_dir("v") / "vectors.npy"
    assert config["vectors_sha256"] == hashlib.sha256(vectors_file.read_bytes()).hexdigest()
    # the architecture it names is the torch model's: LayerNorm's eps, tanh GELU, pre-LN, sinusoidal positions
    model = torch_model.build_model(np.zeros((2, 8), dtype=np.float32), TrainConfig(layers=1, heads=2), 8, 8)
    assert config["layer_norm_eps"] == model.blocks[0].ln1.eps and model.blocks[0].mlp[1].approximate == "tanh"
    assert (config["norm"], config["activation"], config["positions"]) == ("pre-layernorm", "gelu_tanh", "sinusoidal")
    t, i = np.arange(8)[:, None], np.arange(4)[None, :]  # PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(...)
    f32_close(model.pe[:, 0::2].numpy(), np.sin(t / 10000 ** (2 * i / 8)))  # a float32 table of sines
    f32_close(model.pe[:, 1::2].numpy(), np.cos(t / 10000 ** (2 * i / 8)))
    assert (config["d_model"], config["layers"], config["heads"], config["d_ff"]) == (8, 1, 2, 32)


def test_the_same_seed_trains_the_same_model():
    """--seed fixes the split, the initialisation and the batch order (the option's help): two runs
    with one seed store the same weights and the same sample of held-out sentences."""
    make_vectors("v", WORDS, d=8)
    docs = _documents(6)
    _train("a", docs, heldout_keep=3)
    _train("b", docs, heldout_keep=3)
    a, b = trained.load_trained("a"), trained.load_trained("b")
    assert a.w.keys() == b.w.keys() and all(np.array_equal(a.w[k], b.w[k]) for k in a.w)
    assert a.heldout_sentences() == b.heldout_sentences() and len(a.heldout_sentences()) == 3


def test_epochs_done_counts_passes_over_even_a_single_target():
    """Two one-word documents: one trains (1 target: the end of its sentence), one is held out."""
    make_vectors("v", ["the", "cat"], d=8)
    result = _train("one", [("d0", [["the"]]), ("d1", [["cat"]])], epochs=3, heldout=0.5)
    assert result.attention["train_targets"] == 1 and result.attention["steps"] == 3
    assert result.attention["epochs_done"] == 3.0


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


def _train_from(source: str, name: str, documents, **options):
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
    att = _train_from("v", "frac", docs, epochs=10, max_minutes=0.3 / 60).attention
    assert att["train_targets"] == 24 and att["stopped_early"] is True and att["steps"] == 1
    assert att["epochs_done"] in (0.667, 0.333)


def test_training_from_a_model_with_attention_replaces_its_attention():
    """The source's attention/ is copied with the model, then replaced whole by the new training."""
    make_random_attention("rand", layers=2, heads=4)  # width 16
    docs = [(f"d{i}", [s.split()]) for i, s in enumerate(SENTENCES)]
    _train_from("rand", "again", docs, layers=1, heads=2)
    att = trained.load_trained("again")
    assert (att.layers, att.heads, att.d_model) == (1, 2, 16)
    assert not any(k.startswith("blocks.1.") for k in att.w)  # nothing of the old second layer left
    assert trained.load_trained("rand").layers == 2  # the source keeps its own
