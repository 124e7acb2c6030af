"""attn generate with attn's own LM (attncli/generate/decoders.py): the prompt mapped to words and its
notes, the context, a damaged vocabulary or max_len_trained refused as a damaged model, the inputs,
the options handed to a pretrained model, and the built-in logit lens against the torch model it
was trained as (``attncli.tinylm.train.model_from_weights``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attncli.tinylm import checkpoint, train_config
from _attention_fixtures import SENTENCES, make_random_attention, make_vectors, random_config, widest
from _tolerance import f32_close
from test_logit_lens import builtin_reference as torch_stream_probs

from attncli.errors import BadInput
from attncli.generate.decoders import BuiltinLM, load_decoder
from attncli.generate.run import Settings, generate, lens_layers
from attncli.tinylm import model as trained
from attncli.tinylm import train as lm_train
from attncli.vectors import store
from attncli.vectors.store import CorruptModel


WORDS = sorted({w for s in SENTENCES for w in s.split()})


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
    # float32 (attn) against torch float32 through the layers, the final norm and the unembedding: each
    # probability against itself, in a row holding its top five and the followed token's
    got = np.concatenate([lens.top_probs, lens.follow_prob[..., None]], axis=-1)  # (L + 1, T, 6)
    want = np.concatenate([-np.sort(-probs, axis=-1)[..., :5], probs[..., follow, None]], axis=-1)
    f32_close(got, want, depth=dec.att.layers + 1, length=widest(dec.att.config), per_element=True)
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
