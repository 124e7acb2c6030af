"""attn attribute and attn circuit as requests (attncli.causal.gradient_request): the refusals that need
no model come from the one table's "gradients" rows, the same from Python and from the command line
(exit 2, one line, before any model loads), and the table's choices are the core's."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from attncli.rules import option_conflicts as oc
from attncli.causal.gradient_request import AttributeRequest, CircuitRequest
from attncli.cli.main import app
from attncli.errors import BadInput

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the mat"
BAD = [  # (command line after the two texts, the request, the message)
    (["attribute", "--site", "value"], AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="m", site="value"),
     "--site 'value': choose one of resid, attn, mlp, head, key, query"),
    (["circuit", "--steps", "0"], CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", steps=0),
     "--steps 0: give 1 (EAP) to 256 points on the path"),
    (["circuit", "--steps", "257"], CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", steps=257),
     "--steps 257: give 1 (EAP) to 256 points on the path"),
    (["circuit", "--faithfulness", "0"], CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", faithfulness=0.0),
     "--faithfulness 0.0: a fraction above 0 and at most 1"),
    (["circuit", "--faithfulness", "1.01"], CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", faithfulness=1.01),
     "--faithfulness 1.01: a fraction above 0 and at most 1"),
    (["circuit", "--faithfulness", "nan"], CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m",
                                                          faithfulness=float("nan")),
     "--faithfulness nan: a fraction above 0 and at most 1"),
]


def said(r) -> str:
    """stderr as one line (the console wraps at its width)."""
    return " ".join(r.stderr.split())


@pytest.mark.parametrize("args, request_, message", BAD)
def test_a_bad_option_is_refused_by_the_request_and_by_the_command_line(args, request_, message):
    assert request_.refusal() == message
    with pytest.raises(BadInput, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        request_.check()
    command, *options = args
    r = CliRunner().invoke(app, [command, CLEAN, CORRUPT, "--transformer", "no-such-model", *options],
                           env={"COLUMNS": "300"})
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert said(r) == "error: " + message  # one line, before the (missing) model is looked for


@pytest.mark.parametrize("command", ["attribute", "circuit"])
def test_an_empty_corrupted_text_or_no_model_is_refused_first(command):
    r = CliRunner().invoke(app, [command, CLEAN, " ", "--transformer", "no-such-model"])
    assert r.exit_code == 2
    assert said(r) == "error: the corrupted text is empty: give a text of as many tokens as the clean one"
    r = CliRunner().invoke(app, [command, CLEAN, CORRUPT])
    assert r.exit_code == 2
    models = {"attribute": ", or BERT, RoBERTa, DistilBERT or MPNet with its masked-language-model head",
              "circuit": ""}[command]  # attn circuit's message names what it takes, not attribute
    assert said(r) == f"error: give the model with --transformer NAME (a hub id or a directory: GPT-2 or the Llama family{models})"
    assert "attribute" not in said(r)


@pytest.mark.parametrize("command", ["attribute", "circuit", "patch"])
def test_one_text_without_the_corrupted_one_says_the_second_text_is_missing(command):
    r = CliRunner().invoke(app, [command, CLEAN, "--transformer", "m", "--target", "x"])
    assert r.exit_code == 2
    assert said(r) == ("error: the second text, the corrupted one, is missing: give the clean text and then the "
                       "corrupted text (as many tokens), or --pairs FILE")
    r = CliRunner().invoke(app, [command, "--transformer", "m"])
    assert r.exit_code == 2 and "give the text(s) to read, or --pairs FILE" in said(r)


def test_good_requests_pass_and_say_their_command_line():
    for site in oc.ATTRIBUTE_SITES:
        AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="m", site=site).check()
    CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", steps=256, faithfulness=1.0).check()
    req = AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="m", target_id=3, site="key", verify=2)
    assert req.positionals() == [CLEAN, CORRUPT]
    assert [o for o in req.options() if o[1] not in (None, False)] == [
        ("--transformer", "m"), ("--target-id", 3), ("--site", "key"), ("--verify", 2)]
    with pytest.raises(Exception):  # frozen: a request is a value
        req.site = "resid"


def test_the_tables_choices_are_the_cores():
    from attncli.causal import attribution, circuit

    assert oc.ATTRIBUTE_SITES == attribution.SITES and oc.MAX_STEPS == circuit.MAX_STEPS
