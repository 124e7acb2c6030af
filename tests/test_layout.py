"""The layout stays true (issue 10): one wing per concept, imports running one way.

cli -> lm -> attention / lookup -> vectors -> the top-level helpers. A wing may import its own
modules and those of wings below it, never above or beside; the core wings never import typer,
rich or textual. Read from the source (ast), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import attncli

PKG = Path(attncli.__file__).parent
TOP = {"errors", "paths", "textio", "messages", "lazy", "fileio", "export_target", "faultpoints", "option_conflicts",
       "__init__", "__main__"}
# each wing with the wings it may import (besides itself and the top-level helpers)
ALLOWED = {
    "vectors": set(),
    "attention": {"vectors"},
    "lookup": {"vectors", "transformer"},
    "lm": {"attention", "vectors"},
    "generate": {"lm", "attention", "vectors", "transformer"},
    "views": {"attention", "lookup"},  # rich drawing shared by cli and explore
    "pipeline": {"views", "attention", "transformer", "causal", "lm", "vectors"},  # one request, one compute (pretrained views)
    "explore": {"pipeline", "views", "lm", "attention", "lookup", "vectors", "transformer", "causal"},  # the Textual app (attn explore)
    "cli": {"pipeline", "explore", "views", "lm", "attention", "lookup", "vectors", "transformer", "generate", "stats",
            "causal"},
    "transformer": set(),
    "stats": {"attention", "transformer"},  # head statistics over a corpus (attn stats)
    "causal": {"transformer"},  # ablation, patching, direct logit attribution on the traced pass (attn ablate/patch/dla)
}
DRAWING = ("typer", "rich", "textual", "click")
DRAWS = {"cli": DRAWING, "views": ("rich",), "explore": ("rich", "textual", "textual_serve")}  # who may import what


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        found.append((".".join(rel.with_suffix("").parts), path))
    return found


def imported_names(source: str, package: str) -> list[str]:
    """Every module a source imports, relative imports resolved against ``package``."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            names.append(mod)
            if mod == "attncli" or (mod.startswith("attncli.") and mod.count(".") == 1):
                names += [f"{mod}.{alias.name}" for alias in node.names]  # from attncli.lm import heads
    return names


def wing_of(module: str) -> str | None:
    """'attncli.lm.model' -> 'lm'; a top-level helper or another package -> None."""
    parts = module.split(".")
    if parts[0] != "attncli" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in ALLOWED else None


def violations(name: str, source: str) -> list[str]:
    """What module ``name`` (e.g. 'lm.model') imports against the one-way rule."""
    own = name.split(".")[0] if name.split(".")[0] in ALLOWED else None
    if name == "__main__":  # `python -m attncli` is the command line's entry point
        own = "cli"
    package = "attncli" + ("." + name.rsplit(".", 1)[0] if "." in name else "")
    found = []
    for imported in imported_names(source, package):
        target = wing_of(imported)
        if own is None and target is not None:
            found.append(f"{name} (top level) imports {imported}")
        elif own is not None and target not in (None, own) and target not in ALLOWED[own]:
            found.append(f"{name} ({own}) imports {imported} ({target})")
        top = imported.split(".")[0]
        if (top in DRAWING or top == "textual_serve") and top not in DRAWS.get(own, ()):
            found.append(f"{name}: a core module imports {imported}; only the cli, views and explore draw")
    return found


def test_every_module_lives_in_a_wing_or_is_a_top_level_helper():
    for name, path in modules():
        parts = name.split(".")
        assert parts[0] in ALLOWED or (len(parts) == 1 and parts[0] in TOP), (
            f"attncli/{path.relative_to(PKG)} is neither in a wing ({', '.join(ALLOWED)}) nor a top-level helper")


@pytest.mark.parametrize("name,path", modules(), ids=[n for n, _ in modules()])
def test_imports_run_one_way(name, path):
    assert violations(name, path.read_text()) == [], "imports run cli -> lm -> attention / lookup -> vectors"


def test_the_rule_catches_upward_sideways_and_drawing_imports():
    source = ("import numpy\n"
              "def f():\n"
              "    from attncli.cli.app import warn\n"
              "    from ..lookup import keyindex\n"
              "    from attncli import errors\n"
              "    import rich.table\n")
    found = violations("attention.thing", source)
    assert len(found) >= 3, found
    assert any("attncli.cli.app" in f for f in found)
    assert any("attncli.lookup" in f for f in found)
    assert any("rich.table" in f for f in found)
    assert violations("cli.thing", source) == []
    assert violations("textio", "from attncli.vectors import store\n") != []


def test_core_wings_import_without_typer_or_rich():
    code = ("import sys\n"
            "import attncli.vectors.model, attncli.lookup.dictionary, attncli.attention.matrix, "
            "attncli.attention.example, attncli.attention.explain, attncli.lm.model, attncli.lm.heads\n"
            "print(sorted(m for m in ('typer', 'rich', 'click', 'textual') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("wing", sorted(set(ALLOWED) - {"cli"}))
def test_every_exported_name_resolves(wing):
    package = importlib.import_module(f"attncli.{wing}")
    assert package.__all__, f"attncli.{wing} exports nothing"
    for name in package.__all__:
        assert getattr(package, name) is not None


@pytest.mark.parametrize("wing", sorted(set(ALLOWED) - {"cli"}))
def test_wing_docstring_examples_run(wing):
    package = importlib.import_module(f"attncli.{wing}")
    result = doctest.testmod(package, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_docs_api_examples_run():
    """Every ``>>>`` example in docs/api.md runs and prints what the page shows."""
    text = (PKG.parent / "docs" / "api.md").read_text()
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "docs/api.md", "docs/api.md", 0)
    assert len(test.examples) >= 8
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0, "docs/api.md examples failed (run pytest -s to see them)"


def test_contributing_s_layout_names_every_wing_and_helper():
    """CONTRIBUTING.md's Layout block lists every wing and every top-level helper this test knows,
    so a new wing cannot arrive undocumented."""
    text = (PKG.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    listed = {line.split()[0].rstrip("/") for line in block.splitlines()[1:] if line.startswith("  ") and line[2] != " "}
    assert set(ALLOWED) <= listed, set(ALLOWED) - listed
    helpers = TOP - {"__init__", "__main__"}
    assert all(f"{name}.py" in block for name in helpers), [n for n in helpers if f"{n}.py" not in block]
