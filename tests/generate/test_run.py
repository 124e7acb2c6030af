"""attn generate's run (attncli/generate/run.py, step_view.py): the JSON document's every header field
and each step's candidates, the view's label and float64 weights, top_keys' ties, and every
refusal of the settings, the view and the context word for word with the bounds they leave open.
References: hand-worked examples and Python's own ``sorted``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _attention_fixtures import make_random_attention, widest
from _tolerance import f32_close
from test_logit_lens import builtin_reference as torch_stream_probs

from attncli.errors import BadInput
from attncli.generate.decoders import load_decoder
from attncli.generate.run import Settings, document, generate
from attncli.generate.step_view import View, top_keys
from attncli.tinylm import model as trained


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
        # attn's float32 probabilities against torch's float32 model, per element (the row holds the top one)
        size = dict(depth=att.layers + 1, length=widest(att.config))
        f32_close([c["prob"] for c in step["candidates"]] + [step["prob"]], np.append(p[top], p[step["id"]]),
                  per_element=True, **size)
        assert step["token"] == words[step["id"]]
        allowed = sorted((i for i in range(len(words)) if words[i] not in ("<unk>", "</s>")), key=lambda i: (-p[i], i))
        if greedy:  # the most probable token the model may write (--ignore-eos: not </s>)
            assert step["id"] == allowed[0] and step["sample_prob"] is None
        else:  # drawn from p^(1/T) renormalised over the top 3 allowed, 0 elsewhere
            kept = allowed[:3]
            assert step["id"] in kept
            scaled = p[kept] ** (1 / 0.7)
            want = p[step["id"]] ** (1 / 0.7) / scaled.sum()
            # a softmax of the logits / 0.7 over the kept three: its logits' error, and their gap, / 0.7 (tests/_tolerance.py)
            gap = max(1.0, math.log(p[kept[0]] / p[step["id"]]) / 0.7)
            f32_close(step["sample_prob"], want, scale=2 * gap * want / 0.7, **size)


# --- step_view.py -----------------------------------------------------------------------------------


def test_a_views_label_names_its_layer_range_and_its_head_or_the_heads_mean():
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
    from attncli.generate.step_view import choose_view

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


def test_the_view_of_float32_weights_is_float64():
    """view_matrix is (T, T) float64 (its docstring): a head mean of float32 weights is taken in
    float64, against the mean written out over the heads converted one by one."""
    from attncli.generate.step_view import view_matrix

    rng = np.random.default_rng(6)
    weights = [rng.dirichlet(np.ones(7), size=(3, 7)).astype(np.float32) for _ in range(2)]  # 2 x (h=3, 7, 7)
    mean = view_matrix(weights, View(layer=1))
    assert mean.dtype == np.float64
    want = (weights[1][0].astype(np.float64) + weights[1][1].astype(np.float64) + weights[1][2].astype(np.float64)) / 3
    np.testing.assert_allclose(mean, want, rtol=1e-15, atol=0)
    head = view_matrix(weights, View(layer=0, head=2))
    assert head.dtype == np.float64 and np.array_equal(head, weights[0][2].astype(np.float64))
