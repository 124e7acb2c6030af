"""Tests written for the mutants mutmut found alive in the lm wing (attncli/lm/*.py; docs/mutation.md (its git history)):
each states a documented behaviour the other tests left open, checked against a reference written
here (a formula, a hand-worked example, or torch). The mutants judged equivalent are listed in
docs/mutation.md (its git history), with the reason."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needed

from _attention_fixtures import SENTENCES, make_random_attention
from attncli.attention import matrix
from attncli.attention.masks import MaskSpec
from attncli.attention.projection import ProjectionInput
from attncli.errors import BadInput
from attncli.lm import checkpoint, data as lm_data, heads as lm_heads, model as trained
from attncli.vectors import store

torch = needed("torch")
from test_lm_reference import reference_forward, stored  # noqa: E402  (torch model written from the papers)

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
        np.testing.assert_allclose(res.attention.head_weights, weights[layer], rtol=0, atol=1e-5)
        np.testing.assert_allclose(res.attention.output, outputs[layer], rtol=0, atol=1e-4)
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
        np.testing.assert_allclose(got, weights[1][head], rtol=0, atol=1e-5)
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
    np.testing.assert_allclose(_causal_softmax(q, k), before[0], rtol=0, atol=1e-5)


# -- model.TrainedAttention: the other entry points, each against the torch model of the papers ------


def test_every_entry_point_of_the_numpy_lm_equals_the_papers_model():
    """logits_and_attentions, residual_stream (what the logit lens reads), lens_logits and
    attention(..., causal=False), each against tests/test_lm_reference.py's torch model."""
    make_random_attention("rand", layers=2, heads=4)
    config, weights, vectors = stored("rand")
    att = trained.load_trained("rand")
    tokens = SENTENCES[4].split()  # 9 tokens
    ref_w, ref_logits, _, ref_stream = reference_forward(config, weights, vectors, tokens, everything=True)
    logits, per_layer = att.logits_and_attentions(tokens)
    tol = 1e-5 * max(1.0, np.abs(ref_logits).max())
    np.testing.assert_allclose(logits, ref_logits, rtol=0, atol=tol)
    assert len(per_layer) == 2
    for got, ref in zip(per_layer, ref_w):
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5)
    stream = att.residual_stream(tokens)
    assert stream.shape == (3, 9, 16)
    np.testing.assert_allclose(stream, ref_stream, rtol=0, atol=1e-4 * max(1.0, np.abs(ref_stream).max()))
    np.testing.assert_allclose(att.lens_logits(stream[-1]), ref_logits, rtol=0, atol=tol)  # the last layer's lens = the logits
    np.testing.assert_allclose(att.lens_logits(stream)[-1], ref_logits, rtol=0, atol=tol)  # leading axes pass through
    free_w, _ = reference_forward(config, weights, vectors, tokens, causal=False)
    assert np.triu(free_w[1], k=1).max() > 0.01  # without the mask the future is seen
    np.testing.assert_allclose(att.attention(tokens, 1, causal=False), free_w[1], rtol=0, atol=2e-5)
    np.testing.assert_allclose(att.attention(tokens, 1, 2, causal=False), free_w[1][2], rtol=0, atol=2e-5)
    for tr, ref in zip(att.trace(tokens, causal=False), free_w):
        np.testing.assert_allclose(tr.weights, ref, rtol=0, atol=2e-5)


@pytest.mark.parametrize("head, message", [(4, "--head 4 is out of range: model 'rand' has heads 0..3"),
                                           (-1, "--head -1 is out of range: model 'rand' has heads 0..3")])
def test_attention_names_the_heads_a_model_has(head, message):
    make_random_attention("rand", layers=1, heads=4)
    with pytest.raises(BadInput) as caught:
        trained.load_trained("rand").attention(["the", "cat"], 0, head)
    assert str(caught.value) == message


def test_batch_weights_gives_every_sentence_every_layer():
    """Every sentence, the shortest included, gets one (h, n, n) matrix per layer, equal to the
    torch model's, whatever the batch size."""
    make_random_attention("rand", layers=2, heads=4)
    config, weights, vectors = stored("rand")
    att = trained.load_trained("rand")
    sentences = [s.split() for s in SENTENCES] + [["cat", "sat"]]
    for batch in (32, 2):
        out = att.batch_weights(sentences, batch=batch)
        assert len(out) == len(sentences)
        for s, per_layer in zip(sentences, out):
            assert len(per_layer) == 2
            for got, ref in zip(per_layer, reference_forward(config, weights, vectors, s)[0]):
                assert got.shape == (4, len(s), len(s))
                np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5)
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


