"""The lookup core's scores (attncli/lookup/keyindex.py, dictionary.py) against hand-worked values and
formulas written here: float32 rows of embed_tokens, a key's mean of its tokens, cosines kept in
[-1, 1], the n-gram Dice score, the n-gram weight, the top k for every k, exact keys that behave
like a dict when other words have no vector, and the messages of a word without a vector."""

from __future__ import annotations

import numpy as np
import pytest
from _lookup_fixtures import DIM, WORDS, save_axes, save_fasttext_like, save_plain
from _tolerance import f32_close

from attncli.errors import BadInput, UnknownWord
from attncli.lookup import dictionary as core
from attncli.lookup.keyindex import KeyIndex, embed_tokens
from attncli.vectors.model import load_vectors


@pytest.fixture
def plain(attn_home):
    save_plain("plain")  # no subword vectors: a word outside WORDS has no vector at all
    return load_vectors("plain")


@pytest.fixture
def tiny(attn_home):
    save_fasttext_like("tiny")
    return load_vectors("tiny")


# ---------------------------------------------------------------- embed_tokens


def test_embed_tokens_gives_float32_rows_equal_to_the_stored_ones(plain, tiny):
    out = embed_tokens(plain, ["color", "brand", "color"])
    assert out.dtype == np.float32 and out.shape == (3, plain.dim)
    stored = np.asarray(plain.vectors)
    np.testing.assert_array_equal(out, stored[[WORDS.index("color"), WORDS.index("brand"), WORDS.index("color")]])
    assert embed_tokens(tiny, ["colour", "color"]).dtype == np.float32  # a subword row and a stored one


def test_an_unknown_word_in_a_model_without_subwords_names_the_model_and_the_way_out(plain):
    with pytest.raises(UnknownWord) as info:
        embed_tokens(plain, ["color", "colour"])
    message = str(info.value)
    assert message.startswith("unknown word 'colour': model 'plain' has no subword vectors")
    assert "--algorithm fasttext" in message
    missing: list[int] = []
    out = embed_tokens(plain, ["colour", "color", "zzqx"], missing=missing)  # collected, not raised
    assert missing == [0, 2]
    np.testing.assert_array_equal(out[[0, 2]], 0.0)
    np.testing.assert_array_equal(out[1], np.asarray(plain.vectors)[WORDS.index("color")])


# ---------------------------------------------------------------- a query word without a vector


def test_a_query_word_without_a_vector_is_bad_input_unless_it_is_an_exact_key(plain):
    index = KeyIndex(plain, ["colour", "brand"])  # the key 'colour' has no vector in this model
    with pytest.raises(BadInput, match="^query 'colour': unknown word 'colour': model 'plain' has no subword"):
        index.query_vector("colour")
    with pytest.raises(BadInput, match="^query 'colour': unknown word"):
        index.check_query("colour")  # what a batch checks before answering any query
    index.check_query("colour", allow_no_vector=True)  # an exact key: answered like a dict
    tokens, q = index.query_vector("colour", allow_no_vector=True)
    assert tokens == ["colour"] and q.shape == (plain.dim,) and not q.any()


def test_an_exact_key_without_a_vector_answers_like_a_dict(plain):
    res = core.lookup("colour", {"colour": 1, "brand": 2}, plain)
    assert res.exact and [(e.key, e.weight) for e in res.entries] == [("colour", 1.0), ("brand", 0.0)]
    assert res.cosine.tolist() == [0.0, 0.0]  # neither the query nor the key has c(text): cosine 0
    assert res.soft_value == 1.0


def test_entries_carry_each_keys_cosine_and_ngram_score(attn_home):
    save_axes("axes")  # brand, model, color are the first three coordinate axes
    axes = load_vectors("axes")
    seed = {"brand": "Porche", "model": "Taycan", "color": "black"}
    index = KeyIndex(axes, list(seed), ngram_weight=0.5, center=False)
    res = core.lookup("color", seed, axes, exact=False, index=index)
    # by hand: cos(color, .) = 1, 0, 0; <color> shares no 3-6-gram with <brand> or <model>: Dice 1, 0, 0
    got = {e.key: (e.cosine, e.ngram, e.similarity) for e in res.entries}
    assert got == {"color": (1.0, 1.0, 1.0), "brand": (0.0, 0.0, 0.0), "model": (0.0, 0.0, 0.0)}


