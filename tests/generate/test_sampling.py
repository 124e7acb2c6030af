"""attn generate's choice of the next token (attncli/generate/sampling.py, run.generate): the top-k
cut and its ties, ``sample`` as an inverse CDF worked by hand, float64 probabilities, the top
candidates, and ``generate`` on a decoder with fixed logits (banned tokens, --ignore-eos, seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from attncli.errors import BadInput
from attncli.generate.run import Settings, generate


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# --- sampling.py --------------------------------------------------------------------------------------


@pytest.mark.parametrize("top_k", [1, 5, 17, 40])
def test_the_top_k_cut_breaks_ties_at_the_kth_logit_by_token_id(top_k):
    """The kept set against Python's sorted on (-logit, id) (the docstring: ties go to the lower
    id), on 64 logits with many ties (NumPy's default sort is unstable at that length), and the
    distribution against softmax over the kept logits written out."""
    from attncli.generate.sampling import sampling_distribution

    rng = np.random.default_rng(4)
    for _ in range(5):
        z = rng.integers(0, 4, size=64).astype(np.float64)  # (64,) many ties
        kept = sorted(range(64), key=lambda i: (-z[i], i))[:top_k]
        want = np.zeros(64)
        want[kept] = np.exp(z[kept] / 0.8) / np.exp(z[kept] / 0.8).sum()
        np.testing.assert_allclose(sampling_distribution(z, temperature=0.8, top_k=top_k), want, rtol=1e-12, atol=0)


def test_sample_draws_from_p_over_its_sum():
    """The inverse CDF runs up to the CDF's last value, so weights that do not sum to 1 (a float
    softmax's rounding, taken to an extreme here) are drawn from in proportion: the frequencies of
    4,000 draws against p / p.sum()."""
    from attncli.generate.sampling import sample

    p = np.array([2.0, 0.0, 5.0, 1.0])  # sums to 8
    rng = np.random.default_rng(11)
    counts = np.bincount([sample(p, rng) for _ in range(4000)], minlength=4) / 4000
    np.testing.assert_allclose(counts, p / p.sum(), atol=0.03)


@pytest.mark.parametrize("p,draw,token", [
    # token i owns [cdf[i-1], cdf[i]) of [0, 1), worked by hand; a token with p 0 owns nothing
    ([0.0, 0.5, 0.0, 0.5], 0.0, 1), ([0.0, 0.5, 0.0, 0.5], 0.25, 1), ([0.0, 0.5, 0.0, 0.5], 0.5, 3),
    ([0.0, 0.5, 0.0, 0.5], 1 - 2**-53, 3), ([0.25, 0.25, 0.5], 0.25, 1), ([0.25, 0.25, 0.5], 0.5, 2),
    ([0.0, 1.0, 0.0], 0.0, 1), ([0.0, 1.0, 0.0], 0.7, 1),  # one token with all the mass (--top-k 1)
    ([1.0], 0.3, 0),
])
def test_sample_is_the_inverse_cdf_by_hand(p, draw, token):
    from attncli.generate.sampling import sample

    assert sample(np.array(p), _FixedDraws(draw)) == token


def test_top_candidates_break_ties_by_id():
    """Against Python's sorted on (-p, id), on 64 probabilities with many ties."""
    from attncli.generate.sampling import top_candidates

    rng = np.random.default_rng(5)
    for _ in range(5):
        p = rng.integers(1, 4, size=64).astype(np.float64)
        p /= p.sum()  # (64,)
        for k in (1, 5, 64):
            want = sorted(range(64), key=lambda i: (-p[i], i))[:k]
            assert top_candidates(p, k) == [(i, float(p[i])) for i in want]


# --- generate() on a decoder with fixed logits, worked by hand ------------------------------------------


class _FixedLM:
    """A decoder whose next-token logits are always [5, 4, 3, 2, 1] over <unk>, </s>, a, b, c: the
    two it must pass over (banned <unk>; </s> under --ignore-eos) are the model's favourites."""

    name, kind, layers, heads, context = "fixed", "test", 1, 1, 50
    words = ["<unk>", "</s>", "a", "b", "c"]
    vocab_size = 5

    def __init__(self, eos: int | None = 1):
        self.eos_ids = () if eos is None else (eos,)
        self.banned = (0,)

    def token(self, i):
        return self.words[i]

    def label(self, token):
        return token

    def token_text(self, i):  # the decoder protocol: token i's text as drawn
        return self.token(i)

    def text(self, tokens, ids):
        return " ".join(tokens)

    def encode(self, prompt):
        from attncli.generate.decoder_protocol import Encoded

        tokens = prompt.split()
        ids = [self.words.index(t) if t in self.words else None for t in tokens]
        return Encoded(tokens, list(range(len(tokens))), ids, [], [])

    def input_of(self, i):
        return i

    def forward(self, inputs):
        T = len(inputs)
        w = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # (T, T) uniform causal
        return np.array([5.0, 4.0, 3.0, 2.0, 1.0]), [w[None]]  # (V,), 1 x (1, T, T)


def test_greedy_passes_over_the_banned_and_may_end_the_text():
    e = np.exp([5.0, 4.0, 3.0, 2.0, 1.0])
    gen = generate(_FixedLM(), "b zz", Settings(n=3, greedy=True, ignore_eos=True))
    assert [s.id for s in gen.steps] == [2, 2, 2] and gen.stopped == "length"
    assert gen.ids == [3, None, 2, 2, 2] and gen.tokens == ["b", "zz", "a", "a", "a"]
    np.testing.assert_allclose([s.prob for s in gen.steps], e[2] / e.sum(), rtol=1e-12)
    assert all(s.sample_prob is None for s in gen.steps)
    assert [s.index for s in gen.steps] == [2, 3, 4] and [s.query for s in gen.steps] == [1, 2, 3]
    assert not any(s.eos for s in gen.steps)
    for s in gen.steps:  # the query's row of the uniform causal weights: 1 / (query + 1) over keys 0..query
        np.testing.assert_allclose(s.attention, np.full(s.query + 1, 1 / (s.query + 1)), rtol=1e-12)
    gen = generate(_FixedLM(), "b", Settings(n=3, greedy=True))  # </s> is the top token the model may write
    assert [s.id for s in gen.steps] == [1] and gen.stopped == "eos" and gen.steps[0].index is None
    assert gen.tokens == ["b"] and gen.steps[0].eos
    gen = generate(_FixedLM(eos=None), "b", Settings(n=2, greedy=True, ignore_eos=True))  # no end token
    assert [s.id for s in gen.steps] == [1, 1] and gen.stopped == "length"


def test_a_seeded_draw_is_the_inverse_cdf_of_the_allowed_tokens():
    e = np.exp([3.0, 2.0, 1.0])
    cdf = np.cumsum(e / e.sum())  # over a, b, c: <unk> banned, </s> under --ignore-eos
    rng = np.random.default_rng(7)
    want = [2 + int(np.argmax(cdf > rng.random())) for _ in range(12)]
    gen = generate(_FixedLM(), "b", Settings(n=12, seed=7, top_k=0, ignore_eos=True))
    assert [s.id for s in gen.steps] == want and gen.seed == 7
    np.testing.assert_allclose([s.sample_prob for s in gen.steps], [e[i - 2] / e.sum() for i in want], rtol=1e-12)
    gen = generate(_FixedLM(), "b", Settings(n=3, ignore_eos=True))  # no seed: a fresh one, reported
    assert isinstance(gen.seed, int) and 0 <= gen.seed < 2**32
    again = generate(_FixedLM(), "b", Settings(n=3, seed=gen.seed, ignore_eos=True))
    assert [s.id for s in again.steps] == [s.id for s in gen.steps]


def test_on_start_sees_the_prompt_before_any_step_and_a_bad_layer_names_the_model():
    seen, steps = [], []
    generate(_FixedLM(), "b c", Settings(n=2, greedy=True, ignore_eos=True),
             on_start=lambda g: seen.append((list(g.tokens), len(g.steps))),
             on_step=lambda g, s: steps.append((len(g.steps), len(g.tokens), s.id, s.query)))
    assert seen == [(["b", "c"], 0)]
    assert steps == [(1, 3, 2, 1), (2, 4, 2, 2)]  # each step seen once made, its token already appended
    with pytest.raises(BadInput) as caught:
        generate(_FixedLM(), "b", Settings(n=1, layer=1))
    assert str(caught.value) == "--layer 1 is out of range: model 'fixed' has layers 0..0"


def test_softmax_is_float64_and_safe_for_large_logits():
    """The module docstring: float64 probabilities (float32 loses the small ones), and the row
    max subtracted before exp, against the formula written out with math.exp."""
    import math

    from attncli.generate.sampling import allowed_logits, greedy_choice, softmax

    p = softmax(np.array([0.0, -120.0], dtype=np.float32))  # e^-120 is 0 in float32
    assert p.dtype == np.float64 and p[1] > 0
    np.testing.assert_allclose(p, [1 / (1 + math.exp(-120)), math.exp(-120) / (1 + math.exp(-120))], rtol=1e-12)
    p = softmax(np.array([1000.0, 999.0, 0.0]))  # exp(1000) overflows: only differences may be exponentiated
    total = 1 + math.exp(-1) + math.exp(-1000)
    np.testing.assert_allclose(p, [1 / total, math.exp(-1) / total, math.exp(-1000) / total], rtol=1e-12)
    z = allowed_logits(np.array([1.5, 2.5, 0.5], dtype=np.float32), banned=(1,))
    assert z.dtype == np.float64 and z.tolist() == [1.5, -math.inf, 0.5]
    assert greedy_choice([3, 1, 2], banned=(0,)) == 2  # whole-number logits too


class _FixedDraws:
    """A stand-in for np.random.Generator whose random() returns the given numbers in [0, 1)."""

    def __init__(self, *draws: float):
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)
