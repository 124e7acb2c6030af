"""attribution.attribute_together (attn attribute --pairs) on the models test_attribution_together.py
leaves out: the Llama family in float64 (GQA, RoPE of three kinds, Phi-3's partial rotary, sliding
windows, Gemma) and post-LN encoders read at their mask (BERT, MPNet's position bias), at every site
with and without AtP*'s QK fix, pairs whose targets (position, token, contrast) differ: each grid
equals the pair's own ``attribute`` to 1e-12. And a --pairs batch that fails halfway gives the pairs
before the bad one, each equal to one pair at a time, before the error naming the bad line."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _trace_reference import drawn_mlm  # noqa: E402

from attncli.causal import pair_sums  # noqa: E402
from attncli.causal.attribution import SITES, attribute, attribute_together  # noqa: E402
from attncli.causal.pairs_file import Pair  # noqa: E402
from attncli.causal.target import Target, mask_position  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402

TEXTS = ["the cat sat on the mat", "a dog ran to the log", "she sells sea shells on it", "time flies like an arrow"]
MASKED = [("the cat sat on the [MASK] and the dog .", "the dog sat on the [MASK] and the cat ."),
          ("the [MASK] sat on the mat and the dog .", "the [MASK] sat on the dog and the cat ."),
          ("a dog [MASK] on the mat and the cat .", "a cat [MASK] on the mat and the dog .")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    @functools.cache
    def get(kind):
        d = tmp_path_factory.mktemp(kind) / kind
        path = drawn_mlm(kind, d, std=1.0) if kind in ("bert", "mpnet") else build_decoder(kind, d)
        return load(str(path), backend="numpy")
    return get


def _assert_each_pair_alone(model, pairs):
    for where in SITES:
        for qk_fix in (False, True):
            together = attribute_together(model, pairs, where=where, qk_fix=qk_fix)
            assert len(together) == len(pairs)
            for got, (clean, corrupt, target) in zip(together, pairs):
                alone = attribute(model, clean, corrupt, target, where=where, qk_fix=qk_fix)
                assert (got.clean, got.corrupt) == pytest.approx((alone.clean, alone.corrupt), abs=1e-12)
                assert got.values.shape == alone.values.shape
                scale = max(1.0, np.abs(alone.values).max())
                assert np.abs(got.values - alone.values).max() <= 1e-12 * scale, (where, qk_fix)


@pytest.mark.parametrize("kind", ["llama3", "mistral", "qwen2", "gemma", "phi3", "gemma3"])
def test_llama_family_pairs_side_by_side_equal_one_at_a_time_in_float64(built, kind, monkeypatch):
    model = built(kind)
    # the tapes in float64 (the family's pass is float32, where the two agree to float32 rounding:
    # test_attribution_together.py): the side-by-side arithmetic compared at float64's 1e-12
    monkeypatch.setattr(type(model), "pass_dtype", property(lambda self: np.dtype(np.float64)))
    ids = [model.encode(t).ids for t in TEXTS]
    T = min(map(len, ids))
    assert T >= 7  # past every fixture's sliding window
    ids = [i[:T] for i in ids]
    pairs = [(ids[i], ids[i + 1], Target(T - 1 - 2 * i, 7 + i, "t", 11 + 2 * i if i != 1 else None, "c"))
             for i in range(3)]
    _assert_each_pair_alone(model, pairs)


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_encoder_pairs_side_by_side_equal_one_at_a_time(built, kind):
    model = built(kind)
    mask = "<mask>" if kind == "mpnet" else "[MASK]"
    pairs = []
    for i, texts in enumerate(MASKED):
        clean, corrupt = (model.encode(t.replace("[MASK]", mask)).ids for t in texts)
        pairs.append((clean, corrupt, Target(mask_position(model, clean), 7 + i, "t", 20 if i else None, "c")))
    assert len({len(c) for c, _, _ in pairs}) == 1 and len({t.position for _, _, t in pairs}) == 3
    _assert_each_pair_alone(model, pairs)


def test_no_pairs_no_grids(built):
    assert attribute_together(built("llama3"), [], where="head") == []


def test_a_batch_that_fails_halfway_gives_the_pairs_before_it_then_names_the_line(tiny_gpt2_dir, monkeypatch):
    """Batches of two: lines 1-2 run side by side, then 3-4 of which 4's texts give the same metric."""
    gpt2 = load(str(tiny_gpt2_dir), backend="numpy")
    monkeypatch.setattr(pair_sums, "BATCH_ROWS", 2 * len(gpt2.encode(TEXTS[0]).ids))
    a, b = TEXTS[0], "the cat sat on a mat"
    assert len(gpt2.encode(a).ids) == len(gpt2.encode(b).ids)
    pairs = [Pair(1, a, b, "x"), Pair(2, b, a, "y"), Pair(3, a, b, "z", "x"), Pair(4, a, a, "x")]
    job = pair_sums.PairsJob("attribute", site="resid", qk_fix=True)
    values = pair_sums.pair_values(gpt2, job, pairs)
    for pair in pairs[:3]:
        got, want = next(values), pair_sums.one_pair(gpt2, job, pair)
        assert set(got) == set(want)
        for name in want:
            assert np.abs(got[name] - want[name]).max() <= 1e-12 * max(1.0, np.abs(want[name]).max()), name
    with pytest.raises(BadInput, match=r"^--pairs line 4: the clean and corrupted texts give the same"):
        next(values)
