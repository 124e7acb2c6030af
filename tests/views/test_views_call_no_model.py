"""The views (and explore's app) draw what a result holds and never call a model (issue 48: the result
carries what the view needs). A model's facts (``model.name``, ``model.layers``) are attributes a view may read; a method of a
model, or of the pass reader that runs it (attncli.pipeline.reads.Reads), is a call into the pipeline's
floor, whatever it is named: the pipeline computes, hands the arrays down, and the view formats them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attncli

PKG = Path(attncli.__file__).parent
# the views, and explore's app, whose views are the pipeline's results (its causal views and QK split build
# the commands' requests and run the commands' computes)
DRAWING_WINGS = ("views", "explore")
RUNNERS = {"model", "reads"}  # a loaded model, or the reader of its traced pass


def _runner(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Name) and node.id in RUNNERS)
            or (isinstance(node, ast.Attribute) and node.attr in RUNNERS))


def model_calls(source: str) -> list[int]:
    """The lines calling a method of ``model`` / ``reads`` / ``x.model`` / ``x.reads``."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                   and isinstance(node.func, ast.Attribute) and _runner(node.func.value)})


@pytest.mark.parametrize("wing", DRAWING_WINGS)
def test_no_view_calls_a_model(wing):
    found = [f"{path.name}:{line}" for path in sorted((PKG / wing).rglob("*.py"))
             for line in model_calls(path.read_text(encoding="utf-8"))]
    assert found == [], "compute in attncli/pipeline/ and put the arrays in the result"


def test_the_reader_sees_a_call_and_not_a_fact():
    source = ("a = model.value_vectors(enc, 0)\nb = reads.scores(1)\nc = result.model.token_texts([1])\n"
              "d = self.reads.contributions('alti', [0])\ne = model.layers\nf = model_view(x)\n")
    assert model_calls(source) == [1, 2, 3, 4]