def test_a_nan_row_met_while_embedding_is_damage_naming_the_file(plain):
    from attncli.vectors.store import CorruptModel

    damaged = np.array(plain.vectors)  # stands in for a table too big to scan when loaded
    damaged[WORDS.index("color")] = np.nan
    plain.vectors = damaged
    with pytest.raises(CorruptModel, match=r"\(vectors.npy holds NaN or infinite values\)"):
        embed_tokens(plain, ["color", "colour"], missing=[])


def test_a_soft_value_beyond_float_range_is_none_without_a_warning():
    import warnings

    biggest = 1.7976931348623157e308  # sys.float_info.max: weights a hair over 1 overflow to inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would reach the user's terminal
        assert core.soft_value([biggest, biggest], np.array([0.5000001, 0.5])) is None
        assert core.soft_value([biggest, -biggest], np.array([0.5, 0.5])) == 0.0
        assert core.soft_value([biggest, -biggest], np.array([1.5, 1.5])) is None  # overflows


def test_a_word_too_short_for_the_models_ngrams_has_no_vector(attn_home):
    from _lookup_fixtures import BUCKET, DIM
    from attncli.vectors import store

    rng = np.random.default_rng(3)
    store.save_vectors("m46", WORDS, rng.standard_normal((len(WORDS), DIM)).astype(np.float32),
                       ngrams=rng.standard_normal((BUCKET, DIM)).astype(np.float32),
                       subword={"min_n": 4, "max_n": 6, "bucket": BUCKET})
    v = load_vectors("m46")  # "<x>" has 3 characters: no 4-6-gram, so no subword vector
    with pytest.raises(UnknownWord, match="^unknown word 'x': it is not in the vocabulary of model 'm46', and too short"):
        embed_tokens(v, ["colour", "x"])
    missing: list[int] = []
    out = embed_tokens(v, ["colour", "x", "color"], missing=missing)
    assert missing == [1] and not out[1].any() and np.isfinite(out).all() and out[0].any()
    # beside a word with no n-gram, one with exactly one ("<ab>") still gets its subword vector,
    # the mean of its n-grams' rows (subword.py's buckets, checked against gensim in test_lookup)
    from attncli.vectors.subword import ngram_buckets

    out = embed_tokens(v, ["x", "ab"], missing=[])
    rows = ngram_buckets("ab", 4, 6, BUCKET)
    assert len(rows) == 1
    f32_close(out[1], np.asarray(v.ngrams)[rows].mean(axis=0), length=len(rows))  # float32 rows


def test_exact_key_is_dict_like_by_default(tiny):
    seed = {"brand": "Porche", "model": "Taycan", "color": "black"}
    index = KeyIndex(tiny, list(seed))
    assert core.exact_key("color", seed, index) is True
    assert core.exact_key("color", seed, index, exact=False) is False
    assert core.exact_key("colour", seed, index) is False


def test_the_ngram_weight_passed_to_lookup_is_the_one_used(attn_home):
    save_axes("axes")
    axes = load_vectors("axes")
    seed = {"brand": "Porche", "model": "Taycan", "color": "black"}
    # lambda = 0: the similarity is the centred cosine alone, by hand (1, -1/3, -1/3): mu = 1/4 on each axis
    res = core.lookup("color", seed, axes, ngram_weight=0.0, exact=False)
    f32_close(sorted(res.similarity.tolist(), reverse=True), [1.0, -1 / 3, -1 / 3], length=4)  # float32 axes


@pytest.mark.parametrize("bad", [1.5, 2.0, -0.1, float("nan"), float("inf"), "0.5"])
def test_ngram_weight_outside_0_1_is_refused(bad):
    from attncli.lookup.keyindex import check_ngram_weight

    with pytest.raises(BadInput, match=r"^--ngram-weight must be between 0 and 1, got "):
        check_ngram_weight(bad)
    assert check_ngram_weight(1) == 1.0 and check_ngram_weight(0.0) == 0.0


