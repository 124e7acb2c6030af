"""The layout stays true (issue 10): one wing per concept, imports running one way.

cli -> lm -> attention / lookup -> vectors -> the helpers (io < rules < env) -> errors, lazy, numeric. A wing may import its own
modules and those of wings below it, never above or beside; the core wings never import typer,
rich or textual. Read from the source (ast), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
import doctest
import functools
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attncli

PKG = Path(attncli.__file__).parent
TOP = {"errors", "lazy", "numeric", "__init__", "__main__"}  # the floor every wing and helper stands on
# the helper packages below every wing (any wing may import them; they import no wing), each with the
# helper packages it may import besides itself and TOP: io < rules < env
HELPER_FLOORS = {
    "io": set(),  # what attn reads and writes: fileio, textio, messages, export_target, faultpoints
    "rules": {"io"},  # what a user may ask: option_conflicts + option_conditions, limits
    "env": {"io", "rules"},  # where attn runs: paths, runtime, extras
}
MAX_TOP_MODULES = 8  # issue 48: 16 modules sat at attncli/ top; a new helper goes in the package of its concern
# each wing with the wings it may import (besides itself and the top-level helpers)
ALLOWED = {
    "vectors": set(),
    "model": set(),  # the model interface and the traced pass's contract: below every wing that runs a model
    "attention": {"vectors"},
    "lookup": {"model", "vectors", "hf"},
    "tinylm": {"model", "attention", "vectors"},
    "generate": {"model", "tinylm", "attention", "vectors", "hf"},
    "views": {"attention", "lookup"},  # rich drawing shared by cli and explore
    "pipeline": {"model", "views", "attention", "hf", "causal", "tinylm", "vectors", "generate", "stats"},  # one request, one compute per command
    "explore": {"model", "pipeline", "views", "tinylm", "attention", "lookup", "vectors", "hf", "causal"},  # the Textual app (attn explore)
    "cli": {"model", "pipeline", "explore", "views", "tinylm", "attention", "lookup", "vectors", "hf", "generate", "stats",
            "causal"},
    "hf": {"model"},
    "stats": {"model", "attention", "hf"},  # head statistics over a corpus (attn stats)
    "causal": {"model", "hf"},  # ablation, patching, direct logit attribution on the traced pass (attn ablate/patch/dla)
}
# the hf modules causal/ may import (the rest it reaches through the model interface: trace, tape, ...), with why
CAUSAL_FROM_HF = {"attncli.hf.methods.edges": "attn circuit's graph of a decoder's components and its edge-patched pass, "
                                      "run on two of the model's tapes",
                  "attncli.hf.kernels.blas": "the thread policy (one BLAS thread for a sentence's small products)"}
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
                names += [f"{mod}.{alias.name}" for alias in node.names]  # from attncli.tinylm import heads
    return names


def wing_of(module: str) -> str | None:
    """'attncli.tinylm.model' -> 'lm'; a top-level helper or another package -> None."""
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


def test_causal_reaches_a_model_through_its_interface():
    """The causal tests run any model through attncli.model's interface (its trace and its tape,
    Model.tape); the only hf module they import is the edge graph CAUSAL_FROM_HF names."""
    reached = {b for a, b, _, _ in attn_edges() if a.startswith("attncli.causal.") and b.startswith("attncli.hf")}
    assert reached <= set(CAUSAL_FROM_HF), sorted(reached - set(CAUSAL_FROM_HF))


def test_every_module_lives_in_a_wing_or_is_a_top_level_helper():
    for name, path in modules():
        parts = name.split(".")
        assert parts[0] in ALLOWED or (len(parts) == 1 and parts[0] in TOP) or (
            len(parts) == 2 and parts[0] in HELPER_FLOORS), (
            f"attncli/{path.relative_to(PKG)} is neither in a wing ({', '.join(ALLOWED)}) nor a helper "
            f"({', '.join(HELPER_FLOORS)}, or one of TOP)")


def test_few_modules_sit_at_the_top():
    """A newcomer maps attncli/ at a glance: a few modules at the top (TOP), the helpers in packages by
    concern (HELPER_FLOORS); every package is a helper or a wing."""
    top = {p.stem for p in PKG.glob("*.py")}
    assert top == TOP and len(top) <= MAX_TOP_MODULES, sorted(top ^ TOP)
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED) | set(HELPER_FLOORS), sorted(packages ^ (set(ALLOWED) | set(HELPER_FLOORS)))


def helper_of(module: str) -> str | None:
    """'attncli.io.fileio' (or attncli.io) -> 'io'; 'attncli.errors' -> 'top'; a wing's module -> None."""
    parts = module.split(".")
    if len(parts) == 2 and parts[1] in TOP:
        return "top"
    return parts[1] if len(parts) >= 2 and parts[1] in HELPER_FLOORS else None


