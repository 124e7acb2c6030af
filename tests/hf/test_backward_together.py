"""hf/methods/backward.py's backward_together over several tapes (attn attribute --pairs) on the Llama family:
grouped-query attention (a key-value head's gradient summed over its group, per tape), RoPE of three
kinds and Phi-3's partial rotary (the inverse rotation on (B, h, T, d_head)), sliding windows,
Gemma's own head width and offset norms; every gradient by name, each head's q, k and v inputs
too, equal each tape's own backward in float64 (1e-12: the same sums in another batch). The tapes
read other positions with other metrics. Tapes of two models, or lists shorter than the tapes, are
refused rather than run on the first tape's weights (or dropped by zip)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402

from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward import backward_together, forward_together  # noqa: E402

TEXTS = ["the cat sat on the mat", "a dog ran to the log", "she sells sea shells on it", "time flies like an arrow"]
KINDS = ("llama", "llama3", "mistral", "qwen2", "gemma", "phi3", "qwen3", "gemma3")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    @functools.cache
    def get(kind):
        return load(str(build_decoder(kind, tmp_path_factory.mktemp(kind) / kind)), backend="numpy")
    return get


def _texts(model):
    """The texts' ids cut to one length T (7 or more: past every fixture's sliding window)."""
    ids = [model.encode(t).ids for t in TEXTS]
    T = min(map(len, ids))
    assert T >= 7
    return [i[:T] for i in ids]


@pytest.mark.parametrize("kind", KINDS)
def test_tapes_side_by_side_equal_each_tape_alone_on_the_llama_family(built, kind):
    model = built(kind)
    ids = _texts(model)
    T = len(ids[0])
    positions = [T - 1, 3, 0, T - 2]
    rng = np.random.default_rng(1)
    d_logits = [rng.standard_normal(model.vocab_size) for _ in ids]  # each tape its own metric's gradient
    tapes = [model.tape(np.float64) for _ in ids]
    tapes[0].forward_all(tapes, ids)
    together = backward_together(tapes, positions, d_logits, inputs=True)
    for i, p, d, got in zip(ids, positions, d_logits, together):
        alone = model.tape(np.float64)
        alone.forward(i)
        want = alone.backward(p, d, inputs=True)
        assert set(got) == set(want)
        for name in want:
            assert got[name].shape == want[name].shape, name
            assert np.abs(got[name] - want[name]).max() <= 1e-12 * max(1.0, np.abs(want[name]).max()), name
        assert np.abs(want["embed"]).max() > 1e-6  # the metric reaches the embeddings: the check bites


def test_tapes_of_two_models_or_without_an_entry_each_are_refused(built):
    llama, mistral = built("llama"), built("mistral")  # one shape (the same widths), other weights
    ids = _texts(llama)[:2]
    tapes = [llama.tape(np.float64) for _ in ids]
    tapes[0].forward_all(tapes, ids)
    d = np.ones(llama.vocab_size)
    with pytest.raises(ValueError, match="give one each"):
        backward_together(tapes, [0], [d])
    with pytest.raises(ValueError, match="give one each"):
        backward_together([], [], [])
    other = mistral.tape(np.float64)
    other.forward(ids[1])
    with pytest.raises(ValueError, match="one model and dtype"):
        backward_together([tapes[0], other], [0, 0], [d, d])
    with pytest.raises(ValueError, match="one model and dtype"):
        forward_together([llama.tape(np.float64), llama.tape(np.float32)], ids)
    with pytest.raises(ValueError, match="give one each"):
        forward_together([llama.tape(np.float64)], ids)
