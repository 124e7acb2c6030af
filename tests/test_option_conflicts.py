"""The one table of option conflicts (attncli.rules.option_conflicts): every row refuses through the
command line with exit 2 and its message, the docs' table is the table, and attn explore greys
the keys that would make a refused state and says the row's reason."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.rules import option_conflicts as oc
from attncli.cli.main import app as cli
from attncli.errors import BadInput
from attncli.explore.disabled_keys import key_refusal
from attncli.explore.state import ExploreState

SENTENCE = "time flies like an arrow"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "pretrained.md"

# a value of each option that turns it on (the first that does, for a row's example)
SAMPLES = {"pair": "fruit flies", "steps": 4, "filter": "a-b",
           "filter_specials": "bertviz", "words": True, "hide_special": True, "rollout": True, "backend": "numpy",
           "truncate": True, "model_view": True, "layers": "0-1", "allow_missing_weights": True, "flow": True,
           "device": "cpu", "dtype": "float32", "target": "le chat", "stack": "decoder", "layer": 0, "head": 0,
           "explain": (0, 1), "show": "scores", "proj": "random", "variant": "dot", "positions": "none", "d_k": 4,
           "context": "a b", "causal": True, "window": 2, "pad_to": 8, "seed": 1, "heads": 2, "max_relative": 3,
           "model": "m", "top_k": 3, "pool": "sentence", "device_map": "auto",
           "max_memory": "cpu=1GB", "rows": "last:2", "transformer": "no-such-model", "transformer_b": "other-model",
           "variant_b": "dot", "causal_b": True, "align": "position",
           "exclude_first": True, "reference": "refs.txt", "explore": True, "json_out": True,
           "pairs": "pairs.jsonl", "target_id": 3, "contrast": "dog", "contrast_id": 4, "position": 1, "verify_cells": 2,
           "out": "run", "ray": "127.0.0.1:6379", "weights": True, "random": 8, "role": "induction", "threshold": 0.1,
           "file": "sentences.txt", "sentences": 5}
CHOICES = {"proj": ("identity", "random", "trained"), "show": ("weights", "scores", "norms", "output"),
           "stack": oc.STACKS, "backend": oc.BACKENDS, "filter_specials": ("none", "bertviz"), "align": oc.ALIGNS,
           "variant": ("scaled", "dot"),
           "mode": (*oc.ABLATE_MODES, "half"), "site": (*oc.PATCH_SITES, "embed"), "precision": (*oc.PRECISIONS, "float16"),
           "workers": (1, 2), "shard_pairs": (64, 2)}
OUTSIDE = {"steps": 0, "faithfulness": 1.5}  # a number outside each range of the gradient tests


def example(row: oc.Row, path: str) -> dict:
    """Options that make ``row`` the first refusal: each condition met, and what an earlier row
    would refuse first given (a --pair for a --filter block, a --target for a decoder stack)."""
    options = {}
    for c in row.when:
        if isinstance(c, oc.Not):
            options[c.name] = next((v for v in CHOICES[c.name] if v not in c.values), "bogus")
        elif isinstance(c, oc.Is):
            if c.values[0] is not None:
                options[c.name] = c.values[0]
        elif isinstance(c, oc.Below):
            options[c.name] = -1
        elif isinstance(c, oc.Outside):
            options[c.name] = OUTSIDE[c.name]
        elif isinstance(c, oc.Blank):
            options[c.name] = " "
        elif not isinstance(c, oc.Off):
            options[c.name] = SAMPLES[c.name]
    named = {c.name for c in row.when}
    if options.get("filter") and "pair" not in named and path != "vectors":  # (a --filter alone: the word vectors refuse it)
        options["pair"] = SAMPLES["pair"]
    if path == "seq2seq" and "target" not in named and (options.get("stack") in ("decoder", "cross")
                                                         or "stack" not in options):  # the command's way in
        options["target"] = SAMPLES["target"]
    if path in ("causal", "gradients", "stats") and "transformer" not in named:  # their commands' way in (never loaded:
        options["transformer"] = "no-such-model"                    # the row refuses first)
    return options


def args_of(options: dict) -> list[str]:
    args = []
    for name, value in options.items():
        if value is True:
            args.append(oc.flag(name))
        elif isinstance(value, tuple):
            args += [oc.flag(name), *map(str, value)]
        else:
            args += [oc.flag(name), str(value)]
    return args


def causal_command(row: oc.Row, options: dict) -> tuple[list[str], dict]:
    """attn patch for its own rows (--site, the corrupted text), attn ablate for the rest; the texts
    are arguments."""
    options = dict(options)
    texts = [options.pop("text", SENTENCE)]
    if {"site", "corrupt"} & set(options):
        return ["patch", *texts, options.pop("corrupt", SENTENCE)], options
    return ["ablate", *texts], options


def gradient_command(row: oc.Row, options: dict) -> tuple[list[str], dict]:
    """attn circuit for its own rows (--steps, --faithfulness), attn attribute for the rest; both
    texts are arguments."""
    options = dict(options)
    texts = [options.pop("text", SENTENCE), options.pop("corrupt", SENTENCE)]
    return ["circuit" if {"steps", "faithfulness"} & set(options) else "attribute", *texts], options


def pairs_command(row: oc.Row, options: dict) -> tuple[list[str], dict]:
    """attn attribute for --verify (its option), attn ablate for the rest; the text only without --pairs."""
    options = dict(options)
    command = "attribute" if "verify_cells" in options else "ablate"
    texts = [] if "pairs" in options else [SENTENCE] * (2 if command == "attribute" else 1)
    return [command, *texts], options


COMMANDS = {"causal": causal_command, "gradients": gradient_command, "pairs": pairs_command,
            "qk": lambda row, options: (["qk", SENTENCE], options),
            "stats": lambda row, options: (["stats", "no-such-corpus.txt"], options),
            "merge": lambda row, options: (["stats", "merge", "no-such-folder"], options)}


def typed(row: oc.Row) -> set[str]:
    return {c.name for c in row.when if isinstance(c, oc.Given)}


CASES = [pytest.param(row, path, id=f"{n}-{path}") for n, row in enumerate(oc.ROWS) for path in row.paths]


@pytest.mark.parametrize("row, path", CASES)
def test_every_row_refuses_through_the_command_line_with_exit_2_and_its_message(row, path):
    options = example(row, path)
    table_options = options
    message = row.text(table_options)
    # the example is refused by this row, first
    assert oc.refusal(table_options, path, given=typed(row)) == message
    with pytest.raises(BadInput, match="^" + re.escape(message) + "$"):
        oc.validate(table_options, path, given=typed(row))
    if "bogus" in options.values():  # a choice outside attn's: Typer's own enum refuses it first
        return
    if path in COMMANDS:  # the causal tests and attn stats: their own commands
        command, options = COMMANDS[path](row, options)
    else:
        command = {"vectors": ["matrix", SENTENCE], "transformer": ["matrix", SENTENCE, "--transformer", "no-such-model"],
                   "seq2seq": ["matrix", SENTENCE, "--transformer", "no-such-model"],
                   "explore": ["explore", SENTENCE, "--transformer", "no-such-model"], "compare": ["compare", SENTENCE],
                   "heads": ["heads"], "lens": ["lens", SENTENCE]}[path]
    if path == "explore" and not all(importlib.util.find_spec(m) for m in ("textual", "safetensors", "tokenizers")):
        pytest.skip("attn explore --transformer needs the explore and pretrained extras")
    result = CliRunner().invoke(cli, [*command, *args_of(options)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert " ".join(result.stderr.split()) == "error: " + " ".join(message.split())


def test_the_word_vector_rows_hold_for_attn_explore_too():
    """attn explore without --transformer refuses what attn matrix does (its own options)."""
    for args, message in ((["--rollout"], "--rollout needs --transformer NAME_OR_PATH (a pretrained model)"),
                          (["--layer", "1"], "--layer needs --proj trained (it picks a learned layer or head)"),
                          (["--show", "norms"], "--show norms needs --transformer NAME_OR_PATH (the value vectors of "
                                                "a pretrained model)")):
        if importlib.util.find_spec("textual") is None:
            pytest.skip("attn explore needs the explore extra")
        result = CliRunner().invoke(cli, ["explore", SENTENCE, *args])
        assert result.exit_code == 2 and " ".join(result.stderr.split()) == f"error: {message}"


def test_options_that_go_together_pass():
    oc.validate({"rollout": True, "layer": 1, "words": True, "show": "weights", "backend": "auto"}, "transformer")
    oc.validate({"model_view": True, "layers": "0-1", "hide_special": True}, "transformer", "explore")
    oc.validate({"stack": "cross", "target": "le chat", "show": "weights"}, "seq2seq")
    oc.validate({"layer": 0, "proj": "trained", "show": "output"}, "vectors")
    assert oc.refusal({"head": 0, "rollout": True}, "vectors") is None  # a path picks its rows


def test_the_messages_a_user_sees_stay_word_for_word():
    """Pinned here, apart from the table: a reworded row fails this (and the docs' table)."""
    pinned = {
        ("transformer", "rollout", "head"): "--rollout uses every head (the mean of each layer's heads): drop --head",
        ("transformer", "flow", "words"): "--flow is one matrix through every head of layers 0..--layer: drop --words",
        ("seq2seq", "stack", "pair"): "--pair is a second source sentence: use it with --stack encoder",
    }
    options = {"rollout": True, "head": 0, "flow": True, "words": True, "stack": "decoder", "pair": "x", "target": "y"}
    for (path, a, b), message in pinned.items():
        assert oc.refusal({a: options[a], b: options[b], "target": "y"}, path) == message
    assert oc.refusal({"show": "norms", "hide_special": True}, "explore") == (
        "--show norms draws one layer's heads token by token: drop --hide-special (it renormalises rows of weights)")
    assert oc.refusal({}, "transformer", given={"seed"}) == "--seed does not apply with --transformer: nothing is random"
    assert oc.refusal({"backend": "jax"}, "transformer") == "--backend 'jax': expected auto, numpy or torch"


def test_the_docs_table_is_the_table():
    """docs/pretrained.md holds the table made from ROWS (regenerate: python -m attncli.rules.option_conflicts --write)."""
    text = DOCS.read_text(encoding="utf-8")
    assert oc.docs_block() in text, "docs/pretrained.md's table is stale: run python -m attncli.rules.option_conflicts --write"
    assert oc.rewrite(text) == text
    assert oc.markdown().count("\n") == len(oc.ROWS) + 2  # one line per row, under the header


def test_markdown_prints_the_table(capsys):
    assert oc.main(["--markdown"]) == 0
    assert capsys.readouterr().out == oc.markdown()
    assert oc.main(["--bogus"]) == 2


# ---------------------------------------------------------------- attn explore's keys


def state(**kw) -> ExploreState:
    return ExploreState(SENTENCE, transformer="m", **kw)


@pytest.mark.parametrize("kw, action, params, reason", [
    ({"head": 1}, "flag", ("rollout",), "--rollout uses every head (the mean of each layer's heads): drop --head"),
    ({"rollout": True}, "head", (1,), "--rollout uses every head (the mean of each layer's heads): drop --head"),
    ({"flow": True}, "flag", ("words",), "--flow is one matrix through every head of layers 0..--layer: drop --words"),
    ({"flow": True}, "flag", ("norms",), "--flow is one matrix through every head of layers 0..--layer: drop --show"),
    ({"words": True}, "flag", ("norms",), "--show norms draws one layer's heads token by token: drop --words "
                                          "(word rows sum and average weights)"),
    ({"rollout": True}, "model_view", (), oc.NOT_WITH_MODEL_VIEW),
    ({}, "filter", (1,), oc.FILTER_NEEDS_PAIR),
])
def test_a_key_that_makes_a_refused_state_is_disabled_with_the_rows_reason(kw, action, params, reason):
    assert key_refusal(state(**kw), action, params, heads=2, layers=2) == reason
    assert key_refusal(state(), action, params, heads=2, layers=2) is None or action == "filter"
    assert key_refusal(state(**kw, pair="x"), "filter", (1,), heads=2, layers=2) is None


def test_keys_stay_on_in_the_word_vector_view_and_when_the_state_is_refused_already():
    assert key_refusal(ExploreState(SENTENCE, head=1), "flag", ("rollout",), heads=2, layers=2) is None
    assert key_refusal(state(head=1, rollout=True), "flag", ("words",), heads=2, layers=2) is None
    assert key_refusal(state(head=1), "head", (1,), heads=2, layers=2, in_model_view=True) is None


def test_the_app_greys_the_key_and_says_why(tiny_bert_dir):
    needed("textual")
    needed("safetensors")
    from test_explore import drive, press

    async def script(app, pilot):
        assert app.check_action("flag", ("rollout",)) is None and app.check_action("flag", ("words",)) is True
        shown = {b.binding.action: b.enabled for b in app.screen.active_bindings.values()}
        assert shown["flag('rollout')"] is False and shown["flag('words')"] is True
        await press(app, pilot, "r")
        assert app.message == "--rollout uses every head (the mean of each layer's heads): drop --head"
        assert not app.state.rollout and app.state.head == 1
        await press(app, pilot, "left_curly_bracket", "left_curly_bracket")  # head 1 -> 0 -> all
        assert app.state.head is None and app.check_action("flag", ("rollout",)) is True
        await press(app, pilot, "r")
        assert app.state.rollout and app.check_action("head", (1,)) is None

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), head=1), size=(160, 50))