# -- lm/data.py: the split, the output vocabulary, Brown -------------------------------------------


def _docs(sizes: list[int], length: int = 3) -> list[tuple[str, list[list[str]]]]:
    """Document i holds sizes[i] sentences of ``length`` words, each word naming its document."""
    return [(f"d{i}", [[f"d{i}s{j}w{k}" for k in range(length)] for j in range(n)]) for i, n in enumerate(sizes)]


def _doc_of(sentence: list[str]) -> str:
    return sentence[0].split("s")[0]


@pytest.mark.parametrize("fraction, n_docs, held", [
    (0.3, 10, 3),  # round(0.3 * 10)
    (0.1, 10, 1),
    (0.04, 10, 1),  # round(0.4) = 0: at least one document is held out
    (0.9, 2, 1),  # round(1.8) = 2: at least one document is left to train on
    (0.5, 2, 1),
])
def test_the_split_is_by_whole_documents_in_the_asked_fraction(fraction, n_docs, held):
    docs = _docs(list(range(1, n_docs + 1)))
    split = lm_data.split_documents(docs, heldout_fraction=fraction, seed=3, max_len=2)
    assert (split.heldout_docs, split.train_docs) == (held, n_docs - held)
    held_ids = {_doc_of(s) for s in split.heldout}
    train_ids = {_doc_of(s) for s in split.train}
    assert len(held_ids) == held and len(train_ids) == n_docs - held and not held_ids & train_ids
    by_id = dict(docs)
    assert len(split.heldout) == sum(len(by_id[d]) for d in held_ids)  # whole documents
    assert len(split.train) == sum(len(by_id[d]) for d in train_ids)
    assert all(len(s) == 2 for s in split.train + split.heldout)  # cut to max_len


@pytest.mark.parametrize("limit, kept", [(5, 3), (6, 3), (7, 4), (3, 2), (None, 6)])
def test_the_split_keeps_whole_documents_until_the_sentence_limit(limit, kept):
    """Documents of 2 sentences are taken until the sentences taken reach the limit: 5 or 6
    sentences take 3 documents (6 sentences)."""
    split = lm_data.split_documents(_docs([2] * 6), heldout_fraction=0.5, seed=0, max_len=10, limit_sentences=limit)
    assert split.train_docs + split.heldout_docs == kept
    assert len(split.train) + len(split.heldout) == 2 * kept


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1])
def test_a_heldout_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(BadInput) as caught:
        lm_data.split_documents(_docs([2, 2, 2]), heldout_fraction=fraction, seed=0, max_len=10)
    assert str(caught.value) == f"--heldout must be between 0 and 1 (got {fraction})"


def test_one_document_cannot_be_split():
    with pytest.raises(BadInput) as caught:
        lm_data.split_documents(_docs([5]), heldout_fraction=0.5, seed=0, max_len=10)
    assert str(caught.value) == "need at least two documents to make a training and a held-out split"
    with pytest.raises(BadInput):  # a limit the first document meets leaves one document
        lm_data.split_documents(_docs([5, 5]), heldout_fraction=0.5, seed=0, max_len=10, limit_sentences=2)


def test_the_output_vocabulary_is_the_most_frequent_words_ties_alphabetical():
    sentences = [["b", "a", "c", "c"], ["d", "b", "a", "c"], ["e", "d"]]  # c 3; a, b, d 2; e 1
    assert lm_data.OutputVocab.from_sentences(sentences, 3).words == ["c", "a", "b", lm_data.UNK, lm_data.EOS]
    assert lm_data.OutputVocab.from_sentences(sentences, 1).words == ["c", lm_data.UNK, lm_data.EOS]


def test_an_output_vocabulary_maps_words_to_ids_and_others_to_unk():
    vocab = lm_data.OutputVocab(["a", "b", lm_data.UNK, lm_data.EOS])
    assert vocab.ids(["b", "zzz", "a"]).tolist() == [1, 2, 0]
    assert vocab.targets(["a", "b", "zzz"]).tolist() == [1, 2, 3]  # w_1, w_2, then </s>


