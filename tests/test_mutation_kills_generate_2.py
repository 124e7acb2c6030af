"""Tests written for the survivors of the mutation run of the generate wing (decoders.py, run.py,
sampling.py, weights.py; docs/mutation.md (its git history)): the JSON document's every field, the
built-in LM's prompt mapping and notes, its context, its damaged-vocabulary refusal, its logit
lens and lens verdicts against the torch model it was trained as, every refusal word for word,
ties in the top-k cut, the candidates and ``top_keys``, ``sample`` as an inverse CDF, float64
probabilities, and ``generate`` on a decoder with fixed logits. References are torch
(``attncli.lm.torch_model.model_from_weights``), hand-worked examples, ``math.exp`` and Python's own
``sorted``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _attention_fixtures import SENTENCES, make_random_attention, make_vectors, random_config
from test_logit_lens import builtin_reference as torch_stream_probs  # (L + 1, T, V) off the torch CausalLM
from attncli.errors import BadInput
from attncli.generate.decoders import BuiltinLM, load_decoder
from attncli.generate.run import Settings, document, generate, lens_layers
from attncli.generate.weights import View, top_keys
from attncli.lm import checkpoint, model as trained, train as lm_train, train_config
from attncli.vectors import store
from attncli.vectors.store import CorruptModel

WORDS = sorted({w for s in SENTENCES for w in s.split()})


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def save_model(name: str, out_words: list[str], config_changes: dict, seed: int = 0) -> None:
    """A random built-in LM over SENTENCES' words with output words ``out_words`` and config.json
    changed by ``config_changes`` (a value of None removes the key)."""
    d, layers, heads = 16, 2, 4
    make_vectors(name, WORDS, d, seed)
    config = random_config(d, layers, heads, len(out_words))
    for key, value in config_changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    rng = np.random.default_rng(seed + 1)
    weights = {key: rng.normal(scale=0.6, size=shape).astype(np.float32)
               for key, shape in checkpoint.expected_shapes(config).items()}
    src = store.model_dir(name)
    lm_train.save(name, src, config, weights, out_words, SENTENCES, dict(store.read_meta(src), attention={"perplexity": 1.0}))


# --- the JSON document: header and steps ----------------------------------------------------------


@pytest.mark.parametrize("opts,view", [
    ({"greedy": True, "layer": 1, "head": 0},
     {"layer": 1, "head": 0, "rollout": False, "label": "layer 1 (layers 0-2), head 0"}),
    ({"greedy": True}, {"layer": 2, "head": None, "rollout": False, "label": "layer 2 (layers 0-2), mean of 4 heads"}),
    ({"seed": 5, "top_k": 3, "temperature": 0.7, "rollout": True},
     {"layer": None, "head": None, "rollout": True,
      "label": "rollout over 3 layers (head means + identity, Abnar & Zuidema 2020)"}),
], ids=["head", "mean", "rollout"])
def test_the_document_holds_every_header_field_and_each_steps_candidates(opts, view):
    make_random_attention("rand", layers=3, heads=4)
    att = trained.load_trained("rand")
    words = att.output_words  # WORDS[:10] + <unk>, </s>: "the" is read but cannot be written
    gen = generate(load_decoder("rand"), "The cat!", Settings(n=4, ignore_eos=True, **opts))
    doc = document(gen)
    assert doc["model"] == {"name": "rand", "kind": "built-in LM", "layers": 3, "heads": 4,
                            "context": att.config["max_len_trained"], "vocab_size": len(words)}
    assert doc["prompt"] == "The cat!" and doc["prompt_tokens"] == ["the", "cat"]
    assert doc["prompt_mapping"] == {
        "tokens": [{"token": "the", "output": "<unk>", "input": "vector"},
                   {"token": "cat", "output": "cat", "input": "vector"}],
        "notes": ["the prompt is read as 2 lower-cased word(s): the cat",
                  f"'the' is not one of the model's {len(words)} output words (it maps to <unk>: the model cannot "
                  "write it); it is read through its own word vector"]}
    greedy = opts.get("greedy", False)
    assert doc["settings"] == {"n": 4, "greedy": greedy, "temperature": None if greedy else 0.7,
                               "top_k": None if greedy else 3, "seed": None if greedy else 5, "ignore_eos": True}
    assert doc["view"] == view
    # every step's probability and runners-up against the torch model over the finished text
    probs = torch_stream_probs(att, doc["tokens"])[-1]  # (T, V) the model's own output
    for step in doc["steps"]:
        p = probs[step["query"]]
        top = sorted(range(len(words)), key=lambda i: (-p[i], i))[:5]
        assert [c["token"] for c in step["candidates"]] == [words[i] for i in top]
        np.testing.assert_allclose([c["prob"] for c in step["candidates"]], p[top], atol=1e-5)
        assert step["token"] == words[step["id"]]
        np.testing.assert_allclose(step["prob"], p[step["id"]], atol=1e-5)
        allowed = sorted((i for i in range(len(words)) if words[i] not in ("<unk>", "</s>")), key=lambda i: (-p[i], i))
        if greedy:  # the most probable token the model may write (--ignore-eos: not </s>)
            assert step["id"] == allowed[0] and step["sample_prob"] is None
        else:  # drawn from p^(1/T) renormalised over the top 3 allowed, 0 elsewhere
            kept = allowed[:3]
            assert step["id"] in kept
            scaled = p[kept] ** (1 / 0.7)
            np.testing.assert_allclose(step["sample_prob"], p[step["id"]] ** (1 / 0.7) / scaled.sum(), rtol=1e-4)


# --- the built-in LM: prompt, context, damaged vocabulary, inputs ----------------------------------


def test_a_prompt_already_in_lower_case_words_gets_no_note_and_each_token_its_output_id():
    make_random_attention("rand")
    dec = load_decoder("rand")
    words = dec.att.output_words
    enc = dec.encode("cat dog")
    assert enc.notes == [] and enc.tokens == ["cat", "dog"]
    assert enc.ids == [words.index("cat"), words.index("dog")]
    enc = dec.encode("Cat  DOG, the")
    assert enc.ids == [words.index("cat"), words.index("dog"), None]
    assert enc.notes[0] == "the prompt is read as 3 lower-cased word(s): cat dog the"
    assert all(x.dtype == np.float32 and x.shape == (16,) for x in enc.inputs)


def test_the_notes_name_how_each_unwritable_word_is_read():
    """On the shipped default model (fastText: some words are read through their character n-grams)."""
    dec = load_decoder()
    vectors = dec.att.vectors
    own = next(w for w in vectors.words[::-1] if w not in dec.index and w.isalpha() and w.islower())
    short = next(w for w in ("qx", "zq", "xj", "qj") if not vectors.can_embed(w))
    assert "zyxqv" not in vectors and vectors.can_embed("zyxqv")
    enc = dec.encode(f"{own} zyxqv {short}")
    n = f"{dec.vocab_size:,}"
    said = f"is not one of the model's {n} output words (it maps to <unk>: the model cannot write it); it is read through"
    assert enc.notes == [f"'{own}' {said} its own word vector",
                         f"'zyxqv' {said} a vector built from its character n-grams",
                         f"'{short}' {said} a zero vector (no word vector and no character n-grams), as in training"]
    assert [m["input"] for m in enc.mapping] == ["vector", "subwords", "zeros"]
    assert enc.ids == [None, None, None]
    np.testing.assert_array_equal(enc.inputs[2], np.zeros(vectors.dim))
    assert all(x.dtype == np.float32 for x in enc.inputs)


def test_a_model_without_unk_maps_an_unwritable_word_to_nothing():
    save_model("nounk", WORDS[:10] + ["</s>"], {})
    dec = load_decoder("nounk")
    assert dec.banned == () and dec.eos_ids == (10,)
    enc = dec.encode("the cat")
    assert enc.mapping[0] == {"token": "the", "output": None, "input": "vector"}
    assert enc.mapping[1] == {"token": "cat", "output": "cat", "input": "vector"}


@pytest.mark.parametrize("prompt,message", [
    ("", "the prompt is empty: give a few words to continue"),
    ("  \t ", "the prompt is empty: give a few words to continue"),
    ("!!! ... ?", "the prompt has no words (the built-in LM reads runs of letters and digits)"),
])
def test_a_prompt_without_words_is_refused_by_the_decoder(prompt, message):
    make_random_attention("rand")
    with pytest.raises(BadInput) as caught:
        load_decoder("rand").encode(prompt)
    assert str(caught.value) == message


def test_the_context_is_the_trained_length_else_the_training_default():
    save_model("short", WORDS[:10] + ["<unk>", "</s>"], {"max_len_trained": 7})
    dec = load_decoder("short")
    assert dec.context == 7
    with pytest.raises(BadInput, match="reads at most 7"):
        generate(dec, "the cat sat on the mat and", Settings(n=1, greedy=True))
    save_model("old", WORDS[:10] + ["<unk>", "</s>"], {"max_len_trained": None})
    assert load_decoder("old").context == train_config.TrainConfig().max_len  # 80, what training uses


def test_an_output_vocabulary_that_does_not_match_the_head_is_a_corrupt_model():
    make_random_attention("rand")
    path = store.model_dir("rand") / checkpoint.SUBDIR / checkpoint.OUTPUT_VOCAB
    path.write_text(path.read_text(encoding="utf-8") + "extra\n", encoding="utf-8")
    with pytest.raises(CorruptModel) as caught:
        BuiltinLM(trained.load_trained("rand"))
    assert str(caught.value) == ("the trained attention of model 'rand' is damaged: its output_vocab.txt has "
                                 "13 words for 12 outputs; retrain it")


def test_the_input_after_a_word_is_its_vector_or_zeros():
    make_random_attention("rand")
    dec = load_decoder("rand")
    cat = dec.input_of(dec.index["cat"])
    np.testing.assert_array_equal(cat, dec.att.vectors.vector("cat"))
    end = dec.input_of(dec.eos_ids[0])  # "</s>" has no word vector and these vectors no n-grams
    assert end.shape == (16,) and end.dtype == cat.dtype and not end.any()


def test_token_id_reads_a_word_as_the_prompt_does():
    make_random_attention("rand")
    dec = load_decoder("rand")
    words = dec.att.output_words
    assert dec.token_id("Cat") == words.index("cat") and dec.token_id("DOG") == words.index("dog")
    assert dec.token_id("the") is None


def test_load_decoder_refuses_options_that_need_a_transformer():
    make_random_attention("rand")
    for option, value in (("chat", True), ("backend", "torch"), ("dtype", "float32")):
        with pytest.raises(BadInput) as caught:
            load_decoder("rand", **{option: value})
        assert str(caught.value) == f"--{option} needs --transformer NAME_OR_PATH (a pretrained model)"
    assert load_decoder("rand", chat=False, backend="auto", dtype=None).name == "rand"  # the defaults: no refusal
    with pytest.raises(BadInput) as caught:
        load_decoder("rand", "gpt2")
    assert str(caught.value) == ("--model names a word-vector model with a built-in LM; --transformer a pretrained "
                                 "one: give one of them")


def test_load_decoder_hands_the_options_to_the_pretrained_model(tiny_gpt2_dir):
    assert load_decoder(None, str(tiny_gpt2_dir), chat=True, backend=None).chat is True
    assert load_decoder(None, str(tiny_gpt2_dir), chat=False, backend=None).chat is False


# --- the built-in LM's logit lens and the lens verdicts of a generation ------------------------------


def test_the_builtin_lens_lists_five_by_default_and_follows_a_token():
    make_random_attention("rand", layers=3)
    dec = load_decoder("rand")
    tokens = ["the", "cat", "sat", "on"]
    probs = torch_stream_probs(dec.att, tokens)  # (L + 1, T, V)
    follow = dec.index["dog"]
    lens = dec.lens(dec.encode(" ".join(tokens)).inputs, follow=follow)
    np.testing.assert_allclose(lens.top_probs, -np.sort(-probs, axis=-1)[..., :5], atol=1e-5)
    np.testing.assert_allclose(lens.follow_prob, probs[..., follow], atol=1e-5)
    assert (lens.follow_rank == (probs > probs[..., follow:follow + 1]).sum(-1)).all()


def test_lens_layers_of_the_builtin_lm_pass_over_unk():
    """The verdict per step against the torch model's stream, <unk> (never written) taken out."""
    make_random_attention("rand", layers=3)
    dec = load_decoder("rand")
    gen = generate(dec, "the cat sat", Settings(n=6, seed=2, ignore_eos=True))
    probs = torch_stream_probs(dec.att, gen.tokens)  # (L + 1, T, V)
    probs[..., dec.unk] = -1.0
    want = []
    for s in gen.steps:
        tops = probs[:, s.query].argmax(-1)  # (L + 1,)
        layer = None
        if tops[-1] == s.id:
            layer = len(tops) - 1
            while layer > 0 and tops[layer - 1] == s.id:
                layer -= 1
        want.append(layer)
    assert lens_layers(gen) == want


