"""``attn matrix --proj trained``: a trained layer's projections (attncli/tinylm/model.py's projection) give
the layer's attention output as the torch model of the papers does; one head alone; the layer
range, d_k and vector width refused by name; and the vectors read from the directory they came from."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from _attention_fixtures import make_random_attention
from test_tinylm_reference import reference_forward, stored

from _tolerance import f32_close

from attncli.attention import matrix
from attncli.attention.masks import MaskSpec
from attncli.attention.projection import ProjectionInput
from attncli.errors import BadInput
from attncli.tinylm import model as trained
from attncli.vectors import store


TEXT = "the old man saw the cat"


def _trained_matrix(variant: str = "multihead", **options) -> matrix.MatrixResult:
    return matrix.compute(matrix.MatrixRequest(text=TEXT, variant=variant, mask=MaskSpec(causal=True),
                                               projection="trained", model="rand", projection_options=options))


# -- model.projection: `attn matrix --proj trained` ---------------------------------------------------


def test_the_trained_projection_gives_the_layers_attention_output_as_torch():
    """--variant multihead on a learned layer is that layer's attention: torch's
    nn.MultiheadAttention output (W_o and b_o included) and weights, every head."""
    make_random_attention("rand", layers=2, heads=4)
    weights, _, outputs, _ = reference_forward(*stored("rand"), TEXT.split(), everything=True)
    for layer in range(2):
        res = _trained_matrix(layer=layer)
        f32_close(res.attention.head_weights, weights[layer], depth=layer + 1, length=16, per_element=True)  # d 16, float32
        f32_close(res.attention.output, outputs[layer], depth=layer + 1, length=16)
        assert res.projected.label == f"trained (rand, layer {layer} of 2, 4 heads)"
        assert res.positions == "the trained model's own (sinusoidal)"  # not --positions: the weights' own


@pytest.mark.parametrize("head", [0, 3])
def test_one_head_of_the_trained_projection_is_that_head_alone(head):
    make_random_attention("rand", layers=2, heads=4)
    weights, _ = reference_forward(*stored("rand"), TEXT.split())
    for variant in ("scaled", "multihead"):  # multihead over one head: the head is not split further
        res = _trained_matrix(variant, layer=1, head=head)
        got = res.attention.weights if variant == "scaled" else res.attention.head_weights[0]
        assert res.attention.weights.shape == (6, 6)
        f32_close(got, weights[1][head], depth=2, length=16, per_element=True)
        assert res.projected.label == f"trained (rand, layer 1 of 2, head {head} of 4)"
        assert res.positions == "the trained model's own (sinusoidal)"


def _projection_input(vectors, **fields) -> ProjectionInput:
    words = np.stack([vectors.vector(w) for w in TEXT.split()])  # (T, d)
    base = dict(x_q=words, x_kv=words, words_q=words, words_kv=words, tokens=TEXT.split(), key_tokens=TEXT.split(),
                model=vectors)
    return ProjectionInput(**{**base, **fields})


@pytest.mark.parametrize("options, message", [
    ({"head": 4}, "--head 4 is out of range: model 'rand' has heads 0..3"),
    ({"head": -1}, "--head -1 is out of range: model 'rand' has heads 0..3"),
    ({"layer": 2}, "--layer 2 is out of range: model 'rand' has layers 0..1"),
])
def test_the_trained_projection_names_the_range_it_was_out_of(options, message):
    make_random_attention("rand", layers=2, heads=4)
    from attncli.vectors.model import load_vectors

    with pytest.raises(BadInput) as caught:
        trained.projection(_projection_input(load_vectors("rand"), options=options))
    assert str(caught.value) == message


def test_the_trained_projection_refuses_d_k_and_vectors_of_another_width():
    make_random_attention("rand", layers=1, heads=2)
    from attncli.vectors.model import load_vectors

    vectors = load_vectors("rand")
    with pytest.raises(BadInput, match="^--d-k does not apply to --proj trained: the learned layer fixes d_k$"):
        trained.projection(_projection_input(vectors, d_k=4))
    narrow = SimpleNamespace(name="rand", path=vectors.path, dim=8)  # vectors 8 wide, attention 16
    with pytest.raises(store.CorruptModel, match="^model 'rand': vectors of dim 8 but attention of width 16; retrain it$"):
        trained.projection(_projection_input(vectors, model=narrow))


def _causal_softmax(q, k):
    """softmax(q k^T / sqrt(d_k)) under the causal mask, per head: q, k (h, T, d_k) -> (h, T, T)."""
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_the_trained_projection_reads_the_directory_its_vectors_came_from(tmp_path):
    """The projection reads the weights stored beside the vectors it was handed (their
    directory), not whatever the name points to now: here the name was retrained since."""
    import shutil

    make_random_attention("rand", layers=1, heads=2)
    from attncli.vectors.model import load_vectors

    snapshot = tmp_path / "snapshot"
    shutil.copytree(store.model_dir("rand").resolve(), snapshot)  # the version the vectors below come from
    before, _ = reference_forward(*stored("rand"), TEXT.split())
    make_random_attention("rand", layers=1, heads=2, seed=5)  # the name now holds other vectors and weights
    after, _ = reference_forward(*stored("rand"), TEXT.split())
    assert np.abs(after[0] - before[0]).max() > 0.05  # the two versions differ
    old = load_vectors("rand", directory=snapshot)
    p = trained.projection(_projection_input(old))
    q, k = (m.reshape(6, 2, 8).transpose(1, 0, 2) for m in (p.q, p.k))  # (h, T, d_k): head i = columns i*8..
    f32_close(_causal_softmax(q, k), before[0], length=16, per_element=True)