def test_no_sentences_make_no_pairs():
    vocab = lm_data.OutputVocab(["a", lm_data.UNK, lm_data.EOS])
    for part in lm_data.pairs([], vocab):
        assert part.shape == (0,) and part.dtype == np.int64  # ids: usable as indices
    assert lm_data.pairs([["a", "zzz"]], vocab)[0].dtype == np.int64


# -- model.py: the causal mask and the vectors' checksum --------------------------------------------


def test_the_causal_mask_by_hand():
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


# -- lm/heads.py: what score_heads reads, and the uniform reference --------------------------------


class _Uniform:
    """Duck-typed TrainedAttention: ``layers`` x ``heads`` heads spreading each row evenly over its prefix."""

    model = "stub"

    def __init__(self, layers: int = 1, heads: int = 1, config: dict | None = None):
        self.layers, self.heads = layers, heads
        self.config = {"max_len_trained": 80} if config is None else config

    def batch_weights(self, sentences):
        def one(T):
            w = np.tril(np.ones((T, T)))
            return np.broadcast_to(w / w.sum(-1, keepdims=True), (self.heads, T, T)).astype(np.float32)  # (h, T, T)
        return [[one(len(s)) for _ in range(self.layers)] for s in sentences]


def test_the_uniform_reference_by_hand():
    """Lengths 2 and 3: queries i = 1 (of 2 keys), 1 and 2 (of 2 and 3 keys)."""
    u = lm_heads.uniform_scores([2, 3, 1], window=1)  # a 1-token sentence has no query
    mean_inv = (1 / 2 + 1 / 2 + 1 / 3) / 3  # 4/9
    for key in ("previous_token", "first_token", "self"):
        assert u[key] == pytest.approx(mean_inv, abs=1e-15)
    assert u["local"] == pytest.approx((2 / 2 + 2 / 2 + 2 / 3) / 3, abs=1e-15)  # window 1: keys i-1 and i
    assert u["entropy"] == 1.0


def test_score_heads_counts_two_word_sentences_and_cuts_to_the_trained_length():
    report = lm_heads.score_heads(_Uniform(), [["a", "b"], ["c"]])
    assert report["sentences"] == 1 and report["queries"] == 1
    assert report["heads"][0]["previous_token"] == pytest.approx(0.5)  # query 1 over keys 0, 1
    report = lm_heads.score_heads(_Uniform(config={"max_len_trained": 4}), [list("abcdefghij")])
    assert report["queries"] == 3  # cut to 4 tokens
    report = lm_heads.score_heads(_Uniform(config={}), [[f"w{i}" for i in range(600)]])
    assert report["queries"] == 511  # no max_len_trained: 512 tokens
    assert report["window"] == 3  # the default window
    with pytest.raises(BadInput) as caught:
        lm_heads.score_heads(_Uniform(), [["a"], []])
    assert str(caught.value) == "no sentence of two or more words to score the heads on"


def test_score_heads_lists_every_layer_and_head_in_order():
    report = lm_heads.score_heads(_Uniform(layers=2, heads=3), [["a", "b", "c"]])
    assert [(h["layer"], h["head"]) for h in report["heads"]] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("window", [1, lm_heads.MAX_WINDOW])
def test_the_window_bounds_are_accepted(window):
    assert lm_heads.score_heads(_Uniform(), [["a", "b", "c"]], window=window)["window"] == window


@pytest.mark.parametrize("window, message", [(0, "--window must be at least 1 (got 0)"),
                                             (10_001, "--window must be in [1, 10,000] (got 10001)")])
def test_a_window_out_of_bounds_is_refused(window, message):
    with pytest.raises(BadInput) as caught:
        lm_heads.score_heads(_Uniform(), [["a", "b", "c"]], window=window)
    assert str(caught.value) == message


# -- lm/data.py: the n-gram baselines against the formulas written out with dictionaries -------------


