"""Tests written for the mutants of the sampled mutmut run of the lm wing (2026-11-25;
docs/mutation.md (its git history), "Sampled run"): the training options' ranges, the learning-rate schedule,
the training loop's time budget and progress figures, what a training run stores, the damaged
config.json messages and Brown's held-out text. Each checks a documented behaviour against a
reference written here: the ranges of ``attn train-attention --help``, a formula worked by hand,
hashlib, torch's own modules. Training runs here are tiny (a few dozen tokens, width 8)."""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needed

from _attention_fixtures import make_random_attention, make_vectors, random_config
from attncli import paths
from attncli.errors import BadInput, UnknownWord
from attncli.lm import checkpoint, data as lm_data, model as trained, torch_model, train as train_attention, training_loop
from attncli.lm.train_config import TrainConfig
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
    np.testing.assert_allclose(losses, before, rtol=1e-5)


# -- model_from_weights: the reference model carries exactly the stored weights -----------------------


def test_the_torch_reference_refuses_weights_it_does_not_have_or_lacks():
    config, weights = make_random_attention("rand", layers=1, heads=2)
    table = np.zeros((3, 16), dtype=np.float32)
    torch_model.model_from_weights(table, config, weights)  # all of them: accepted
    missing = {k: v for k, v in weights.items() if k != "head.bias"}
    with pytest.raises(RuntimeError, match="Missing key"):
        torch_model.model_from_weights(table, config, missing)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        torch_model.model_from_weights(table, config, dict(weights, extra=np.zeros(3, dtype=np.float32)))


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
    np.testing.assert_allclose(model.pe[:, 0::2].numpy(), np.sin(t / 10000 ** (2 * i / 8)), atol=1e-6)
    np.testing.assert_allclose(model.pe[:, 1::2].numpy(), np.cos(t / 10000 ** (2 * i / 8)), atol=1e-6)
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


# -- checkpoint.config_problem: a stranger's config.json ---------------------------------------------------

_DROP = object()


@pytest.mark.parametrize("change, problem", [
    ({"layers": 0}, "layers is 0, not a whole number >= 1"),
    ({"d_model": "16"}, "d_model is '16', not a whole number >= 1"),
    ({"heads": True}, "heads is True, not a whole number >= 1"),
    ({"d_ff": _DROP}, "d_ff is missing, not a whole number >= 1"),
    ({"output_vocab_size": 2.0}, "output_vocab_size is 2.0, not a whole number >= 1"),
    ({"heads": 3}, "heads 3 does not divide d_model 16"),
    ({"layer_norm_eps": -1.0}, "layer_norm_eps is -1.0, not a number > 0"),
    ({"layer_norm_eps": 0}, "layer_norm_eps is 0, not a number > 0"),
    ({"layer_norm_eps": math.nan}, "layer_norm_eps is nan, not a number > 0"),
    ({"layer_norm_eps": math.inf}, "layer_norm_eps is inf, not a number > 0"),
    ({"layer_norm_eps": True}, "layer_norm_eps is True, not a number > 0"),
    ({"layer_norm_eps": "1e-5"}, "layer_norm_eps is '1e-5', not a number > 0"),
    ({"layer_norm_eps": _DROP}, "layer_norm_eps is missing, not a number > 0"),
    ({"positions": "rotary"}, "positions is 'rotary', not 'sinusoidal' (the only encoding attn's model adds)"),
    ({"layer_norm_eps": 1}, None), ({"layer_norm_eps": 1e-12}, None), ({"positions": _DROP}, None),
    ({"format_version": -1}, "format_version is -1, not a version number"),
    ({"format_version": "1"}, "format_version is '1', not a version number"),
    ({"format_version": True}, "format_version is True, not a version number"),
    ({"format_version": 0}, None), ({"format_version": _DROP}, None),  # no version: the first format
    ({"layers": 1}, None), ({"layers": 64}, None), ({"layers": 65}, "layers is 65, more than 64"),
    ({"d_ff": 64 * 65_536}, None), ({"d_ff": 64 * 65_536 + 1}, "d_ff is 4194305, more than 4,194,304"),
    ({"vectors_sha256": 5}, "vectors_sha256 is 5, not a string"),
    ({"vectors_sha256": "ab"}, None), ({"vectors_sha256": None}, None),
])
def test_config_problem_names_the_field_and_its_value(change, problem):
    config = random_config(16, 2, 4, 12)
    for key, value in change.items():
        if value is _DROP:
            del config[key]
        else:
            config[key] = value
    assert checkpoint.config_problem(config) == problem


def _parameters(d: int, layers: int, d_ff: int, n_out: int) -> int:
    """The stored parameters of the model, counted by hand: W_in and b_in; per layer two LayerNorms
    (2d each), W_qkv and b_qkv (3d^2 + 3d), W_o and b_o (d^2 + d), the MLP (2 d d_ff + d_ff + d);
    the final LayerNorm (2d), the head (n_out d + n_out)."""
    return d * d + d + layers * (4 * d * d + 9 * d + 2 * d * d_ff + d_ff) + 2 * d + n_out * (d + 1)