def test_vectorless_keys_lists_the_keys_without_a_vector(plain, tiny):
    assert KeyIndex(tiny, ["color", "colour"]).vectorless_keys == []
    assert KeyIndex(plain, ["colour", "brand", "top zzqx"]).vectorless_keys == ["colour", "top zzqx"]


def test_top_k_keeps_the_k_most_similar_for_every_k(tiny):
    import json as _json

    from attncli.env.paths import data_dir

    specs = _json.loads((data_dir() / "car_specs.json").read_text(encoding="utf-8"))
    full = core.lookup("speed", specs, tiny)
    by_similarity = sorted(full.entries, key=lambda e: -e.similarity)  # Python's sort: the reference
    for k in range(1, len(specs) + 1):
        res = core.lookup("speed", specs, tiny, top_k=k)
        assert sorted(res.keys) == sorted(e.key for e in by_similarity[:k]), k


def test_an_exact_key_outside_the_top_k_replaces_the_kth(tiny):
    # case variants tokenize alike: all five tie at similarity 1; whichever 3 the partition keeps,
    # the exact key is in the answer with weight 1 beside 2 of the others
    keys = ["Price", "PRICE", "pRice", "priCe", "price"]
    res = core.lookup("price", {k: i for i, k in enumerate(keys)}, tiny, top_k=3)
    assert len(res.keys) == 3 and res.keys[0] == "price" and res.weight.tolist() == [1.0, 0.0, 0.0]
    assert set(res.keys[1:]) <= set(keys[:4]) and res.soft_value == 4.0


def test_the_exact_key_replaces_the_least_similar_of_the_top_k_when_rounding_ranks_others_above_it(tiny):
    # the orders of three words: the same tokens, so cosine 1 and Dice 1 by the formula, but float32
    # sums in other orders round a little differently: here two orders of the key score above the
    # query's own key. A dict always finds its key; the other k - 1 are the most similar of the rest.
    import itertools

    keys = [" ".join(p) for p in itertools.permutations(["speed", "time", "horsepower"])]
    seed = {k: i for i, k in enumerate(keys)}
    similarity = dict(zip(keys, KeyIndex(tiny, keys).score(keys[0])[3].tolist()))
    others = sorted((s for k, s in similarity.items() if k != keys[0]), reverse=True)  # Python's sort: the reference
    assert max(similarity.values()) <= 1.0  # cosine <= 1 and Dice <= 1: a blend of them too (was 1.00000001)
    for k in range(1, len(keys) + 1):
        res = core.lookup(keys[0], seed, tiny, top_k=k)
        assert res.keys[0] == keys[0] and res.weight.tolist() == [1.0] + [0.0] * (k - 1), k
        assert sorted(res.similarity[1:].tolist(), reverse=True) == others[: k - 1], k


def test_a_nan_ngram_row_met_while_embedding_is_damage_naming_both_files(tiny):
    from attncli.vectors.store import CorruptModel

    tiny.ngrams = np.full(np.shape(tiny.ngrams), np.nan, dtype=np.float32)  # as if too big to scan at load
    with pytest.raises(CorruptModel, match=r"\(vectors.npy or ngrams.npy holds NaN or infinite values\)"):
        embed_tokens(tiny, ["color", "colour"])


@pytest.mark.parametrize("encoder, weight", [
    ("all-mpnet-base-v2", 0.15),                              # a hub id's bare name
    ("sentence-transformers/all-mpnet-base-v2", 0.15),        # an owner/name hub id
    ("/models/st/All-MPNet-Base-v2/", 0.15),                  # a directory: its last part, any case, a trailing /
    ("C:\\models\\all-mpnet-base-v2", 0.15),                  # a Windows path
    ("all-MiniLM-L6-v2", 0.6),                                # not listed: the word vectors' lambda
    ("sentence-transformers/all-MiniLM-L6-v2", 0.6),
    ("all-mpnet-base-v2/other", 0.6),                         # the listed name is not the last part
    ("models/all-mpnet-base-v2X", 0.6),                       # a name that only begins like a listed one
])
def test_an_encoders_default_ngram_weight_is_looked_up_by_its_last_name_part(encoder, weight):
    from attncli.lookup.params import encoder_ngram_weight

    # params.py: by the directory's or hub id's last part, case-insensitive; 0.15 for all-mpnet-base-v2
    assert encoder_ngram_weight(encoder) == weight