def _kneser_ney_by_hand(train: list[tuple[int, int]], test: list[tuple[int, int]], V: int) -> tuple[float, float]:
    """Interpolated Kneser-Ney as lm/data.py's docstring states it (Chen & Goodman 1998), pair by pair."""
    import math
    from collections import Counter

    c = Counter(train)  # (context, word) -> count
    n1 = sum(1 for n in c.values() if n == 1)
    n2 = sum(1 for n in c.values() if n == 2)
    D = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.75
    ctx_total = Counter(ctx for ctx, _ in train)
    ctx_types = Counter(ctx for ctx, _ in c)
    cont = Counter(w for _, w in c)
    logs = []
    for ctx, w in test:
        p_cont = (cont[w] + 1) / (len(c) + V)
        if ctx_total[ctx]:
            p = max(c[(ctx, w)] - D, 0) / ctx_total[ctx] + D * ctx_types[ctx] / ctx_total[ctx] * p_cont
        else:
            p = p_cont
        logs.append(math.log(p))
    return math.exp(-sum(logs) / len(logs)), D


def _arrays(pairs):
    return (np.array([c for c, _ in pairs], dtype=np.int64), np.array([w for _, w in pairs], dtype=np.int64))


@pytest.mark.parametrize("train", [
    [(1, 2)] * 3 + [(1, 3)] * 2 + [(2, 3), (3, 1), (3, 1)],  # counts 3, 2, 1, 2: n1 = 1, n2 = 2
    [(1, 2)] * 3 + [(2, 4)],  # n1 = 1, n2 = 0: D = 1
    [(1, 2)] * 3 + [(2, 3)] * 4,  # no pair seen once or twice: D falls back to 0.75
])
def test_the_bigram_baseline_is_interpolated_kneser_ney(train):
    V = 6  # word 5 and context 5 never occur in training
    test = [(1, 2), (1, 3), (1, 0), (0, 0), (2, 3), (5, 5), (3, 1), (4, 2), (2, 4)]  # below, between and above the seen pairs
    ppl, D = lm_data.kneser_ney_bigram_perplexity(_arrays(train), _arrays(test), V)
    ref_ppl, ref_D = _kneser_ney_by_hand(train, test, V)
    assert D == pytest.approx(ref_D, abs=1e-15)
    assert ppl == pytest.approx(ref_ppl, rel=1e-12)


def test_with_no_training_pair_every_word_has_probability_1_over_V():
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    ppl, D = lm_data.kneser_ney_bigram_perplexity(empty, _arrays([(0, 1), (2, 3)]), 5)
    assert ppl == pytest.approx(5.0, rel=1e-12) and D == 0.75


def test_the_unigram_baseline_is_add_one():
    import math

    train, test, V = np.array([0, 0, 0, 2]), np.array([0, 2, 4]), 5  # word 4 never seen: P = 1 / (4 + 5)
    by_hand = math.exp(-(math.log(4 / 9) + math.log(2 / 9) + math.log(1 / 9)) / 3)
    assert lm_data.unigram_perplexity(train, test, V) == pytest.approx(by_hand, rel=1e-12)


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


def test_the_baselines_of_a_split_by_hand():
    """Targets w_1 .. w_{n-1}, </s>; the bigram context of each target is the word before it."""
    import math

    split = lm_data.Split(train=[["a", "b", "a"], ["b", "a"]], heldout=[["a", "c"]], train_docs=1, heldout_docs=1)
    vocab = lm_data.OutputVocab(["a", "b", lm_data.UNK, lm_data.EOS])  # ids 0, 1, 2, 3
    got = lm_data.baselines(split, vocab)
    train_pairs = [(0, 1), (1, 0), (0, 3), (1, 0), (0, 3)]  # (context, target)
    test_pairs = [(0, 2), (2, 3)]  # "c" is <unk>
    ppl, D = _kneser_ney_by_hand(train_pairs, test_pairs, 4)
    assert got["bigram_perplexity"] == pytest.approx(ppl, rel=1e-12) and got["bigram_discount"] == pytest.approx(D)
    counts = {0: 2, 1: 1, 2: 0, 3: 2}  # targets a a b </s> </s>
    unigram = math.exp(-(math.log((counts[2] + 1) / 9) + math.log((counts[3] + 1) / 9)) / 2)
    assert got["unigram_perplexity"] == pytest.approx(unigram, rel=1e-12)
    assert lm_data.perplexity(2.0, 1) == pytest.approx(math.e**2) and lm_data.perplexity(3.0, 0) == pytest.approx(math.e**3)
