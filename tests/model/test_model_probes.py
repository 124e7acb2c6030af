"""No module outside the model wings (attncli/hf, attncli/tinylm, attncli/model) asks a model what
it can do by ``hasattr``/``getattr`` or reaches a private name of it: what a model can do is its
``can`` (attncli.model.interface), and the one refusal comes from ``require``/``refusal``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "attncli"
MODEL_WINGS = ("hf", "tinylm", "model")

# path -> why a probe there is not a capability question
EXCEPTIONS = {
    # explore's key handlers ask whether the result holds a model at all (word vectors hold none)
    "vectors/train.py": "its model is gensim's Word2Vec being trained, not a model attn runs",
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_model(node: ast.AST) -> bool:
    name = _name(node)
    return name == "model" or name.endswith("_model")


def probes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each probe of a model in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr")
                and node.args and _is_model(node.args[0])):
            found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, ...)"))
        elif (isinstance(node, ast.Attribute) and _is_model(node.value) and node.attr.startswith("_")
              and not node.attr.startswith("__")):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_probe_finder_finds_probes():
    """The finder itself: each kind of probe is found, a plain use of the interface is not."""
    code = ("hasattr(model, 'x')\ngetattr(self.model, 'y', None)\nmodel._tokenize([])\n"
            "has(model, 'dla')\nmodel.pieces('a')\ngetattr(state, 'model', None)\n")
    assert [line for line, _ in probes(ast.parse(code))] == [1, 2, 3]


def test_no_module_outside_the_model_wings_probes_a_model():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.split("/")[0] in MODEL_WINGS or rel in EXCEPTIONS:
            continue
        bad += [f"attncli/{rel}:{line}: {what}" for line, what in probes(ast.parse(path.read_text()))]
    assert bad == [], "ask the model interface instead (attncli.model: has, require, the public methods):\n" + "\n".join(bad)


def test_each_exception_still_probes():
    """An exception listed for a file that no longer probes a model is stale: drop it."""
    for rel in EXCEPTIONS:
        assert probes(ast.parse((PACKAGE / rel).read_text())), rel
