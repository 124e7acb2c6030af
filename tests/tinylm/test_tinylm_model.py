"""attn's own LM in NumPy (attncli/tinylm/model.py) against the torch model of the papers
(tests/tinylm/test_tinylm_reference.py): every entry point, every field of a layer's trace, the causal mask,
the vectors' checksum, a stranger's config.json and damaged files named with their path, and the
vectors a loaded attention keeps."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from attncli.tinylm import checkpoint, torch_model
from _attention_fixtures import SENTENCES, make_random_attention, make_vectors, random_config, widest
from conftest import needed
from test_tinylm_reference import reference_forward, stored
from _tolerance import f32_close
from typer.testing import CliRunner

from attncli.errors import BadInput, UnknownWord
from attncli.tinylm import model as trained, train as train_attention
from attncli.vectors import store
from attncli.env import paths
from attncli.cli.main import app


torch = needed("torch")


# -- model.TrainedAttention: the other entry points, each against the torch model of the papers ------


def test_every_entry_point_of_the_numpy_lm_equals_the_papers_model():
    """logits_and_attentions, residual_stream (what the logit lens reads), lens_logits and
    attention(..., causal=False), each against tests/tinylm/test_tinylm_reference.py's torch model."""
    make_random_attention("rand", layers=2, heads=4)
    config, weights, vectors = stored("rand")
    att = trained.load_trained("rand")
    tokens = SENTENCES[4].split()  # 9 tokens
    ref_w, ref_logits, _, ref_stream = reference_forward(config, weights, vectors, tokens, everything=True)
    logits, per_layer = att.logits_and_attentions(tokens)
    n = widest(config)  # float32 against the float64 torch model: 2 layers, then the unembedding
    f32_close(logits, ref_logits, depth=3, length=n)
    assert len(per_layer) == 2
    for layer, (got, ref) in enumerate(zip(per_layer, ref_w)):
        f32_close(got, ref, depth=layer + 1, length=n, per_element=True)
    stream = att.residual_stream(tokens)
    assert stream.shape == (3, 9, 16)
    f32_close(stream, ref_stream, depth=2, length=n)
    f32_close(att.lens_logits(stream[-1]), ref_logits, depth=3, length=n)  # the last layer's lens = the logits
    f32_close(att.lens_logits(stream)[-1], ref_logits, depth=3, length=n)  # leading axes pass through
    free_w, _ = reference_forward(config, weights, vectors, tokens, causal=False)
    assert np.triu(free_w[1], k=1).max() > 0.01  # without the mask the future is seen
    f32_close(att.attention(tokens, 1, causal=False), free_w[1], depth=2, length=n, per_element=True)
    f32_close(att.attention(tokens, 1, 2, causal=False), free_w[1][2], depth=2, length=n, per_element=True)
    for layer, (tr, ref) in enumerate(zip(att.trace(tokens, causal=False), free_w)):
        f32_close(tr.weights, ref, depth=layer + 1, length=n, per_element=True)


@pytest.mark.parametrize("head, message", [(4, "--head 4 is out of range: model 'rand' has heads 0..3"),
                                           (-1, "--head -1 is out of range: model 'rand' has heads 0..3")])
def test_attention_names_the_heads_a_model_has(head, message):
    make_random_attention("rand", layers=1, heads=4)
    with pytest.raises(BadInput) as caught:
        trained.load_trained("rand").attention(["the", "cat"], 0, head)
    assert str(caught.value) == message


def test_batch_weights_gives_every_sentence_every_layer():
    """Every sentence, the shortest included, gets one (h, n, n) matrix per layer, equal to the
    torch model's, whatever the batch size (padding at the end changes nothing for the real
    tokens, down to a one-word sentence)."""
    make_random_attention("rand", layers=2, heads=4)
    config, weights, vectors = stored("rand")
    att = trained.load_trained("rand")
    sentences = [s.split() for s in SENTENCES] + [["cat", "sat"], ["cat"]]
    for batch in (32, 3, 2):
        out = att.batch_weights(sentences, batch=batch)
        assert len(out) == len(sentences)
        for s, per_layer in zip(sentences, out):
            assert len(per_layer) == 2
            for layer, (got, ref) in enumerate(zip(per_layer, reference_forward(config, weights, vectors, s)[0])):
                assert got.shape == (4, len(s), len(s))
                f32_close(got, ref, depth=layer + 1, length=widest(config), per_element=True)
    assert len(att.batch_weights(sentences)[-1]) == 2  # the default batch size


def test_the_stored_text_files_are_read_line_by_line(tmp_path):
    """output_vocab.txt and heldout.txt: one entry per line, the last line kept with or without
    a final newline; a held-out line is split into its words."""
    make_random_attention("rand", layers=1, heads=2)
    att_dir = store.model_dir("rand").resolve() / checkpoint.SUBDIR
    (att_dir / checkpoint.HELDOUT).write_text("the cat sat\nfruit flies", encoding="utf-8")  # no final newline
    att = trained.load_trained("rand")
    assert att.heldout_sentences() == [["the", "cat", "sat"], ["fruit", "flies"]]
    (att_dir / checkpoint.HELDOUT).write_text("the cat sat\nfruit flies\n", encoding="utf-8")
    assert trained.load_trained("rand").heldout_sentences() == [["the", "cat", "sat"], ["fruit", "flies"]]
    (att_dir / checkpoint.HELDOUT).write_text("the  cat\tsat \n \nfruit flies\n", encoding="utf-8")  # not as attn writes it
    assert trained.load_trained("rand").heldout_sentences() == [["the", "cat", "sat"], ["fruit", "flies"]]
    words = [f"w{i}" for i in range(12)]
    (att_dir / checkpoint.OUTPUT_VOCAB).write_text("\n".join(words), encoding="utf-8")
    assert trained.load_trained("rand").output_words == words
    (att_dir / checkpoint.HELDOUT).unlink()
    (att_dir / checkpoint.HELDOUT).mkdir()  # not a regular file
    with pytest.raises(store.CorruptModel, match=r"^cannot read .*heldout\.txt \(.+\): retrain the attention$"):
        trained.load_trained("rand").heldout_sentences()