@pytest.mark.parametrize("d_ff, n_out, problem", [
    (3_000_058, 199_558, None),  # 400,000,000 parameters exactly: the most a config may make
    (3_000_057, 199_560, "its sizes make 400,000,001 parameters, more than 400,000,000"),
])
def test_a_config_may_make_400_million_parameters_and_no_more(d_ff, n_out, problem):
    config = dict(random_config(64, 1, 4, n_out), d_ff=d_ff)
    assert _parameters(64, 1, d_ff, n_out) == (400_000_000 if problem is None else 400_000_001)
    assert checkpoint.config_problem(config) == problem


def _attention_dir(name: str):
    return store.model_dir(name).resolve() / checkpoint.SUBDIR  # the version directory the name links to


def test_a_damaged_config_or_weight_is_named_with_the_models_path():
    config, weights = make_random_attention("rand", layers=1, heads=2)
    damaged = f"the trained attention of model 'rand' at {paths.models_dir() / 'rand' / 'attention'} is damaged"
    np.savez(_attention_dir("rand") / checkpoint.WEIGHTS, **dict(weights, **{"blocks.0.mlp.2.bias": np.full(16, np.nan, np.float32)}))
    with pytest.raises(store.CorruptModel) as caught:
        trained.load_trained("rand")
    assert str(caught.value) == f"{damaged}: blocks.0.mlp.2.bias holds NaN or infinite values; retrain it"
    (_attention_dir("rand") / checkpoint.CONFIG).write_text(json.dumps(dict(config, layers=0)))
    with pytest.raises(store.CorruptModel) as caught:
        trained.load_trained("rand")
    assert str(caught.value) == (f"{damaged}: in its config.json, layers is 0, not a whole number >= 1; "
                                 "retrain it with 'attn train-attention'")


def _load_error(name: str = "rand") -> str:
    with pytest.raises(store.CorruptModel) as caught:
        trained.load_trained(name)
    return str(caught.value)


def test_a_config_that_is_not_attns_or_is_newer_is_refused_with_its_reason():
    config, _ = make_random_attention("rand", layers=1, heads=2)
    damaged = f"the trained attention of model 'rand' at {paths.models_dir() / 'rand' / 'attention'} is damaged"
    config_file = _attention_dir("rand") / checkpoint.CONFIG
    for stranger in ([config], dict(config, format="other"), {"d_model": 16}):
        config_file.write_text(json.dumps(stranger))
        assert _load_error() == f"{damaged}: config.json is not an attn attention description; retrain it"
    config_file.write_text(json.dumps(dict(config, format_version=2)))  # this attn writes version 1
    assert _load_error() == "the trained attention of model 'rand' was written by a newer attn: upgrade attn"
    config_file.unlink()
    config_file.mkdir()  # not a regular file
    message = _load_error()
    assert message.startswith(f"{damaged} (config.json: ") and message.endswith("): retrain it with 'attn train-attention'")


def test_attention_of_another_width_than_its_vectors_is_refused():
    config, weights = make_random_attention("rand", layers=1, heads=2)  # 16 wide
    make_vectors("narrow", ["the", "cat"], d=8)
    src = store.model_dir("narrow")
    train_attention.save("narrow", src, config, weights, ["the", "<unk>", "</s>"], ["the cat"], store.read_meta(src))
    assert _load_error("narrow") == (
        f"the trained attention of model 'narrow' at {paths.models_dir() / 'narrow' / 'attention'} is damaged: it is "
        "16 wide but the model's vectors have 8 dims; retrain it with 'attn train-attention'")


def test_a_reader_of_one_version_gets_that_versions_vectors(tmp_path):
    """Every file of a load comes from the version directory it was handed (load_trained's
    docstring): a reader still on the old version while a retrain swapped the name in gets the
    old vectors, not the new ones."""
    import shutil

    make_random_attention("rand", layers=1, heads=2, seed=0)
    old = tmp_path / "old-version"
    shutil.copytree(store.model_dir("rand").resolve(), old)
    old_cat = np.load(old / "vectors.npy")[(old / "vocab.txt").read_text().split("\n").index("cat")]
    make_random_attention("rand", layers=1, heads=2, seed=1)  # the retrain: new vectors under the name
    att = trained.load_trained("rand", model_directory=old)
    np.testing.assert_array_equal(att.vectors.vector("cat"), old_cat)
    assert not np.array_equal(trained.load_trained("rand").vectors.vector("cat"), old_cat)