def helper_violations(edges) -> list[str]:
    """The imports among the helpers against HELPER_FLOORS (TOP, the floor, imports no helper package)."""
    found = []
    for a, b, line, _ in edges:
        pa, pb = helper_of(a), helper_of(b)
        if pa and pb not in (None, "top", pa) and pb not in HELPER_FLOORS.get(pa, ()):
            found.append(f"{a}:{line} ({pa}) imports {b} ({pb})")
    return found


def test_helper_packages_import_one_way():
    assert helper_violations(attn_edges()) == [], "the helper packages import " + " < ".join(HELPER_FLOORS)


def test_the_helper_rule_catches_an_upward_import():
    edges = [("attncli.io.fileio", "attncli.rules.limits", 3, True), ("attncli.rules.limits", "attncli.io.fileio", 4, False),
             ("attncli.env.runtime", "attncli.rules.limits", 5, False), ("attncli.io.textio", "attncli.env", 6, False),
             ("attncli.errors", "attncli.io.textio", 7, False), ("attncli.io.textio", "attncli.errors", 8, False)]
    assert [f.split(":")[0] for f in helper_violations(edges)] == ["attncli.io.fileio", "attncli.io.textio",
                                                                   "attncli.errors"]


@pytest.mark.parametrize("name,path", modules(), ids=[n for n, _ in modules()])
def test_imports_run_one_way(name, path):
    assert violations(name, path.read_text()) == [], "imports run cli -> lm -> attention / lookup -> vectors"


def test_the_rule_catches_upward_sideways_and_drawing_imports():
    source = ("import numpy\n"
              "def f():\n"
              "    from attncli.cli.common import warn\n"
              "    from ..lookup import keyindex\n"
              "    from attncli import errors\n"
              "    import rich.table\n")
    found = violations("attention.thing", source)
    assert len(found) >= 3, found
    assert any("attncli.cli.common" in f for f in found)
    assert any("attncli.lookup" in f for f in found)
    assert any("rich.table" in f for f in found)
    assert violations("cli.thing", source) == []
    assert violations("io.textio", "from attncli.vectors import store\n") != []


