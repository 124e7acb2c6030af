"""Trained attention: training through the CLI, NumPy path == torch, storage safety, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from _attention_fixtures import SENTENCES, make_random_attention, tiny_brown, tiny_brown_model, widest
from _tolerance import f32_close
from attncli.tinylm import checkpoint, data as lm_data, model as trained, torch_model, training_loop
from attncli.env import paths
from attncli.vectors import store
from attncli.cli.main import app

torch = needed("torch")

runner = CliRunner()
SMALL = ["--epochs", "1", "--vocab-size", "60", "--batch-tokens", "512", "--layers", "2", "--heads", "4"]


@pytest.fixture
def brown_tiny(monkeypatch):
    """The trainer reads 10 short Brown documents instead of the whole corpus."""
    monkeypatch.setattr(lm_data, "brown_documents", tiny_brown)


def run(*args):
    result = runner.invoke(app, list(args))
    return result


def torch_reference(config, weights, vectors, tokens):
    """torch's own forward pass over the stored weights: per-layer weights (h, T, T) and logits.

    Built with attn's own model builder and positional encoding (tinylm/train.py), so it checks that
    training and the NumPy path agree, not that either is right: tests/tinylm/test_tinylm_reference.py is the
    independent check (a torch model written from the papers)."""
    table = trained.input_vectors(vectors, tokens)  # (T, d)
    model = torch_model.model_from_weights(table, config, weights)
    ids = torch.arange(len(tokens))[None, :]  # (1, T)
    with torch.no_grad():
        logits, per_layer = model(ids, need_weights=True)
        fast_logits = model(ids)  # scaled_dot_product_attention path
    return [w[0].numpy() for w in per_layer], logits[0].numpy(), fast_logits[0].numpy()


@pytest.mark.parametrize("layers,heads", [(1, 1), (2, 4), (3, 2)])
def test_numpy_attention_equals_torch(layers, heads):
    config, weights = make_random_attention("rand", layers=layers, heads=heads)
    att = trained.load_trained("rand")
    tokens = "the old man saw the cat sat on the mat".split()
    ref_weights, ref_logits, fast_logits = torch_reference(config, weights, att.vectors, tokens)
    traces = att.trace(tokens)
    assert len(traces) == layers
    for layer, (tr, ref) in enumerate(zip(traces, ref_weights)):
        assert tr.weights.shape == ref.shape == (heads, len(tokens), len(tokens))
        size = dict(depth=layer + 1, length=widest(config), per_element=True)  # float32 on both sides
        f32_close(tr.weights, ref, **size)
        f32_close(att.attention(tokens, layer), ref, **size)
        f32_close(att.attention(tokens, layer, heads - 1), ref[heads - 1], **size)
        assert np.all(np.triu(tr.weights, k=1) == 0)  # causal: exactly zero above the diagonal
        f32_close(tr.weights.sum(-1), 1.0, length=len(tokens))  # a float32 sum of T weights
    # the weights are not trivially uniform or one-hot, so the comparison means something
    assert 0.05 < traces[0].weights[:, -1].max(-1).mean() < 0.99
    # float32 on both sides, through every layer and the unembedding
    f32_close(att.logits(tokens), ref_logits, depth=layers + 1, length=widest(config))
    f32_close(att.logits(tokens), fast_logits, depth=layers + 1, length=widest(config))


def test_project_splits_heads_like_torch():
    config, weights = make_random_attention("rand", layers=1, heads=4)
    att = trained.load_trained("rand")
    x = att.embed(SENTENCES[0].split())  # (T, d)
    q, k, v = att.project(x, 0)
    assert q.shape == k.shape == v.shape == (4, x.shape[0], 4)
    # by hand: head 2 of K is columns 8..12 of the key block of LN(x) W^T + b
    ln = torch.nn.functional.layer_norm(torch.tensor(x), (16,), torch.tensor(weights["blocks.0.ln1.weight"]),
                                        torch.tensor(weights["blocks.0.ln1.bias"])).numpy()
    W, b = weights["blocks.0.attn.in_proj_weight"], weights["blocks.0.attn.in_proj_bias"]
    k_full = ln @ W[16:32].T + b[16:32]  # (T, d)
    f32_close(k[2], k_full[:, 8:12], length=16)  # one float32 layer norm and projection, d = 16


def test_train_attention_cli_small(brown_tiny):
    tiny_brown_model("tiny")
    result = run("train-attention", "--model", "tiny", "--name", "tiny-att", "--json", *SMALL)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    a = doc["attention"]
    for key in ("perplexity", "bigram_perplexity", "unigram_perplexity"):
        assert math.isfinite(a[key]) and 1 < a[key] < 10 * a["output_vocab_size"]
    assert a["output_vocab_size"] == 62 and a["layers"] == 2 and a["heads"] == 4
    assert a["heldout_targets"] > 0 and a["steps"] >= 1
    meta = store.read_meta(store.model_dir("tiny-att"))
    assert meta["attention"]["perplexity"] == a["perplexity"]
    assert "attention" not in store.read_meta(store.model_dir("tiny"))  # the source is untouched
    listed = {r["name"]: r for r in json.loads(run("models", "--json").stdout)}
    assert listed["tiny-att"]["attention"] == a and listed["tiny"]["attention"] is None
    table = run("models").stdout
    assert f"tiny-att: trained attention (2 layers x 4 heads), held-out perplexity {a['perplexity']:.1f}" in " ".join(table.split())
    att = trained.load_trained("tiny-att")
    assert att.layers == 2 and att.heads == 4 and len(att.output_words) == 62
    sentences = att.heldout_sentences()
    assert sentences and all(sentences)
    # the trained weights, run by torch and by NumPy, agree
    ref_weights, _, _ = torch_reference(att.config, att.w, att.vectors, sentences[0])
    for layer, (tr, ref) in enumerate(zip(att.trace(sentences[0]), ref_weights)):
        f32_close(tr.weights, ref, depth=layer + 1, length=widest(att.config), per_element=True)


def test_stored_perplexity_matches_numpy_forward(brown_tiny):
    """The held-out perplexity in the metadata is the NumPy model's perplexity on the same split."""
    tiny_brown_model("tiny")
    assert run("train-attention", "--model", "tiny", "--name", "t2", "--json", *SMALL).exit_code == 0
    att = trained.load_trained("t2")
    cfg = att.config["training"]["config"]
    split = lm_data.split_documents(tiny_brown(), heldout_fraction=cfg["heldout"], seed=cfg["seed"], max_len=cfg["max_len"])
    vocab = lm_data.OutputVocab(att.output_words)
    nll, n = 0.0, 0
    for s in split.heldout:
        logits = att.logits(s).astype(np.float64)  # (T, V_out)
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        nll -= logp[np.arange(len(s)), vocab.targets(s)].sum()
        n += len(s)
    assert math.isclose(math.exp(nll / n), att.config["training"]["perplexity"], rel_tol=1e-3)


