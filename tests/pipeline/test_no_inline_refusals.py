"""Refusals that depend only on the request and what the loaded model can do go through the one
conflict table (its rows on the model, Can and Cannot: checked by TableRequest.check_model), not
``if not has(model, ...): raise BadInput(...)`` written inline in a compute. A model's missing
capability that a method needs is refused by attncli.model.interface.require (its one sentence)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "attncli"
WINGS = ("pipeline", "causal")  # the computes and the causal methods they call
# what a model fact is read as in a condition: has(model, ...), model.is_decoder, model.can, ...
MODEL_FACTS = {"has", "is_decoder", "can", "backend", "model_type"}
# file -> the function whose inline refusal is known and left, and why
LEFT = {
    "causal/circuit.py": ("edge_scores", "attn circuit on an encoder: reached only with an encoder's masked-language-"
                                         "model head and a [MASK] text, which the table's CLI test has no fixture for"),
}


def inline_refusals(path: Path) -> list[tuple[str, int]]:
    """(function, line) of each ``if <a model fact>: raise BadInput(...)`` in ``path``."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.If):
                continue
            read = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            read |= {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
            if not read & MODEL_FACTS:
                continue
            for stmt in node.body:
                exc = stmt.exc if isinstance(stmt, ast.Raise) else None
                if isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id == "BadInput":
                    found.append((func.name, node.lineno))
    return found


def test_no_compute_raises_a_refusal_on_the_model_inline():
    found = []
    for wing in WINGS:
        for path in sorted((PKG / wing).glob("*.py")):
            name = f"{wing}/{path.name}"
            found += [f"attncli/{name}:{line} ({func})" for func, line in inline_refusals(path)
                      if LEFT.get(name, ("",))[0] != func]
    assert not found, ("refusals on the model raised inline (make them rows of attncli.rules.option_conflicts on the model, "
                       "or interface.require for a method's capability): " + ", ".join(found))


def test_the_scan_sees_an_inline_refusal(tmp_path):
    """The scan itself: the form compute_view used to have is found."""
    sample = tmp_path / "sample.py"
    sample.write_text("def compute(request, model):\n"
                      "    if request.explain is not None and not has(model, 'explain'):\n"
                      "        raise BadInput('--explain I J needs attn's NumPy forward pass')\n".replace("attn's", "attn"),
                      encoding="utf-8")
    assert inline_refusals(sample) == [("compute", 2)]