def _python_key_vector(v, tokens: list[str]) -> np.ndarray:
    """c(key) / |c(key)| by keyindex.py's formula, in float64 with Python's own loops: mean over the
    tokens of (u_t - mu), u_t = v_t / |v_t|, mu = the vocabulary's mean unit vector."""
    table = np.asarray(v.vectors, dtype=np.float64)
    units = table / np.linalg.norm(table, axis=1, keepdims=True)
    mu = units.mean(axis=0)
    total = np.zeros(table.shape[1])
    for t in tokens:
        total += units[v.index[t]] - mu
    c = total / len(tokens)
    return c / np.linalg.norm(c)


def test_keys_of_every_length_get_the_mean_of_their_tokens(tiny):
    # the keys longer than 64 tokens take the chunked float64 path (chunks of 4096 tokens): keys of
    # 64, 65 and 70 tokens, and one of 5,000 (two chunks), beside short ones
    rng = np.random.default_rng(7)
    lengths = [1, 2, 3, 64, 65, 70, 5000, 2]
    keys = [" ".join(rng.choice(WORDS[4:], size=n).tolist()) for n in lengths]
    index = KeyIndex(tiny, keys)
    assert index.key_matrix.shape == (len(keys), tiny.dim)
    for row, key in zip(index.key_matrix, keys):
        # float32 against float64: a dot product over DIM, the vocabulary's mean, and a float32 mean over the
        # key's tokens up to 64 of them (longer keys are summed in float64)
        n = len(key.split())
        f32_close(row, _python_key_vector(tiny, key.split()), length=max(DIM, len(WORDS), n if n <= 64 else 1), scale=1.0)


def test_a_key_without_a_vector_has_a_zero_row_and_cosine_zero_beside_an_exact_key(plain):
    seed = {"colour": 1, "brand": 2, "zzqx top": 3}  # 'colour' and 'zzqx' have no vector in 'plain'
    index = KeyIndex(plain, list(seed))
    assert not index.key_matrix[[0, 2]].any() and index.key_matrix[1].any()
    res = core.lookup("brand", seed, plain, index=index)  # an exact key: answered like a dict
    cosine = dict(zip(res.keys, res.cosine.tolist()))
    assert cosine["colour"] == 0.0 and cosine["zzqx top"] == 0.0 and cosine["brand"] == pytest.approx(1.0)


def test_the_missing_vector_error_names_the_key_the_word_and_the_model(plain, attn_home):
    from _lookup_fixtures import BUCKET, DIM
    from attncli.vectors import store

    index = KeyIndex(plain, ["brand", "top zzqx", "colour"])
    assert str(index.missing_error) == (
        "key 'top zzqx': unknown word 'zzqx': model 'plain' has no subword vectors: use one that has (the "
        "built-in default model, 'attn train --algorithm fasttext', or a fastText .bin brought in with "
        "'attn import --format fasttext-bin')")
    rng = np.random.default_rng(3)  # subwords of 4-6 characters: "<x>" has none
    store.save_vectors("m46", WORDS, rng.standard_normal((len(WORDS), DIM)).astype(np.float32),
                       ngrams=rng.standard_normal((BUCKET, DIM)).astype(np.float32),
                       subword={"min_n": 4, "max_n": 6, "bucket": BUCKET})
    index = KeyIndex(load_vectors("m46"), ["brand", "x"])
    assert str(index.missing_error) == (
        "key 'x': unknown word 'x': it is not in the vocabulary of model 'm46', and too short for the model's "
        "character n-grams to build a vector from: use a longer word, or a model trained with a smaller --min-n")


def test_score_refuses_a_query_without_a_vector_unless_told_it_is_an_exact_key(plain):
    index = KeyIndex(plain, ["brand", "color"])
    with pytest.raises(BadInput, match="^query 'zzqx': unknown word 'zzqx': model 'plain' has no subword"):
        index.score("zzqx")
    tokens, cosine, _, _ = index.score("zzqx", allow_no_vector=True)
    assert tokens == ["zzqx"] and cosine.tolist() == [0.0, 0.0]


