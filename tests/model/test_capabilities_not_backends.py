"""What a model can do is asked of its capabilities (``has(model, "weights")``, model/interface.py), never
read off its backend's name: ``model.backend == "numpy"`` outside the backends themselves is a probe that
a new backend (or a family a backend learns) silently falls through (issue 48)."""

from __future__ import annotations

import ast
from pathlib import Path

import attncli

PKG = Path(attncli.__file__).parent
BACKEND_NAMES = {"numpy", "torch", "builtin"}  # a model's ``backend`` (model/interface.py's Model)
MAY_NAME_BACKENDS = ("hf/backends/",)  # where a backend is made, and says what it is


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for elt in node.elts for s in _strings(elt)}
    return set()


def _is_backend(node: ast.AST) -> bool:
    """``x.backend`` or ``getattr(x, "backend")``: what a model says it runs on."""
    if isinstance(node, ast.Attribute):
        return node.attr == "backend"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and _strings(node.args[1]) == {"backend"})


def backend_comparisons(source: str) -> list[int]:
    """The lines comparing something's ``.backend`` with a backend's name (==, !=, in, not in)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_backend(s) for s in sides) and any(_strings(s) & BACKEND_NAMES for s in sides):
                found.add(node.lineno)
    return sorted(found)


def test_no_module_reads_a_capability_off_a_backend_name():
    found = [f"{path.relative_to(PKG)}:{line}" for path in sorted(PKG.rglob("*.py"))
             if not str(path.relative_to(PKG)).startswith(MAY_NAME_BACKENDS)
             for line in backend_comparisons(path.read_text(encoding="utf-8"))]
    assert found == [], "ask has(model, CAPABILITY) (attncli.model.interface) instead of the backend's name"


def test_the_reader_sees_each_form():
    source = ('a = model.backend == "numpy"\nb = "torch" != self.model.backend\nc = m.backend in ("builtin", "x")\n'
              'd = getattr(m, "backend") == "numpy"\ne = request.backend == "auto"\nf = backend == "torch"\n')
    assert backend_comparisons(source) == [1, 2, 3, 4]  # "auto" is an option's value, a bare name an option's
