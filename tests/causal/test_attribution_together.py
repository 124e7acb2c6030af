"""Pairs run side by side (attn attribute --pairs): attribution.attribute_together over several
pairs, and hf/methods/backward.py's backward_together over several tapes, equal one pair (one tape) at a
time to float rounding (1e-12 in float64; f32_close in the Llama family's float32 pass); the pairs
runner batches consecutive pairs of one length up to BATCH_ROWS tokens, and a batch that fails
names its pair's line as one pair at a time does."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed
from _tolerance import f32_close, f32_size

needed("torch")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402

from attncli.causal import pair_sums  # noqa: E402
from attncli.causal.attribution import attribute, attribute_together  # noqa: E402
from attncli.causal.pairs_file import Pair  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward import backward_together  # noqa: E402

TEXTS = ["the cat sat on the mat", "a dog ran to the log", "she sells sea shells on it", "time flies like an arrow",
         "the mat sat on a cat", "an arrow flies like time"]


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2_dir):
    return load(str(tiny_gpt2_dir), backend="numpy")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load(str(build_decoder("llama", tmp_path_factory.mktemp("llama"), dtype="bfloat16")), backend="numpy")


def _pairs(model, n=3, tokens=5):
    """``n`` (clean, corrupted, target) of ``tokens`` tokens each, targets and contrasts varied."""
    ids = [model.encode(t).ids[:tokens] for t in TEXTS]
    assert all(len(i) == tokens for i in ids)
    return [(ids[i], ids[i + 1], Target(tokens - 1 - i % 2, 7 + i, "t", 11 + 2 * i, "c")) for i in range(n)]


@pytest.mark.parametrize("where", ["resid", "head", "key", "mlp"])
@pytest.mark.parametrize("qk_fix", [False, True])
def test_pairs_side_by_side_equal_one_at_a_time_in_float64(gpt2, where, qk_fix):
    pairs = _pairs(gpt2)
    together = attribute_together(gpt2, pairs, where=where, qk_fix=qk_fix)
    for got, (c, k, t) in zip(together, pairs):
        alone = attribute(gpt2, c, k, t, where=where, qk_fix=qk_fix)
        assert (got.clean, got.corrupt) == pytest.approx((alone.clean, alone.corrupt), abs=1e-12)
        assert np.abs(got.values - alone.values).max() <= 1e-12 * max(1.0, np.abs(alone.values).max())


@pytest.mark.parametrize("where", ["resid", "head"])
def test_pairs_side_by_side_equal_one_at_a_time_in_float32(llama, where):
    pairs = _pairs(llama, n=4)
    depth, length = f32_size(llama)
    for got, (c, k, t) in zip(attribute_together(llama, pairs, where=where, qk_fix=False), pairs):
        alone = attribute(llama, c, k, t, where=where, qk_fix=False)
        f32_close(got.values * (got.clean - got.corrupt), alone.values * (alone.clean - alone.corrupt), 2 * depth,
                  length, what=f"{where} grid (unnormalised)")


@pytest.mark.parametrize("inputs", [False, True])
def test_one_backward_of_several_tapes_is_each_tapes_own(gpt2, inputs):
    """Every gradient by name (and the inputs' with ``inputs``) of tapes at other positions."""
    rng = np.random.default_rng(0)
    ids = [p[1] for p in _pairs(gpt2, n=3)]
    positions = [4, 2, 0]
    d_logits = [rng.standard_normal(gpt2.vocab_size) for _ in ids]
    tapes = [gpt2.tape() for _ in ids]
    tapes[0].forward_all(tapes, ids)
    together = backward_together(tapes, positions, d_logits, inputs)
    for tape, i, p, d, got in zip(tapes, ids, positions, d_logits, together):
        alone = gpt2.tape()
        alone.forward(i)
        want = alone.backward(p, d, inputs)
        assert set(got) == set(want)
        for name in want:
            assert got[name].shape == want[name].shape, name
            assert np.abs(got[name] - want[name]).max() <= 1e-12 * max(1.0, np.abs(want[name]).max()), name


def test_the_runner_batches_pairs_of_one_length_up_to_its_rows(gpt2, monkeypatch):
    sizes = []
    real = pair_sums.attribute_together
    monkeypatch.setattr(pair_sums, "attribute_together", lambda m, items, **kw: sizes.append(len(items)) or real(m, items, **kw))
    monkeypatch.setattr(pair_sums, "BATCH_ROWS", 2 * len(gpt2.encode(TEXTS[0]).ids))  # two pairs of these
    short = Pair(3, "the cat", "the mat", "x")
    pairs = [Pair(1, TEXTS[0], TEXTS[4], "x"), Pair(2, TEXTS[4], TEXTS[0], "y"), short,
             Pair(4, TEXTS[0], TEXTS[4], "z", "x"), Pair(5, TEXTS[4], TEXTS[0], "x", "y"), Pair(6, TEXTS[0], TEXTS[4], "y")]
    job = pair_sums.PairsJob("attribute", site="head", qk_fix=False)
    got = list(pair_sums.pair_values(gpt2, job, pairs))
    assert sizes == [2, 1, 2, 1]  # lines 1-2, the shorter 3, 4-5 (the rows full), 6
    for values, pair in zip(got, pairs):
        want = pair_sums.one_pair(gpt2, job, pair)
        for name in want:
            assert np.abs(values[name] - want[name]).max() <= 1e-12 * max(1.0, np.abs(want[name]).max()), name


def test_a_batch_that_fails_names_its_pairs_line(gpt2):
    """A pair whose texts give the same metric refuses by its own line inside a batch."""
    job = pair_sums.PairsJob("attribute", site="resid", qk_fix=False)
    pairs = [Pair(1, TEXTS[0], TEXTS[4], "x"), Pair(2, TEXTS[0], TEXTS[0], "x"), Pair(3, TEXTS[4], TEXTS[0], "x")]
    with pytest.raises(BadInput, match=r"^--pairs line 2: the clean and corrupted texts give the same"):
        list(pair_sums.pair_values(gpt2, job, pairs))