def test_cosines_stay_within_minus_1_and_1_when_float32_rounding_would_cross(attn_home):
    from attncli.vectors import store

    # seed 0's 16-dim vector: its float32 unit vector dotted with itself rounds to 1.0000001
    v = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    store.save_vectors("pm", ["up", "down"], np.stack([v, -v]), meta={"algorithm": "test"})
    index = KeyIndex(load_vectors("pm"), ["up", "down"], ngram_weight=0.0, center=False)
    _, cosine, _, similarity = index.score("up")
    assert cosine.tolist() == [1.0, -1.0] and similarity.tolist() == [1.0, -1.0]  # cos(v, v), cos(v, -v)


def _ngrams(token: str) -> list[str]:
    marked = f"<{token}>"
    return [marked[i : i + n] for n in range(3, 7) for i in range(len(marked) - n + 1)]


def _python_dice(query_tokens: list[str], key: str) -> float:
    """keyindex.py's ngram_i by its formula, with Python strings: the query's distinct tokens' n-grams
    G(q), the key's distinct tokens' G(k), o = how many of G(k) occur in G(q)."""
    q = [g for t in dict.fromkeys(query_tokens) for g in _ngrams(t)]
    k = [g for t in dict.fromkeys(key.split()) for g in _ngrams(t)]
    overlap = sum(g in set(q) for g in k)
    return 2 * min(overlap, len(q)) / (len(q) + len(k))


def test_ngram_scores_equal_the_dice_formula_for_short_and_empty_queries(tiny):
    keys = ["a", "brand", "car a", "top speed", "ab", "speed speed"]
    index = KeyIndex(tiny, keys)
    for query in (["a"], ["ab"], ["speed"], ["top", "speed", "top"], ["colour"], ["zz"]):
        expected = [_python_dice(query, k) for k in keys]
        np.testing.assert_allclose(index.ngram_scores(query), expected, rtol=0, atol=1e-12, err_msg=str(query))
    assert index.ngram_scores(["a"]).tolist()[:3] == [1.0, 0.0, 0.25]  # by hand: <a> is 1 of <car>'s 6 + 1
    assert index.ngram_scores([]).tolist() == [0.0] * len(keys)  # no n-gram in common with anything


def test_ngram_scores_count_each_distinct_token_of_a_key_once_whatever_the_keys_share(tiny):
    # 84 keys of 1 to 3 tokens over 4 words: many (key, token) pairs, repeats inside keys
    import itertools

    words = ["ab", "b", "ba", "a"]
    keys = [" ".join(c) for n in (1, 2, 3) for c in itertools.product(words, repeat=n)]
    index = KeyIndex(tiny, keys)
    for query in (["a"], ["b", "ab"], ["ba"], ["ab", "ab"]):
        expected = [_python_dice(query, k) for k in keys]
        np.testing.assert_allclose(index.ngram_scores(query), expected, rtol=0, atol=1e-12, err_msg=str(query))


class _GivenSimilarities(KeyIndex):
    """An index whose similarities are given: lookup's selection is checked on its own."""

    def __init__(self, similarity: np.ndarray):
        self.name, self.missing_error, self.similarity = "given", None, similarity

    def score(self, query, *, allow_no_vector=False):
        zeros = np.zeros_like(self.similarity)
        return [query], zeros, zeros, self.similarity


def test_top_k_keeps_the_k_largest_similarities_of_600_keys_for_every_k():
    similarity = np.random.default_rng(0).random(600)
    seed = {f"key {i}": i for i in range(600)}
    index = _GivenSimilarities(similarity)
    ranked = sorted(similarity.tolist(), reverse=True)  # Python's sort: the reference
    for k in range(1, 601):
        res = core.lookup("query", seed, None, top_k=k, index=index)
        assert sorted(res.similarity.tolist(), reverse=True) == ranked[:k], k


def test_a_soft_value_whose_sum_turns_nan_is_none_without_a_warning():
    import warnings

    biggest = 1.7976931348623157e308
    values = [biggest] * 8 + [-biggest] * 8  # BLAS's partial sums reach +inf and -inf: inf - inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert core.soft_value(values, np.full(16, 1.5)) in (None, 0.0)