# --- weights.py -------------------------------------------------------------------------------------


def test_view_labels():
    assert View(layer=0, head=3).label(4, 2) == "layer 0 (layers 0-1), head 3"
    assert View(layer=5).label(12, 6) == "layer 5 (layers 0-5), mean of 12 heads"


@pytest.mark.parametrize("k", [1, 7, 40, 64])
def test_top_keys_break_ties_by_the_earlier_key(k):
    """Against Python's sorted on (-weight, key), on rows long enough for NumPy's default sort to be unstable."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        row = rng.integers(0, 4, size=64) / 8.0  # (64,) many ties
        want = sorted(range(64), key=lambda j: (-row[j], j))[:k]
        assert top_keys(row, k) == [(j, float(row[j])) for j in want]


@pytest.mark.parametrize("bad", ["abc", None, 1, True, 1.5, [80], 4_097])
def test_a_hostile_max_len_trained_is_refused_with_a_message(bad):
    """config.json's max_len_trained sets attn generate's context and attn heads' cut: a stranger's
    value that is not a length attn train-attention accepts (--max-len 2..4,096) is a damaged
    model (exit 1, as every damaged model; one line), never an internal error. (Found by the mutation run: the field was
    read with int() unchecked.)"""
    from typer.testing import CliRunner

    from attncli.cli.main import app

    assert checkpoint.MAX_LEN_TRAINED == train_config.MAX_LEN
    save_model("hostile", WORDS[:10] + ["<unk>", "</s>"], {"max_len_trained": 80})
    path = store.model_dir("hostile") / checkpoint.SUBDIR / checkpoint.CONFIG
    path.write_text(path.read_text(encoding="utf-8").replace('"max_len_trained": 80', f'"max_len_trained": {json.dumps(bad)}'),
                    encoding="utf-8")
    for args in (["generate", "the cat", "--model", "hostile", "-n", "2", "--greedy"], ["heads", "--model", "hostile"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        message = " ".join(result.stderr.split())  # rich wraps at the terminal's width (a long tmp path)
        assert "max_len_trained is" in message and "damaged" in message
        assert "internal error" not in message and "Traceback" not in result.stderr


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


# --- the refusals, word for word, and the bounds they leave open ---------------------------------------


@pytest.mark.parametrize("options,message", [
    ({"n": 0}, "-n must be between 1 and 1,000 new tokens (got 0); the model's context may allow fewer"),
    ({"n": 1001}, "-n must be between 1 and 1,000 new tokens (got 1001); the model's context may allow fewer"),
    ({"temperature": 0.0}, "--temperature must be > 0 (got 0.0); for the most probable token at every step use --greedy"),
    ({"temperature": -1.5}, "--temperature must be > 0 (got -1.5); for the most probable token at every step use --greedy"),
    ({"temperature": float("nan")}, "--temperature must be a number in (0, 1000] (got nan)"),
    ({"temperature": float("inf")}, "--temperature must be a number in (0, 1000] (got inf)"),
    ({"temperature": 1000.5}, "--temperature must be a number in (0, 1000] (got 1000.5)"),
    ({"greedy": True, "temperature": float("nan")}, "--temperature must be a finite number (got nan)"),  # unused, still refused
    ({"greedy": True, "temperature": float("-inf")}, "--temperature must be a finite number (got -inf)"),
    ({"top_k": -1}, "--top-k must be 0 (the whole vocabulary) or more (got -1)"),
    ({"seed": -1}, "--seed must be between 0 and 2^32-1 (got -1)"),
    ({"seed": 2**32}, "--seed must be between 0 and 2^32-1 (got 4294967296)"),
    ({"layer": -1}, "--layer must be 0 or more (got -1)"),
    ({"head": -2}, "--head must be 0 or more (got -2)"),
    ({"rollout": True, "layer": 0}, "--rollout combines every layer and head: leave out --layer and --head"),
    ({"rollout": True, "head": 0}, "--rollout combines every layer and head: leave out --layer and --head"),
])
def test_each_settings_refusal_word_for_word(options, message):
    with pytest.raises(BadInput) as caught:
        Settings(**options).check()
    assert str(caught.value) == message


@pytest.mark.parametrize("options", [
    {"n": 1}, {"n": 1000}, {"temperature": 1000.0}, {"temperature": 1e-9}, {"top_k": 0}, {"top_k": None},
    {"seed": 0}, {"seed": 2**32 - 1}, {"layer": 0, "head": 0}, {"rollout": True},
    {"greedy": True, "temperature": 0.0}, {"greedy": True, "temperature": -1.5},
])
def test_the_settings_bounds_are_accepted(options):
    Settings(**options).check()  # no refusal


def test_each_view_refusal_word_for_word_and_the_views_chosen():
    from attncli.generate.weights import choose_view

    for layer, head, rollout, message in [
        (3, None, False, "--layer 3 is out of range: model 'm' has layers 0..2"),
        (-1, None, False, "--layer -1 is out of range: model 'm' has layers 0..2"),
        (None, 4, False, "--head 4 is out of range: model 'm' has heads 0..3"),
        (None, -1, False, "--head -1 is out of range: model 'm' has heads 0..3"),
        (0, None, True, "--rollout combines every layer and head: leave out --layer and --head"),
        (None, 0, True, "--rollout combines every layer and head: leave out --layer and --head"),
    ]:
        with pytest.raises(BadInput) as caught:
            choose_view(3, 4, layer, head, rollout, "m")
        assert str(caught.value) == message
    assert choose_view(3, 4, None, None, False, "m") == View(layer=2, head=None, rollout=False)  # the last layer
    assert choose_view(3, 4, 0, 0, False, "m") == View(layer=0, head=0, rollout=False)
    assert choose_view(3, 4, 2, 3, False, "m") == View(layer=2, head=3, rollout=False)
    assert choose_view(3, 4, None, None, True, "m") == View(layer=2, head=None, rollout=True)


def test_each_context_refusal_word_for_word_and_the_room_left():
    from types import SimpleNamespace

    from attncli.generate.run import check_context

    model = SimpleNamespace(context=10, name="m")
    for prompt, n, message in [
        (10, 1, "the prompt is 10 tokens long, and model 'm' reads at most 10 (its context): shorten the prompt "
                "to at most 9 tokens"),
        (12, 1, "the prompt is 12 tokens long, and model 'm' reads at most 10 (its context): shorten the prompt "
                "to at most 9 tokens"),
        (9, 2, "-n 2 goes past the context of model 'm': the prompt is 9 tokens and the model reads at most 10, "
               "so -n can be at most 1"),
        (4, 7, "-n 7 goes past the context of model 'm': the prompt is 4 tokens and the model reads at most 10, "
               "so -n can be at most 6"),
    ]:
        with pytest.raises(BadInput) as caught:
            check_context(model, prompt, n)
        assert str(caught.value) == message
    check_context(model, 9, 1)
    check_context(model, 4, 6)
    check_context(model, 1, 9)


class _FixedDraws:
    """A stand-in for np.random.Generator whose random() returns the given numbers in [0, 1)."""

    def __init__(self, *draws: float):
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


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


def test_the_view_of_float32_weights_is_float64():
    """view_matrix is (T, T) float64 (its docstring): a head mean of float32 weights is taken in
    float64, against the mean written out over the heads converted one by one."""
    from attncli.generate.weights import view_matrix

    rng = np.random.default_rng(6)
    weights = [rng.dirichlet(np.ones(7), size=(3, 7)).astype(np.float32) for _ in range(2)]  # 2 x (h=3, 7, 7)
    mean = view_matrix(weights, View(layer=1))
    assert mean.dtype == np.float64
    want = (weights[1][0].astype(np.float64) + weights[1][1].astype(np.float64) + weights[1][2].astype(np.float64)) / 3
    np.testing.assert_allclose(mean, want, rtol=1e-15, atol=0)
    head = view_matrix(weights, View(layer=0, head=2))
    assert head.dtype == np.float64 and np.array_equal(head, weights[0][2].astype(np.float64))


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