def test_core_wings_import_without_typer_or_rich():
    code = ("import sys\n"
            "import attncli.vectors.model, attncli.lookup.dictionary, attncli.attention.matrix, "
            "attncli.attention.example, attncli.attention.explain, attncli.tinylm.model, attncli.tinylm.heads\n"
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
    assert set(HELPER_FLOORS) <= listed, set(HELPER_FLOORS) - listed
    helpers = TOP - {"__init__", "__main__"}
    assert all(f"{name}.py" in block for name in helpers), [n for n in helpers if f"{n}.py" not in block]
    held = {p.stem for h in HELPER_FLOORS for p in (PKG / h).glob("*.py")} - {"__init__"}
    assert all(re.search(rf"\b{n}\b", block) for n in held), [n for n in held if not re.search(rf"\b{n}\b", block)]


def test_the_tests_mirror_the_package():
    """A module's tests are in the folder of its wing (tests/hf/, tests/attention/, ...), behaviour
    across wings in tests/end_to_end/, every command on the real models in tests/real/, the top-level
    helpers' and the whole tree's in tests/ itself (CONTRIBUTING.md); no __init__.py, so every test file's basename is unique (pytest imports
    them by basename)."""
    tests = PKG.parent / "tests"
    files = [p.relative_to(tests) for p in tests.rglob("*.py")]
    folders = {f.parts[0] for f in files if len(f.parts) > 1}
    assert folders <= set(ALLOWED) | {"end_to_end", "real"}, folders - set(ALLOWED) - {"end_to_end", "real"}
    assert [f for f in files if f.name == "__init__.py"] == []
    names = [f.name for f in files]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# --- the import graph: no circles, attn's own modules imported at the top ---------------------------
#
# Read from the AST, so an import inside a function counts like one at the top. A name a wing
# exports lazily (attncli.lazy.exports) counts as an import of the module that defines it: ``from
# attncli.hf import load`` imports attncli/hf/loader.py the moment it runs.
# Imports under ``if TYPE_CHECKING:`` never run and are left out.

# Circles and function-level attn imports: none allowed (the wings that had them are done).
CYCLES_ALLOWED_FOR_NOW: list[set[str]] = []
LAZY_ATTN_IMPORTS_FOR_NOW: set[str] = set()
# A function-level import of an attn module that must stay one: (module, imported) -> why. Only
# for a module that pulls a heavy third-party library in at its top (tests/cli/test_startup.py's list).
LAZY_ATTN_IMPORTS_KEPT: dict[tuple[str, str], str] = {
    ("attncli.explore.serve", "attncli.explore.serve_sessions"): "it imports textual_serve and aiohttp at its top "
                                                                  "(attn explore --serve only)",
    ("attncli.cli.explore", "attncli.explore.app"): "textual, only once the app starts (attn explore --help without it)",
    ("attncli.cli.stats", "attncli.explore.stats_app"): "textual, only for attn stats --explore",
    ("attncli.cli.matrix", "attncli.cli.transformer"): "the pipeline and attn's forward passes (the hf wing, about "
                                                       "30 ms of imports), only for attn matrix --transformer",
    ("attncli.cli.lookup", "attncli.lookup.encoder"): "attn's forward passes (the hf wing, about 45 ms of imports), "
                                                      "only for attn lookup --encoder",
}


def module_files(root: Path = PKG) -> dict[str, Path]:
    """'attncli.tinylm.model' -> its file; a package by its own name ('attncli.tinylm' -> tinylm/__init__.py)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name,) + path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def lazy_exports(init: Path, package: str) -> dict[str, str]:
    """A package's ``exports(__name__, {name: "module[:attr]"})``, as name -> full module name."""
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "exports" and len(node.args) == 2:
            table = ast.literal_eval(node.args[1])
            return {name: f"{package}.{target.split(':')[0]}" for name, target in table.items()}
    return {}


def _in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def import_edges(root: Path = PKG) -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, inside a function) for every import of one of the package's
    modules by another, resolved to the module that runs (see the comment above)."""
    files = module_files(root)
    exported = {name: lazy_exports(path, name) for name, path in files.items() if path.name == "__init__.py"}
    edges = []
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package if node.level else ""
                mod = ".".join(p for p in (base, node.module) if p)
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in files else exported.get(mod, {}).get(a.name, mod)
                           for a in node.names]
            else:
                continue
            if _in_type_checking(node, parents):
                continue
            for target in targets:
                while target not in files and "." in target:
                    target = target.rsplit(".", 1)[0]
                edge = (name, target, node.lineno, _in_function(node, parents))
                if target in files and target != name and edge not in edges:
                    edges.append(edge)
    return edges


@functools.lru_cache(maxsize=1)
def attn_edges() -> tuple[tuple[str, str, int, bool], ...]:
    return tuple(import_edges())


def import_cycles(edges) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan), each a set of names."""
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _wing(module: str) -> str:
    """'attncli.tinylm.model' -> 'lm'; a top-level helper -> 'top'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else "top"


def test_no_import_circles():
    """No circle among attn's modules, through imports at the top or inside functions: a circle
    means a piece belongs one floor down (CYCLES_ALLOWED_FOR_NOW lists other branches' wings)."""
    edges = attn_edges()
    cycles = [c for c in import_cycles(edges) if not any(c <= allowed for allowed in CYCLES_ALLOWED_FOR_NOW)]
    shown = ["; ".join(f"{a} -> {b} (line {line}{', in a function' if lazy else ''})"
                       for a, b, line, lazy in edges if a in c and b in c) for c in cycles]
    assert cycles == [], "import circles:\n" + "\n".join(shown)


@pytest.mark.parametrize("wing", sorted(set(ALLOWED) | set(HELPER_FLOORS) | {"top"}))
def test_attn_modules_are_imported_at_the_top(wing):
    """A function-level import is for a heavy third-party library (tests/cli/test_startup.py); attn's
    own modules are imported at the top of the file, so a reader sees the graph."""
    lazy = [f"{a}:{line} imports {b}" for a, b, line, in_function in attn_edges()
            if in_function and _wing(a) == wing and (a, b) not in LAZY_ATTN_IMPORTS_KEPT]
    if wing in LAZY_ATTN_IMPORTS_FOR_NOW:
        pytest.skip(f"{len(lazy)} function-level attn imports left in {wing}/ (another branch is moving them)")
    assert lazy == [], "import these at the top of the file:\n" + "\n".join(lazy)


def test_every_kept_function_level_import_is_still_one():
    """LAZY_ATTN_IMPORTS_KEPT names only imports that are still inside a function: an entry
    outliving its import would excuse the next one written there."""
    lazy = {(a, b) for a, b, _, in_function in attn_edges() if in_function}
    assert set(LAZY_ATTN_IMPORTS_KEPT) <= lazy, set(LAZY_ATTN_IMPORTS_KEPT) - lazy



# What each kept import keeps out of its importer's start-up: the module the imported one would load there.
KEPT_OUT = {
    "attncli.explore.serve_sessions": "textual_serve",
    "attncli.explore.app": "textual",
    "attncli.explore.stats_app": "textual",
    "attncli.cli.transformer": "attncli.hf",
    "attncli.lookup.encoder": "attncli.hf",
}


@pytest.mark.parametrize("pair", sorted(LAZY_ATTN_IMPORTS_KEPT), ids=lambda p: p[0])
def test_every_kept_function_level_import_keeps_a_module_out_of_start_up(pair):
    """A function-level import of attn's own is kept only for start-up: in a fresh process the
    importer loads without KEPT_OUT's module, and the imported module brings it (so the import,
    written at the top, would load it on every run of the importer)."""
    assert pair[1] in KEPT_OUT, f"say in KEPT_OUT which module {pair[1]} keeps out of {pair[0]}'s start-up"
    assert set(KEPT_OUT) <= {b for _, b in LAZY_ATTN_IMPORTS_KEPT}, set(KEPT_OUT) - {b for _, b in LAZY_ATTN_IMPORTS_KEPT}
    importer, imported = pair
    heavy = KEPT_OUT[imported]
    if importlib.util.find_spec(heavy.split(".")[0]) is None:
        pytest.skip(f"{heavy} is not installed")
    code = (f"import sys, {importer}\nbefore = {heavy!r} in sys.modules\nimport {imported}\n"
            f"print(before, {heavy!r} in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.split() == ["False", "True"], f"{importer} alone loads {heavy}, or {imported} does not: {out!r}"

def test_the_graph_reader_sees_circles_and_function_level_imports(tmp_path):
    """The reader on a made-up package: a circle closed inside a function, a lazy export, a
    relative import, and an import under TYPE_CHECKING (which never runs, so closes nothing)."""
    pkg = tmp_path / "attncli"
    (pkg / "wing").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "wing" / "__init__.py").write_text('from attncli.lazy import exports\n'
                                             '__all__, __getattr__, __dir__ = exports(__name__, {"C": "c:C"})\n')
    (pkg / "wing" / "a.py").write_text("from attncli.wing import b\n")
    (pkg / "wing" / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "wing" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                       "    from attncli.wing import d\nclass C: ...\n")
    (pkg / "wing" / "d.py").write_text("from attncli.wing import C\n")
    edges = import_edges(pkg)
    assert ("attncli.wing.b", "attncli.wing.a", 2, True) in edges
    assert ("attncli.wing.d", "attncli.wing.c", 1, False) in edges  # the lazy export's module
    assert import_cycles(edges) == [{"attncli.wing.a", "attncli.wing.b"}]
    (pkg / "wing" / "c.py").write_text("from attncli.wing import d\nclass C: ...\n")
    assert sorted(map(sorted, import_cycles(import_edges(pkg)))) == [
        ["attncli.wing.a", "attncli.wing.b"], ["attncli.wing.c", "attncli.wing.d"]]


# --- inside hf/: one package per concern, imports running one way (issue 48) ------------------------
#
# checks, kernels, text < formats < families < methods < backends < the top (loader, packaged_models).
# A file format never runs a model, a family never computes a gradient, a method never reaches the
# torch backend; the top only assembles.
HF_FLOORS = {  # hf package: the hf packages it may import (besides its own modules)
    "checks": set(),  # a stranger's files checked: config fields and defaults, weights' names and values
    "kernels": {"checks"},  # the NumPy pieces (ops, attention by row chunks) and their threads and heap
    "text": {"checks"},  # a text's tokens, each token's text, chat templates
    "formats": {"checks", "kernels", "text"},  # where the files are, safetensors, GGUF
    "families": {"checks", "kernels", "formats"},  # the NumPy forward passes and their registry
    "methods": {"checks", "kernels", "formats", "families"},  # gradients, contributions, QK attribution, edges
    "backends": {"checks", "kernels", "text", "formats", "families", "methods"},  # Pretrained: NumPy, torch, seq2seq
    "top": {"checks", "kernels", "text", "formats", "families", "methods", "backends"},  # loading: load
}
HF_TOP = {"__init__.py", "loader.py", "packaged_models.py"}


def hf_package(module: str) -> str | None:
    """'attncli.hf.kernels.ops' -> 'kernels'; 'attncli.hf.loader' (or attncli.hf) -> 'top'; outside hf -> None."""
    parts = module.split(".")
    if parts[:2] != ["attncli", "hf"]:
        return None
    return parts[2] if len(parts) > 3 else "top"


def hf_violations(edges) -> list[str]:
    """The imports among hf's packages against HF_FLOORS (an unknown package imports nothing)."""
    found = []
    for a, b, line, _ in edges:
        pa, pb = hf_package(a), hf_package(b)
        if pa and pb and pa != pb and pb not in HF_FLOORS.get(pa, ()):
            found.append(f"{a}:{line} ({pa}) imports {b} ({pb})")
    return found


def test_hf_packages_import_one_way():
    assert hf_violations(attn_edges()) == [], "hf/'s packages import " + " < ".join(HF_FLOORS)


def test_the_hf_rule_catches_an_upward_import():
    edges = [("attncli.hf.formats.gguf_reader", "attncli.hf.backends.numpy_backend", 3, False),
             ("attncli.hf.methods.backward", "attncli.hf.backends.torch_grad", 4, True),
             ("attncli.hf.families.llama", "attncli.hf.loader", 5, False),
             ("attncli.hf.backends.numpy_backend", "attncli.hf.formats.weights", 6, False),
             ("attncli.hf.loader", "attncli.hf.backends.torch_backend", 7, False)]
    assert [f.split(":")[0] for f in hf_violations(edges)] == ["attncli.hf.formats.gguf_reader",
                                                              "attncli.hf.methods.backward", "attncli.hf.families.llama"]


def test_every_hf_module_is_in_a_package_of_its_concern():
    """A new module of hf/ goes in the package of its concern (HF_FLOORS), not at the top, which loads."""
    hf = PKG / "hf"
    assert {p.name for p in hf.glob("*.py")} <= HF_TOP, sorted({p.name for p in hf.glob("*.py")} - HF_TOP)
    assert {p.name for p in hf.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(HF_FLOORS) - {"top"}


def test_only_the_backends_import_torch():
    """torch (and its autograd) is the torch backend's: formats, families and methods are NumPy."""
    found = [f"{path.relative_to(PKG)}" for path in sorted((PKG / "hf").rglob("*.py"))
             if path.parent.name != "backends" and any(name == "torch" or name.startswith("torch.")
                                                      for name in imported_names(path.read_text(encoding="utf-8"), ""))]
    assert found == []


# A matrix request runs one way (issue 48): cli -> pipeline (the request, compute_view, reads) ->
# the model's pass (hf) -> arrays -> attention (the views' arithmetic) -> views. attention/ and views/
# take arrays and a model's facts (layers, heads, kv_head), never run its pass.
PASS_METHODS = {"encode", "attentions", "trace", "trace_batch", "qk", "scores", "value_vectors", "embed", "tape",
                "unembed", "logits_and_attentions"}
# where a view still runs a pass of its own, with why (the next step removes it)
RUNS_A_PASS_FOR_NOW = {"views/page.py": "extra_views falls back to model.value_vectors / model.scores when a "
                                        "result has no reads (the pipeline always passes it today)"}


def model_passes(source: str) -> list[int]:
    """The lines of ``model.encode(...)``, ``self.model.trace(...)``, ...: a call of a model's pass."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                   and isinstance(node.func, ast.Attribute) and node.func.attr in PASS_METHODS
                   and ((isinstance(node.func.value, ast.Name) and node.func.value.id == "model")
                        or (isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "model"))})


def test_attention_and_views_never_run_a_models_pass():
    found = [f"{path.relative_to(PKG)}:{line}" for wing in ("attention", "views") for path in sorted((PKG / wing).rglob("*.py"))
             for line in model_passes(path.read_text(encoding="utf-8"))
             if str(path.relative_to(PKG)) not in RUNS_A_PASS_FOR_NOW]
    assert found == [], "run the pass in attncli/pipeline/ and hand the arrays down"
    still = {f.split(":")[0] for f in found} | {str(p.relative_to(PKG)) for w in ("attention", "views")
                                                for p in (PKG / w).rglob("*.py") if model_passes(p.read_text(encoding="utf-8"))}
    assert set(RUNS_A_PASS_FOR_NOW) <= still, "no longer runs a pass: drop it from RUNS_A_PASS_FOR_NOW"


def test_the_pass_reader_sees_a_models_pass():
    assert model_passes("enc = model.encode(text)\nx = self.model.trace(enc)\nb = text.encode('ascii')\n") == [1, 2]


def test_no_circles_among_the_benchmark_scripts():
    """bench/*.py import each other by name (bench.py's table runs bench_speed's rows): one way only."""
    bench = PKG.parent / "bench"
    names = {path.stem for path in bench.glob("*.py")}
    edges = []
    for path in sorted(bench.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] \
                if isinstance(node, ast.ImportFrom) and not node.level else []
            edges += [(path.stem, name, node.lineno, False) for name in found if name in names and name != path.stem]
    assert import_cycles(edges) == []


# Modules over the size in wings other branches are splitting now; the coordinator empties this
# set when they land.
LONG_MODULES_FOR_NOW: set[str] = set()
MAX_MODULE_LINES = 400  # STYLE.md: a module past it is split along the seams it already has


def test_modules_stay_under_about_400_lines():
    long = {str(path.relative_to(PKG)): n for _, path in modules()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert set(long) <= LONG_MODULES_FOR_NOW, {k: v for k, v in long.items() if k not in LONG_MODULES_FOR_NOW}


# Modules that share a basename, each with why the pair reads well: the rule is one name, one
# place, so a traceback, a grep or a docstring that names "weights.py" points at one file.
SHARED_BASENAMES = {
    # a command (cli/), what it draws (views/) and what it computes (attention/): one view, one name per floor
    "causal.py": ({"cli/causal.py", "views/causal.py"}, "attn ablate / patch / dla: the command and its drawing"),
    "circuit.py": ({"causal/circuit.py", "cli/circuit.py"}, "attn circuit: the computation and the command"),
    "compare.py": ({"attention/compare.py", "cli/compare.py"}, "attn compare: the computation and the command"),
    "lens.py": ({"cli/lens.py", "views/lens.py"}, "attn lens: the command and its drawing"),
    "long_view.py": ({"attention/long_view.py", "views/long_view.py"}, "a long input's view: computed, then drawn"),
    "matrix.py": ({"attention/matrix.py", "cli/matrix.py"}, "attn matrix: the computation and the command"),
    "model_view.py": ({"attention/model_view.py", "views/model_view.py"}, "the model view: computed, then drawn"),
    # a wing's own kind of the same thing, always imported with the wing's name
    "model.py": ({"tinylm/model.py", "vectors/model.py"}, "each wing's model: attn's small LM, the word vectors"),
    "train.py": ({"tinylm/train.py", "vectors/train.py"}, "training each wing's model: the LM (torch), the vectors "
                                                           "(gensim)"),
    "heads.py": ({"attention/heads.py", "tinylm/heads.py"}, "tinylm/heads.py scores the trained LM's heads with "
                                                             "attention/heads.py's patterns"),
    "corpus.py": ({"stats/corpus.py", "vectors/corpus.py"}, "each wing's texts: stats streams any corpus, vectors "
                                                             "trains on Brown or a text file"),
}


def shared_basenames(root: Path = PKG) -> dict[str, set[str]]:
    """Basename -> the modules (paths under attncli/) that carry it, for names on more than one
    (package __init__.py and __main__.py left out)."""
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            found.setdefault(path.name, set()).add(path.relative_to(root).as_posix())
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_no_two_modules_share_a_basename_unless_listed_with_the_reason():
    shared = shared_basenames()
    unlisted = {name: sorted(paths) for name, paths in shared.items()
                if name not in SHARED_BASENAMES or paths != SHARED_BASENAMES[name][0]}
    assert unlisted == {}, "rename one (every importer follows) or list the pair in SHARED_BASENAMES with the reason"
    stale = sorted(set(SHARED_BASENAMES) - set(shared))
    assert stale == [], f"no longer shared, drop from SHARED_BASENAMES: {stale}"


# --- a family is one file: methods read its description, never its class ----------------------------
#
# The NumPy families live in attncli/hf/families/ (one file each, and the registry the loader asks);
# gradients, contributions, QK attribution and circuit edges read ``arch.parts`` (families/parts.py).
FAMILIES = PKG / "hf" / "families"
NOT_FAMILY_FILES = {"__init__.py", "parts.py", "registry.py", "llama_config.py"}  # no pass in them


def family_classes(root: Path = FAMILIES) -> set[str]:
    """The names of the classes the family files define (their passes: GPT2, Llama, BertFamily, ...)."""
    return {node.name for path in root.glob("*.py") if path.name not in NOT_FAMILY_FILES
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)}


def family_dispatch(source: str, classes: set[str]) -> list[int]:
    """The lines where ``source`` names a family class: an ``isinstance(arch, llama.Llama)``, a tuple
    of them to dispatch on (FAMILIES = (bert.BertFamily, ...)), a subclass check."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if (isinstance(node, ast.Name) and node.id in classes)
                   or (isinstance(node, ast.Attribute) and node.attr in classes)})


def test_no_method_dispatches_on_a_family_class():
    """0 isinstance dispatch on a family class outside the family files and the registry (issue 48):
    a method that needs the norm before attention asks the family's description."""
    classes = family_classes()
    assert {"GPT2", "Llama", "BertFamily", "DistilBert", "MPNet"} <= classes, classes
    found = {f"attncli/{path.relative_to(PKG)}:{line}" for path in sorted(PKG.rglob("*.py"))
             if FAMILIES not in path.parents for line in family_dispatch(path.read_text(encoding="utf-8"), classes)}
    assert found == set(), sorted(found)


def test_the_dispatch_reader_sees_isinstance_and_tuples_of_classes():
    classes = {"Llama", "GPT2"}
    source = ("from attncli.hf.families import gpt2, llama\n"
              "KINDS = (gpt2.GPT2,)\n"
              "def f(arch):\n"
              "    return isinstance(arch, llama.Llama) or isinstance(arch, KINDS)\n"
              "def g(arch):\n"
              "    return arch.parts.place == 'pre'\n")
    assert family_dispatch(source, classes) == [2, 4]


def private_imports(root: Path = PKG) -> list[str]:
    """Every ``from attncli.x import _name`` (a name private to its module, not a dunder) in ``root``:
    'importer:line imports module._name'."""
    found = []
    for name, path in module_files(root).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == root.name):
                found += [f"{name}:{node.lineno} imports {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_module():
    """A name that starts with _ is its module's own: another module that needs it needs a public
    name for it, in the module where it belongs."""
    assert private_imports() == [], "give these a public name:\n" + "\n".join(private_imports())


def test_the_private_import_reader_sees_one(tmp_path):
    pkg = tmp_path / "attncli"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _f(): ...\ndef g(): ...\n")
    (pkg / "b.py").write_text("from attncli.a import g\nfrom attncli import a as _a\nfrom .a import __doc__\n")
    assert private_imports(pkg) == []
    (pkg / "c.py").write_text("from attncli.a import g, _f\n")
    assert private_imports(pkg) == ["attncli.c:1 imports attncli.a._f"]
