"""attncli.rules.option_conflicts.TableRequest: the one base of every command's request that the table of
option conflicts checks. Each request refuses with its own path's rows (what ``check`` raises is
what ``refusal`` says, word for word), lets through what goes together, and says its positionals."""

from __future__ import annotations

import doctest

import pytest

from attncli.rules import option_conflicts as oc
from attncli.causal.causal_request import AblateRequest, DlaRequest, PatchRequest
from attncli.causal.gradient_request import AttributeRequest, CircuitRequest
from attncli.errors import BadInput
from attncli.pipeline.compare_compute import CompareRequest
from attncli.pipeline.heads_compute import HeadsRequest
from attncli.pipeline.lens_compute import LensRequest
from attncli.pipeline.qk_compute import QKRequest

CLEAN, CORRUPT = "the cat sat", "the dog sat"
# (a request one row of its own path refuses, that row's message, the same request with the options
# that go together, its positionals)
CASES = [
    (AblateRequest(CLEAN, transformer="m", reference="refs.txt"),
     "--reference is the texts of --mode mean: add --mode mean, or drop --reference",
     AblateRequest(CLEAN, transformer="m", reference="refs.txt", mode="mean"), [CLEAN]),
    (PatchRequest(CLEAN, corrupt=CORRUPT, site="key"), "--site 'key': choose one of resid, attn, mlp, head",
     PatchRequest(CLEAN, corrupt=CORRUPT, site="head"), [CLEAN, CORRUPT]),
    (DlaRequest(CLEAN, device="cpu"),
     "--device places a --transformer model: without one, attn's built-in LM runs on its own pass",
     DlaRequest(CLEAN, transformer="m", device="cpu"), [CLEAN]),
    (AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="m", site="embed"),
     "--site 'embed': choose one of resid, attn, mlp, head, key, query",
     AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="m", site="key"), [CLEAN, CORRUPT]),
    (CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", steps=0), "--steps 0: give 1 (EAP) to 256 points on the path",
     CircuitRequest(CLEAN, corrupt=CORRUPT, transformer="m", steps=4), [CLEAN, CORRUPT]),
    (QKRequest(CLEAN), "give the model with --transformer NAME (a hub id or a directory)",
     QKRequest(CLEAN, transformer="m"), [CLEAN]),
    (LensRequest(CLEAN, transformer="m", model="brown"),
     "--model names a word-vector model with a built-in LM; --transformer a pretrained one: give one of them",
     LensRequest(CLEAN, transformer="m"), [CLEAN]),
    (CompareRequest(CLEAN, transformer="m"), "nothing to compare: give a second text, or a second model with --transformer-b",
     CompareRequest(CLEAN, CORRUPT, transformer="m"), [CLEAN]),
    (HeadsRequest(transformer="m", model="brown"),
     "--model names attn's own LM; with --transformer the pretrained model is scored: drop one",
     HeadsRequest(transformer="m"), []),
]


@pytest.mark.parametrize("refused, message, fine, positionals", CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_a_request_refuses_with_its_own_paths_rows(refused, message, fine, positionals):
    assert isinstance(refused, oc.TableRequest) and refused.table_path in oc.PATHS
    assert refused.refusal() == message
    with pytest.raises(BadInput) as caught:
        refused.check()
    assert str(caught.value) == message
    assert fine.refusal() is None
    assert refused.positionals() == positionals


def test_the_fields_are_the_options_by_name_and_a_class_variable_is_none():
    request = AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="m", verify=3)
    options = request._fields()
    assert options["verify"] == 3 and options["corrupt"] == CORRUPT and options["site"] == "resid"
    assert not {"table_path", "POSITIONALS", "OWN", "command"} & set(options)


def test_the_docstring_example_runs():
    tests = doctest.DocTestFinder().find(oc.TableRequest, "TableRequest", globs=vars(oc).copy())
    runner = doctest.DocTestRunner()
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=0, attempted=4)