def test_bad_options_exit_2(brown_tiny):
    tiny_brown_model("tiny")  # d = 16
    cases = [
        (["--heads", "5"], "does not divide the width 16"),
        (["--layers", "0"], "--layers must be at least 1"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--heldout", "1.5"], "--heldout must be between 0 and 1"),
        (["--max-minutes", "0"], "--max-minutes must be positive"),
    ]
    for extra, message in cases:
        result = run("train-attention", "--model", "tiny", "--name", "x", *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.stderr and "Traceback" not in result.output
        assert result.stderr.startswith("error:"), result.stderr  # the message alone: no empty progress bar first
    result = run("train-attention", "--model", "nosuch", "--name", "x")
    assert result.exit_code == 2 and "unknown model 'nosuch'" in result.stderr
    # the built-in model is read-only (or absent): either way a message and exit 2, nothing written
    result = run("train-attention")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert not (paths.models_dir() / "x").exists()


def test_interrupted_training_leaves_previous_model(brown_tiny, monkeypatch):
    tiny_brown_model("tiny")
    assert run("train-attention", "--model", "tiny", *SMALL).exit_code == 0  # in place: tiny gains attention/
    before_meta = store.read_meta(store.model_dir("tiny"))
    before = trained.load_trained("tiny").w
    calls = {"n": 0}
    real_pad = training_loop._pad

    def pad_then_interrupt(*args):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return real_pad(*args)

    monkeypatch.setattr(training_loop, "_pad", pad_then_interrupt)
    result = run("train-attention", "--model", "tiny", "--seed", "7", *SMALL)
    assert result.exit_code == 130 and calls["n"] == 3
    monkeypatch.setattr(training_loop, "_pad", real_pad)

    def failing_savez(*args, **kwargs):  # a failure in the middle of writing the new version
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", failing_savez)
    result = run("train-attention", "--model", "tiny", "--seed", "7", *SMALL)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert store.read_meta(store.model_dir("tiny")) == before_meta
    after = trained.load_trained("tiny").w
    assert all(np.array_equal(before[k], after[k]) for k in before)
    leftovers = [p.name for p in (paths.models_dir() / ".versions").iterdir() if p.name.endswith(".partial")]
    assert leftovers == []


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong_shape", "config"])
def test_corrupt_weights_exit_1(damage):
    make_random_attention("rand", layers=1, heads=2)
    att_dir = store.model_dir("rand").resolve() / checkpoint.SUBDIR
    weights_file = att_dir / checkpoint.WEIGHTS
    if damage == "garbage":
        weights_file.write_bytes(b"not a zip file at all")
    elif damage == "truncated":
        weights_file.write_bytes(weights_file.read_bytes()[:300])
    elif damage == "wrong_shape":
        with np.load(weights_file) as npz:
            arrays = dict(npz)
        arrays["blocks.0.attn.in_proj_weight"] = arrays["blocks.0.attn.in_proj_weight"][:5]
        np.savez(weights_file, **arrays)
    else:
        (att_dir / checkpoint.CONFIG).write_text("{ not json")
    result = run("heads", "--model", "rand")
    assert result.exit_code == 1, result.output
    assert "damaged" in result.stderr and "retrain" in result.stderr
    assert "Traceback" not in result.output


def test_pickled_weights_are_refused():
    make_random_attention("rand", layers=1, heads=2)
    weights_file = store.model_dir("rand").resolve() / checkpoint.SUBDIR / checkpoint.WEIGHTS
    with np.load(weights_file) as npz:
        arrays = dict(npz)
    arrays["input.weight"] = np.array([object()], dtype=object)
    np.savez(weights_file, **arrays)
    with pytest.raises(store.CorruptModel):
        trained.load_trained("rand")


def test_no_trained_attention_is_bad_input():
    tiny_brown_model("plain")
    result = run("heads", "--model", "plain")
    assert result.exit_code == 2 and "has no trained attention" in result.stderr


def test_projection_adapter_through_matrix(monkeypatch):
    """The seam for 'attn matrix --proj trained': the matrix's multihead attention of a learned
    layer equals torch's weights, for the whole layer and for one head."""
    from attncli.attention import matrix, projection
    from attncli.attention.masks import MaskSpec

    config, weights = make_random_attention("rand", layers=2, heads=4)
    monkeypatch.setitem(projection.PROJECTIONS, "trained",
                        projection.ProjectionKind("trained", "learned", "attncli.tinylm.model:projection"))
    text = "the old man saw the cat"
    tokens = text.split()
    att = trained.load_trained("rand")
    ref_weights, _, _ = torch_reference(config, weights, att.vectors, tokens)
    for layer in range(2):
        req = matrix.MatrixRequest(text=text, variant="multihead", mask=MaskSpec(causal=True), projection="trained",
                                   model="rand", projection_options={"layer": layer})
        res = matrix.compute(req)
        assert res.projected.heads == 4 and res.attention.head_weights.shape == (4, 6, 6)
        f32_close(res.attention.head_weights, ref_weights[layer], depth=layer + 1, length=widest(config), per_element=True)
        req = matrix.MatrixRequest(text=text, variant="scaled", mask=MaskSpec(causal=True), projection="trained",
                                   model="rand", projection_options={"layer": layer, "head": 3})
        res = matrix.compute(req)
        f32_close(res.attention.weights, ref_weights[layer][3], depth=layer + 1, length=widest(config), per_element=True)
        assert "layer" in res.projected.label and "head 3" in res.projected.label
    from attncli.errors import BadInput

    for options in ({"layer": 2}, {"head": 4}):
        with pytest.raises(BadInput):
            matrix.compute(matrix.MatrixRequest(text=text, projection="trained", model="rand", projection_options=options))


def test_attention_of_other_vectors_is_refused():
    """Retrained vectors under the same name make the stored attention meaningless: say so."""
    config, weights = make_random_attention("rand", layers=1, heads=2)
    att_dir = store.model_dir("rand").resolve() / checkpoint.SUBDIR
    cfg = json.loads((att_dir / checkpoint.CONFIG).read_text())
    cfg["vectors_sha256"] = checkpoint.vectors_sha256(store.model_dir("rand"))
    (att_dir / checkpoint.CONFIG).write_text(json.dumps(cfg))
    assert trained.load_trained("rand").layers == 1
    vec = np.load(store.model_dir("rand") / "vectors.npy")
    store.write_npy(store.model_dir("rand").resolve() / "vectors.npy", vec + 1)
    result = run("heads", "--model", "rand")
    assert result.exit_code == 1 and "other word vectors" in result.stderr


def test_shipped_default_attention():
    """The built-in attention loads offline, beats the bigram baseline, and NumPy == torch on it."""
    assert (store.builtin_dir() / checkpoint.SUBDIR / checkpoint.CONFIG).is_file(), "data/default/attention is not shipped"
    att = trained.load_trained("default")  # also checks it was trained on the shipped vectors
    meta = store.read_meta(store.builtin_dir())
    a = meta["attention"]
    assert a["perplexity"] < a["bigram_perplexity"] < a["unigram_perplexity"]
    assert a["perplexity"] == att.config["training"]["perplexity"]
    sentence = att.heldout_sentences()[0][:30]
    ref_weights, ref_logits, _ = torch_reference(att.config, att.w, att.vectors, sentence)
    size = dict(length=widest(att.config))
    for layer, (tr, ref) in enumerate(zip(att.trace(sentence), ref_weights)):
        f32_close(tr.weights, ref, depth=layer + 1, per_element=True, **size)
    f32_close(att.logits(sentence), ref_logits, depth=att.layers + 1, **size)


@pytest.mark.parametrize("threads, said", [(1, "on 1 thread"), (2, "on 2 threads")])
def test_the_summary_counts_threads_in_english(capsys, threads, said):
    from attncli.cli.lm import _print_summary

    attention = {"layers": 1, "heads": 2, "d_model": 8, "perplexity": 12.0, "bigram_perplexity": 20.0,
                 "unigram_perplexity": 40.0, "heldout_targets": 100, "output_vocab_size": 50, "heldout_unk_rate": 0.1,
                 "epochs_done": 1, "steps": 3, "train_seconds": 1.0, "threads": threads, "stopped_early": False}
    _print_summary({"name": "m", "attention": attention})
    out = " ".join(capsys.readouterr().out.split())
    assert said in out and f"{threads} threads" not in out.replace(said, "") and "1 threads" not in out