def test_a_loaded_attention_keeps_its_vectors_when_a_retrain_replaces_the_model():
    """load_trained reads the vectors at once, from its version (memory-mapped): an open session
    (attn explore) keeps working when a training elsewhere swaps the name and removes that version."""
    make_random_attention("rand", layers=1, heads=2, seed=0)
    version = store.model_dir("rand").resolve()
    att = trained.load_trained("rand")
    before = np.array(np.load(version / "vectors.npy"))  # (V, d)
    make_random_attention("rand", layers=1, heads=2, seed=1)
    assert not version.exists()  # the old version is gone
    np.testing.assert_array_equal(att.vectors.vector("cat"), before[att.vectors.words.index("cat")])


def test_the_attentions_vectors_are_its_own_models(monkeypatch):
    make_random_attention("other", layers=1, heads=2, seed=5)
    make_random_attention("rand", layers=1, heads=2)
    monkeypatch.setenv("ATTN_MODEL", "other")  # the default model is another one
    att = trained.load_trained("rand")
    assert att.vectors.name == "rand"
    with pytest.raises(UnknownWord, match="'rand'"):  # what is said of its vectors names this model
        att.vectors.vector("zzzz")


# -- TrainedAttention.trace: every field of every layer -----------------------------------------------


def test_every_field_of_a_layer_trace_is_the_papers_model():
    """LayerTrace's fields against torch (tests/test_lm_reference.py's model written from the papers):
    the stream entering each layer, Q, K, V split into heads, the scaled scores (-inf above the
    diagonal), the weights, the context and the attention output; the stream float32, as stored."""
    from test_lm_reference import reference_forward, stored

    F = torch.nn.functional
    make_random_attention("rand", layers=2, heads=4)
    tokens = "the old man saw the cat".split()
    config, w, vectors = stored("rand")
    weights, _, outputs, stream = reference_forward(config, w, vectors, tokens, everything=True)
    T, d, h, d_k = len(tokens), 16, 4, 4
    above = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T) the future
    for layer, tr in enumerate(trained.load_trained("rand").trace(tokens)):
        p = f"blocks.{layer}."
        a = F.layer_norm(torch.tensor(stream[layer]), (d,), w[p + "ln1.weight"], w[p + "ln1.bias"], 1e-5)  # (T, d)
        q, k, v = (m.reshape(T, h, d_k).transpose(0, 1).numpy()  # (h, T, d_k)
                   for m in F.linear(a, w[p + "attn.in_proj_weight"], w[p + "attn.in_proj_bias"]).chunk(3, dim=-1))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d_k)  # (h, T, T)
        for got, want in [(tr.x, stream[layer]), (tr.q, q), (tr.k, k), (tr.v, v), (tr.weights, weights[layer]),
                          (tr.context, weights[layer] @ v), (tr.output, outputs[layer])]:
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
        assert tr.x.dtype == np.float32  # each layer hands the next a float32 stream
        assert np.isneginf(tr.scores[:, above]).all() and np.isfinite(tr.scores[:, ~above]).all()
        np.testing.assert_allclose(tr.scores[:, ~above], scores[:, ~above], rtol=0, atol=1e-4)


# -- TrainedAttention.embed_vectors: float32 whatever the caller's array --------------------------------


def test_the_first_layer_input_is_the_same_from_float64_and_float32_vectors():
    """`attn matrix --proj trained` hands float64 rows of float32 vectors, the trace float32: the
    stored float32 model gives both the very same numbers."""
    make_random_attention("rand", layers=1, heads=2)
    att = trained.load_trained("rand")
    e = np.stack([att.vectors.vector(w) for w in "the old man saw the cat".split()]).astype(np.float32)  # (T, d)
    np.testing.assert_array_equal(att.embed_vectors(e.astype(np.float64)), att.embed_vectors(e))


# -- data.brown_texts: the held-out documents' text ---------------------------------------------------


class StubBrown:
    """nltk's Brown reader over 20 one-sentence documents."""

    def __init__(self):
        self.docs = {f"c{i:02d}": [[f"w{i}", ",", "``", "hi", "''", "."]] for i in range(20)}

    def fileids(self):
        return list(self.docs)

    def sents(self, fileid):
        return self.docs[fileid]


def test_brown_texts_are_the_held_out_documents_of_the_training_split(monkeypatch):
    import nltk.corpus

    stub = StubBrown()
    monkeypatch.setattr(nltk.corpus, "brown", stub)
    split = lm_data.split_documents(list(stub.docs.items()), heldout_fraction=0.1, seed=0, max_len=80)
    assert split.heldout_docs == 2  # 10% of 20 documents
    texts = lm_data.brown_texts(100)
    assert texts == [f'{s[0]}, "hi".' for s in split.heldout]  # Treebank-detokenized, `` '' as "
    assert len(texts) == 2 and lm_data.brown_texts(1) == texts[:1]
    assert len(lm_data.brown_texts(100, heldout_fraction=0.25)) == 5