def test_has_trained_says_whether_a_model_has_trained_attention():
    make_random_attention("rand", layers=1, heads=2)
    from _attention_fixtures import make_vectors

    make_vectors("plain", ["the", "cat"])
    assert checkpoint.has_trained("rand") is True
    assert checkpoint.has_trained("plain") is False


# -- model.py: the causal mask and the vectors' checksum --------------------------------------------


def test_the_causal_mask_lets_a_query_see_itself_and_the_keys_before_it():
    assert trained.causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert trained.causal_mask(2, 4).tolist() == [[True, False, False, False], [True, True, False, False]]
    assert trained.causal_mask(2).dtype == bool


def test_the_vectors_checksum_is_sha256_of_the_file():
    make_random_attention("rand", layers=1, heads=2)
    directory = store.model_dir("rand").resolve()
    expected = hashlib.sha256((directory / "vectors.npy").read_bytes()).hexdigest()
    assert checkpoint.vectors_sha256(directory) == expected
    (directory / "vectors.npy").unlink()
    (directory / "vectors.npy").mkdir()  # not a regular file
    with pytest.raises(store.CorruptModel, match=r"^cannot read .*rand.*/vectors\.npy \(.+\): retrain the model$"):
        checkpoint.vectors_sha256(directory)


def test_attend_masks_causally_for_fewer_queries_than_keys_and_survives_large_scores():
    """Scaled dot-product attention per head against torch's, for T = 2 queries over S = 3 keys
    (query i sees keys j <= i) and for scores near 1000, where a softmax without the row max
    subtracted overflows; one row's scores far below another's must not underflow to 0 / 0."""
    make_random_attention("rand", layers=1, heads=2)
    att = trained.load_trained("rand")
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 2, 8)), rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 3, 8))  # (h, T, d_k), (h, S, d_k)
    q[0, 1] *= 400.0  # scores of order 1000 in head 0, query 1
    q[1, 0] *= -400.0
    allowed = torch.tensor(np.tril(np.ones((2, 3), bool)))  # (T, S) True = may attend
    ref = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), attn_mask=allowed)
    ref_w = torch.softmax((torch.tensor(q) @ torch.tensor(k).transpose(-1, -2) / np.sqrt(8)).masked_fill(~allowed, -torch.inf), -1)
    _, weights, context = att.attend(q, k, v)
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights, ref_w.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(context, ref.numpy(), rtol=0, atol=1e-10)


def test_the_numpy_lm_refuses_an_input_of_the_wrong_shape_and_no_tokens():
    make_random_attention("rand", layers=1, heads=2)
    att = trained.load_trained("rand")
    for bad in (np.zeros((3, 8)), np.zeros((1, 3, 16)), np.zeros(16)):
        with pytest.raises(BadInput) as caught:
            att.trace(bad)
        assert str(caught.value) == f"input must be (T, 16), got {bad.shape}"
    assert att.trace(np.zeros((3, 16)))[0].weights.shape == (2, 3, 3)
    assert att.trace(np.zeros((3, 16), dtype=np.float64))[0].x.dtype == np.float32  # computed in float32, as stored
    with pytest.raises(BadInput) as caught:
        att.trace([])
    assert str(caught.value) == "no tokens to run the trained attention on"


def test_the_torch_reference_refuses_weights_it_does_not_have_or_lacks():
    config, weights = make_random_attention("rand", layers=1, heads=2)
    table = np.zeros((3, 16), dtype=np.float32)
    torch_model.model_from_weights(table, config, weights)  # all of them: accepted
    missing = {k: v for k, v in weights.items() if k != "head.bias"}
    with pytest.raises(RuntimeError, match="Missing key"):
        torch_model.model_from_weights(table, config, missing)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        torch_model.model_from_weights(table, config, dict(weights, extra=np.zeros(3, dtype=np.float32)))


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


def test_every_field_of_a_layer_trace_is_the_papers_model():
    """LayerTrace's fields against torch (tests/tinylm/test_tinylm_reference.py's model written from the papers):
    the stream entering each layer, Q, K, V split into heads, the scaled scores (-inf above the
    diagonal), the weights, the context and the attention output; the stream float32, as stored."""

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
            assert got.shape == want.shape  # float32 against float64, through this layer
            f32_close(got, want, depth=layer + 1, length=widest(config), per_element=got is tr.weights)
        assert tr.x.dtype == np.float32  # each layer hands the next a float32 stream
        assert np.isneginf(tr.scores[:, above]).all() and np.isfinite(tr.scores[:, ~above]).all()
        f32_close(tr.scores[:, ~above], scores[:, ~above], depth=layer + 1, length=widest(config))


def test_the_first_layer_input_is_the_same_from_float64_and_float32_vectors():
    """`attn matrix --proj trained` hands float64 rows of float32 vectors, the trace float32: the
    stored float32 model gives both the very same numbers."""
    make_random_attention("rand", layers=1, heads=2)
    att = trained.load_trained("rand")
    e = np.stack([att.vectors.vector(w) for w in "the old man saw the cat".split()]).astype(np.float32)  # (T, d)
    np.testing.assert_array_equal(att.embed_vectors(e.astype(np.float64)), att.embed_vectors(e))


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
