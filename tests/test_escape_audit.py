"""Every text drawn on a terminal goes through the escaping door (issue 20): an AST walk over attncli/.

The door is ``attncli.io.textio.visible`` (control, bidi and line-separator characters shown as
``\\x1b``, ``\\u202e``), and for rich markup strings ``attncli.cli.common.shown`` / ``escape`` (visible,
then ``rich.markup.escape``). This test finds every call that puts text on a terminal (a sink:
``print``, a console's ``print`` / ``rule``, ``typer.echo``, ``sys.stdout/stderr.write``, ``Text(...)``,
``Text.assemble``, ``.append`` on a ``Text``, a Table's cells, columns, title and caption, a
Textual ``Static`` / ``Label`` / ``notify`` / ``update``, a progress bar's fields) and checks that each
argument is built only from constants, numbers formatted as numbers, door calls, and local names
assigned from those. What it cannot prove is listed in ``ALLOWED`` with the reason it is safe; a
new sink of data that bypasses the door fails here until it is escaped (or argued for below).

``say``, ``warn``, ``info`` (attncli.cli.common) and ``attncli.io.messages`` are doors themselves (they
escape what they print), so their callers pass raw messages.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import attncli

PKG = Path(attncli.__file__).parent

# (module, qualified import name) -> the name resolves to a door
DOOR_TARGETS = {("attncli.io.textio", "visible"), ("attncli.cli.common", "shown"), ("attncli.cli.common", "escape"),
                ("attncli.cli.common", "visible_line"),
                ("attncli.io.textio", "token_label"),  # a token's text: visible() after the space mark
                ("attncli.views.result", "shown")}
DOOR_LOCAL = {"cli/common.py": {"shown", "escape", "visible_line", "_escape"},
              "views/result.py": {"shown", "escape"},
              "views/lens.py": {"_shown"}}  # defined (or built) there (lens: token_label or visible)
STR_METHODS = {"rstrip", "lstrip", "strip", "rjust", "ljust", "center"}
TRANSPARENT = STR_METHODS | {"abbreviate"}  # attncli.views.render.abbreviate cuts a label to a width
NUMBERS = {"len", "int", "float", "round", "abs", "min", "max", "sum"}  # numbers: no control characters
NUMERIC_SPEC = set("fegdn%,xobEG")  # a format spec ending in one of these formats a number
NUMERIC_TYPES = {"int", "float", "bool", "None", "tuple"}  # a parameter annotated only with these holds a number
# fields that hold numbers wherever they appear (x.heads, doc["d_k"]): validated as numbers where
# they are read (meta.json, config.json, the CLI's options)
NUMERIC_FIELDS = {"heads", "layers", "d_model", "d_k", "dim", "vocab_size", "output_vocab_size", "epochs",
                  "epochs_done", "steps", "threads", "keys", "trials", "sentences", "queries", "heldout_targets",
                  "perplexity", "bigram_perplexity", "unigram_perplexity", "n_keys", "temperature", "prob", "prompt_length"}

# functions that return rich renderables (Text, Table, lists of them) or strings built only through
# checked sinks, so what they return may be printed as is
RENDERABLE_BUILDERS = {
    "Trimmed": "attncli/views/result.py: the renderable it is given (checked where that one is built), its lines' "
               "trailing spaces dropped",
    "explain_text": "attncli/views/lookup_view.py: builds a Text whose data parts go through escape (checked here)",
    "_evaluation_table": "attncli/cli/vectors.py: a Table of benchmark names (constants) and numbers",
    "explanation_renderables": "attncli/views/explanation.py: Texts built through visible_text (checked here)",
    "renderables": "attncli/pipeline/view_result.py -> views: Heatmaps drawn through render.py (checked here)",
    "screen_renderables": "attncli/views/result.py: a result's renderables (checked where each result draws), or its heatmap pages as lines (views/render.py)",
    "heatmaps": "attncli/pipeline/view_result.py: pretrained_heatmaps / model_view_renderables, drawn through "
                "views/render.py and views/model_view.py (checked here)",
    "model_view_renderables": "attncli/views/model_view.py: Texts checked here",
    "heatmap_renderables": "attncli/views/render.py: heatmap Texts, labels through visible_text (checked here)",
    "matrix_renderables": "attncli/views/render.py: heatmap Texts, labels through visible_text (checked here)",
    "grid_panel": "attncli/explore/model_view_pane.py: Texts checked here",
    "_sampling_label": "attncli/cli/generate.py: numbers and constant words only",
    "_cell": "attncli/views/render.py: a formatted weight (a number) and its style",
    "class_text": "attncli/views/model_view.py: a head class label (a fixed name) and a number",
    "strongest": "attncli/views/model_view.py: escapes both tokens with visible (checked by a behavioural test)",
    "_bar": "attncli/views/lookup_view.py: block characters for a weight",
    "_fmt": "a number formatted, or a dash",
    "shade": "attncli/views/model_view.py: one of five fixed shade characters",
    "fmt": "attncli/cli/lm.py: a number formatted",
    "stats_renderables": "attncli/views/stats_view.py: heatmaps (views/render.py) and Tables of visible()d contexts (checked here)",
    "head_renderables": "attncli/explore/stats_app.py: Tables and Texts of visible()d names and contexts, numbers (checked here)",
    "qk_split_renderables": "attncli/explore/qk_split.py: Texts of visible()d messages and views/qk_view.py's "
                            "qk_renderables (checked here)",
}

# (file, function, argument source, of which the first KEY characters count) -> why this argument,
# which the walk cannot prove safe, is safe
KEY = 60
ALLOWED = {
    ("cli/common.py", "json_write", "text"): "JSON text: json.dumps escapes every control character (\\u001b)",
    ("cli/entry.py", "_say", "line + '\\n'"): "the entry point's own fixed messages (an import failure, a signal)",
    ("cli/main.py", "_version", "f'attn {__version__}'"): "the package's version string",
    ("views/long_view.py", "top_k_renderables", "number(other, 3)"): "a number attn formats",
    ("views/long_view.py", "top_k_renderables", "f'{number(w, 3)}\\n{key}'"):
        "a number attn formats over the key's label, escaped where it is made (abbreviate(visible(...)))",
    ("rules/option_conflicts.py", "main", "markdown()"): "a contributor's script: the table made from attn's own rows",
    ("rules/option_conflicts.py", "main", "f'wrote {page}'"): "a contributor's script: the docs page's path in the repo",
    ("cli/generate.py", "_print_header", "f'attention: {gen.view.label(d.heads, d.layers)}'"):
        "the attention view's label: fixed words and layer/head numbers",
    ("cli/generate.py", "_print_end", 'f"each row\'s {top} strongest keys · {view} · {where}"'):
        "view: the attention view's label (fixed words, numbers); where: numbers",
    ("cli/importing.py", "import_cmd", 'f"Model [bold]{escape(name)}[/]: {meta[\'vocab_size\']:,} words x '
     '{meta[\'dim\']} dims{extra}, imported from {escape(Path(path).name)} in {summary[\'seconds\']:.1f} s; use '
     'it with --model {escape(name)}"'): "extra: fixed words and the fastText n-gram numbers; the rest escape()d or numbers",
    ("cli/lm.py", "train_attention_cmd", "f'epoch {epoch} step {step}/{total} loss {loss:.3f} {tokens_per_s:,.0f} tok/s'"):
        "the training loop's counters: ints",
    ("views/lookup_view.py", "lookup_renderables", "*cells"): "escape()d keys (built above) and formatted numbers",
    ("views/lookup_view.py", "lookup_renderables", "value"): "escape()d values (built above)",
    ("views/result.py", "print_to", "part"): "a result's renderables: each result's drawing is checked where it is built",
    ("cli/panels.py", "_small_table", "title"): "the worked example's fixed captions",
    ("cli/panels.py", "_small_table", "c"): "the worked example's fixed words",
    ("cli/panels.py", "_small_table", "name"): "the worked example's fixed words",
    ("cli/panels.py", "_small_table", "*[f'{x:.{decimals}f}' for x in row]"): "numbers",
    ("cli/panels.py", "render_scale", "col"): "fixed column names",
    ("cli/panels.py", "render_scale", "name"): "the worked example's fixed words",
    ("cli/panels.py", "render_scale", "str(r['d_k'])"): "an int",
    ("cli/vectors.py", "train_cmd", 'f"Training {params.algorithm} ({(\'skip-gram\' if params.sg else \'CBOW\')}, {pa'):
        "params: the algorithm (one of fixed choices, checked) and ints; the corpus label escape()d",
    ("cli/vectors.py", "_evaluation_table", "label"): "the fixed benchmark names",
    ("cli/vectors.py", "models_cmd", "str(r['dim'])"): "an int, type-checked when meta.json is read",
    ("explore/lookup_pane.py", "_looked_up", "*parts"): "the table (cells visible()d above), the answer (a Text.assemble "
        "of visible() parts) and the soft value (a number)",
    ("explore/lookup_pane.py", "_looked_up", "WeightBar(e.weight)"): "a bar drawn from a weight (a number)",
    ("explore/widgets.py", "compose", "shown"): "help rows: the fixed key bindings",
    ("explore/widgets.py", "compose", "text"): "help rows: the fixed key descriptions",
    ("views/model_view.py", "model_view_renderables", "note"): "pair_note: fixed words and token positions",
    ("views/model_view.py", "model_view_renderables", "line"): "class_text (a fixed label) and strongest (escaped)",
    ("views/model_view.py", "model_view_renderables", "label"): "a head number and class_text (a fixed label)",
    ("views/model_view.py", "model_view_renderables", "label + '  '"): "a head number and class_text (a fixed label)",
    ("views/render.py", "_page_lines", "f'{labels[r]:<{label_w}} '"): "labels: visible_text()ed by the caller",
    # sites the merged branches added (exports, heads table, lens, explanation layout)
    ("cli/generate.py", "generate_cmd", "f'logit lens, the layer from which each token was the top prediction"):
        "shown: escape()d tokens and layer numbers (built just above)",
    ("pipeline/compute_view.py", "compute", "title"): "a ViewResult's title: svg_text, png_bytes and "
        "interactive_page put it through visible() (the dataclass field is no rich title)",
    ("pipeline/compute_view.py", "_stack_view", "title"): "as compute's: the export's title, escaped where it is drawn",
    ("cli/transformer.py", "run_matrix", "part"): "ViewResult.renderables: heatmaps and explanations drawn through views/render.py (checked there)",
    ("explore/footer.py", "_update_footer", "shown.get(b.action, b.description)"): "the app's fixed key bindings",
    ("views/export.py", "record", "part"): "into a recording console that writes a file, not the terminal",
    ("views/export.py", "record", "command"): "into a recording console that writes a file, not the terminal",
    ("views/heads_table.py", "_table", "title"): "built by the caller from escape()d model names, the backend's name and fixed words",
    ("views/heads_table.py", "_table", "SHORT.get(k, k)"): "the head report's fixed score names",
    ("views/heads_table.py", "_table", "str(h['layer'])"): "an int",
    ("views/heads_table.py", "_table", "str(h['head'])"): "an int",
    ("views/heads_table.py", "_table", "*((str(h['kv_head']),) if kv else ())"): "an int",
    ("views/heads_table.py", "_table", "h['label']"): "a head class: one of the fixed labels of attncli.attention.heads",
    ("views/lens.py", "render_lens", "part"): "lens_renderables' tables: tokens through visible(), numbers (checked there)",
    ("views/causal.py", "render_grid", "part"): "heatmap_renderables: labels and title through visible_text there",
    ("views/causal.py", "render_dla", "part"): "dla_renderables: part names and title through visible(), numbers",
    ("views/lens.py", "lens_renderables", "title"): "the model's name through visible(), fixed words and top_k (an int)",
    ("views/lens.py", "lens_renderables", "_position(t, tok)"): "_position: an int and the token through visible()",
    ("cli/common.py", "print_error", "markup"): "the callers' markup: fixed words and escape()d messages (escape = visible + markup)",
    ("cli/common.py", "print_error", "glued"): "the same markup, spaces of pasteable commands glued (restored before writing)",
    ("views/lens.py", "lens_renderables", "f\"{follow['rank'][l][t]:>4} {p:.2f}\""): "a rank (an int) and a probability",
    ("views/render.py", "_page_lines", "f'{abbreviate(col_labels[j], col_w[j]):>{col_w[j] + 2}}'"):
        "labels: visible_text()ed by the caller (heatmap_renderables)",
    ("views/explanation.py", "table", "x"): "explanation steps: visible_text()ed by explanation_renderables before ExplanationSteps",
    ("views/explanation.py", "__rich_console__", "f'{name:<{name_w}}  {value}'"): "explanation steps: visible_text()ed by the caller",
    ("views/explanation.py", "__rich_console__", "name"): "explanation steps: visible_text()ed by the caller",
    ("views/explanation.py", "__rich_console__", "'  ' + value"): "explanation steps: visible_text()ed by the caller",
    ("views/explanation.py", "__rich_console__", "'  ' + note"): "explanation steps: visible_text()ed by the caller",
}
ALLOWED = {(rel, fn, arg[:KEY]): why for (rel, fn, arg), why in ALLOWED.items()}

SINK_METHODS = {"print", "rule", "echo", "secho", "out", "add_row", "notify", "show"}
NUMERIC_MODULES = ("np", "numpy", "math", "torch")  # their .log is a logarithm, not a console's log
SINK_FIRST_ARG_METHODS = {"add_column"}
SINK_CONSTRUCTORS = {"Text", "Static", "Label", "Panel"}
SINK_KEYWORDS = {"title", "caption", "last", "description", "subtitle"}
SINK_ATTRIBUTES = {"caption", "title", "sub_title"}  # x.caption = ...


class Checker:
    """The unproven sink arguments of one module's source: (function, argument source, line)."""

    def __init__(self, source: str, rel: str):
        self.tree = ast.parse(source)
        self.rel = rel
        self.doors = set(DOOR_LOCAL.get(rel, ()))
        self.constants: dict[str, ast.expr] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (node.module, alias.name) in DOOR_TARGETS:
                        self.doors.add(alias.asname or alias.name)
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.constants[node.targets[0].id] = node.value

    # ---- which expressions are safe
    def safe(self, node: ast.expr, scope: dict[str, list[ast.expr]], depth: int = 0) -> bool:
        if depth > 12:
            return False
        again = lambda n: self.safe(n, scope, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.JoinedStr):
            return all(again(v) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            spec = node.format_spec
            if node.conversion == -1 and isinstance(spec, ast.JoinedStr) and all(
                    isinstance(v, ast.Constant) for v in spec.values):
                text = "".join(str(v.value) for v in spec.values)
                if text and text[-1] in NUMERIC_SPEC:
                    return True
            return node.conversion == -1 and again(node.value)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Mult):  # a safe string or list repeated: "─" * width, [rule] * n
                return again(node.left)
            return again(node.left) and again(node.right)
        if isinstance(node, ast.IfExp):
            return again(node.body) and again(node.orelse)
        if isinstance(node, (ast.List, ast.Tuple)):
            return all(again(e) for e in node.elts)
        if isinstance(node, ast.Starred):
            return again(node.value)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)):
            return again(node.elt)
        if isinstance(node, ast.Attribute) and node.attr in NUMERIC_FIELDS:
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            return True  # an array's shape: ints
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and node.slice.value in NUMERIC_FIELDS:
            return True
        if isinstance(node, ast.Subscript):  # an item or a slice of a safe list or string
            return again(node.value)
        if isinstance(node, ast.Name):
            if node.id == "<number>":
                return True
            if node.id in scope:
                return all(again(v) for v in scope[node.id])
            if node.id in self.constants:
                return again(self.constants[node.id])
            return False
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in self.doors or name in NUMBERS or name in RENDERABLE_BUILDERS:
                return True
            if name in ("Text", "Table"):  # a renderable: its own text is checked where it is given
                return True
            if name == "Group":  # rich's Group of renderables: safe when every one of them is
                return all(again(a) for a in node.args)
            if name in TRANSPARENT:  # cutting or padding a safe string keeps it safe
                return again(func.value) if isinstance(func, ast.Attribute) and name in STR_METHODS else \
                    bool(node.args) and again(node.args[0])
            if name == "join" and isinstance(func, ast.Attribute) and len(node.args) == 1:
                arg = node.args[0]
                items = arg.elt if isinstance(arg, (ast.GeneratorExp, ast.ListComp)) else arg
                return again(func.value) and again(items)
        return False

    # ---- where text reaches a terminal
    def sinks(self, call: ast.Call, text_names: set[str]) -> list[ast.expr]:
        func = call.func
        kw = [k.value for k in call.keywords if k.arg in SINK_KEYWORDS]
        if isinstance(func, ast.Name):
            if func.id == "print":
                return list(call.args) + kw
            if func.id in SINK_CONSTRUCTORS or func.id == "Table":
                return list(call.args[:1] if func.id != "Table" else []) + kw
            return kw
        if not isinstance(func, ast.Attribute):
            return []
        receiver = ast.unparse(func.value)
        if func.attr == "write" and receiver in ("sys.stdout", "sys.stderr"):
            return list(call.args)
        if func.attr == "assemble" and receiver == "Text":
            return [a.elts[0] if isinstance(a, ast.Tuple) else a for a in call.args]
        if func.attr == "append" and receiver in text_names:
            return list(call.args[:1])
        if func.attr == "update" and ("query_one" in receiver or receiver == "widget"):
            return list(call.args[:1]) + kw
        if func.attr == "update" and receiver.endswith("bar"):
            return kw
        if func.attr in SINK_METHODS or func.attr == "log" and receiver not in NUMERIC_MODULES:
            return list(call.args) + kw
        if func.attr in SINK_FIRST_ARG_METHODS:
            return list(call.args[:1]) + kw
        return kw if func.attr in ("add_task",) else []

    def problems(self) -> list[tuple[str, str, int]]:
        found = []
        functions = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        seen: set[int] = set()
        for fn in functions:
            scope: dict[str, list[ast.expr]] = {}
            text_names: set[str] = set()
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            scope.setdefault(target.id, []).append(node.value)
                            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                                    and node.value.func.id == "Text":
                                text_names.add(target.id)
                        elif isinstance(target, ast.Tuple):  # a, b = ...: each is an item of the value
                            for name in target.elts:
                                if isinstance(name, ast.Name):
                                    scope.setdefault(name.id, []).append(node.value)
                        elif isinstance(target, ast.Attribute) and target.attr in SINK_ATTRIBUTES:
                            scope.setdefault(f"<{target.attr}>", []).append(node.value)
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    scope.setdefault(node.target.id, []).append(node.value)
                elif isinstance(node, (ast.For, ast.comprehension)):
                    numbers = _loop_numbers(node)
                    for name in ast.walk(node.target):
                        if isinstance(name, ast.Name):  # a loop over anything else: unknown, not safe
                            scope.setdefault(name.id, []).append(ast.Name(id="<number>" if name.id in numbers
                                                                          else "<loop>"))
                elif isinstance(node, ast.arg):
                    numeric = node.annotation is not None and all(
                        n.id in NUMERIC_TYPES for n in ast.walk(node.annotation) if isinstance(n, ast.Name))
                    scope.setdefault(node.arg, []).append(ast.Name(id="<number>" if numeric else "<argument>"))
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and id(node) not in seen:
                    seen.add(id(node))
                    for arg in self.sinks(node, text_names):
                        if not self.safe(arg, scope):
                            found.append((fn.name, ast.unparse(arg), node.lineno))
                elif isinstance(node, ast.Assign) and id(node) not in seen:
                    seen.add(id(node))
                    for target in node.targets:
                        if isinstance(target, ast.Attribute) and target.attr in SINK_ATTRIBUTES \
                                and not self.safe(node.value, scope):
                            found.append((fn.name, ast.unparse(node.value), node.lineno))
        return found


def _loop_numbers(loop) -> set[str]:
    """The loop variables known safe: numbers (``range(...)``, the index of ``enumerate(...)``), the
    items of a tuple of constants, and the renderables a checked builder returns."""
    it = loop.iter
    if isinstance(it, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) for e in it.elts) \
            or isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in RENDERABLE_BUILDERS:
        return {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}  # fixed words, or renderables
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name):
        if it.func.id == "range" and isinstance(loop.target, ast.Name):
            return {loop.target.id}
        if it.func.id == "enumerate" and isinstance(loop.target, ast.Tuple) and isinstance(loop.target.elts[0], ast.Name):
            return {loop.target.elts[0].id}
    return set()


def unproven(source: str, rel: str) -> list[str]:
    return [f"{rel}:{line}: {fn}: {arg}" for fn, arg, line in Checker(source, rel).problems()
            if (rel, fn, arg[:KEY]) not in ALLOWED]


def modules():
    return sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=[str(p.relative_to(PKG)) for p in modules()])
def test_every_text_sink_goes_through_the_door(path):
    rel = str(path.relative_to(PKG))
    bad = unproven(path.read_text(encoding="utf-8"), rel)
    assert not bad, ("text from data reaches the terminal without attncli.io.textio.visible (or cli.common.shown for "
                     "markup); escape it, or add the site to ALLOWED with the reason it is safe:\n" + "\n".join(bad))


def test_every_allowance_is_still_needed():
    used = set()
    for path in modules():
        rel = str(path.relative_to(PKG))
        used |= {(rel, fn, arg[:KEY]) for fn, arg, _ in Checker(path.read_text(encoding="utf-8"), rel).problems()}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED lists sites that no longer exist or are now proven safe: {stale}"


@pytest.mark.parametrize("source, flagged", [
    ("def f(name):\n    console.print(f'model {name}')\n", True),
    ("def f(name):\n    console.print(f'model {escape(name)}')\nfrom attncli.cli.common import escape\n", False),
    ("def f(name):\n    print(name, file=sys.stderr)\n", True),
    ("def f(name):\n    print(visible(name))\nfrom attncli.io.textio import visible\n", False),
    ("def f(name):\n    print(visible(name))\n", True),  # a function merely called visible is not the door
    ("def f(tok):\n    t = Text()\n    t.append(tok)\n", True),
    ("def f(tok):\n    t = Text()\n    t.append(f'{tok:.3f}')\n", False),
    ("def f(model):\n    return Text(f'{model.name} view')\n", True),
    ("def f(model):\n    return Text(f'{model.name!r} view')\n", True),  # repr: markup and bidi survive
    ("def f(model):\n    x = model.name\n    out.print(x)\n", True),
    ("def f(n):\n    x = f'{n:,} words'\n    out.print(x)\n", False),
    ("def f(t):\n    table.add_row(t.key, '1')\n", True),
    ("def f(t):\n    table = Table(title=f'keys of {t}')\n", True),
    ("def f(t):\n    table.caption = t\n", True),
    ("def f(self, m):\n    self.notify(m)\n", True),
    ("def f(m):\n    console.log(m)\n", True),
    ("def f(m):\n    return np.log(m)\n", False),
    ("def f(self, m):\n    self.query_one('#x').update(m)\n", True),
    ("def f(path):\n    sys.stderr.write(str(path))\n", True),
    ("def f(words):\n    out.print(', '.join(w for w in words))\n", True),
    ("def f(words):\n    out.print(', '.join(f'{len(w):,}' for w in words))\n", False),
    ("def f(self, parts):\n    self.query_one('#x').update(Group(*parts))\n", True),
    ("def f(self, hm):\n    self.query_one('#x').update(Group(*heatmap_renderables(hm, 80)))\n", False),
    ("def f(self, hm, name):\n    self.query_one('#x').update(Group(*heatmap_renderables(hm, 80), name))\n", True),
])
def test_the_rule_catches_unescaped_data(source, flagged):
    assert bool(unproven(source, "x.py")) is flagged, unproven(source, "x.py")


# --- the interactive page's script (attncli/views/page.js) ---------------------------------------
# The page embeds the exact JSON; its script draws the data. Every DOM text or attribute it sets
# goes through its door ``shown`` (textio.visible's escapes), or is one of these, argued for:
PAGE_SINKS_ALLOWED = {
    'e.setAttribute(k, shown(attrs[k]))': "the door",
    'svg.setAttribute("height", String(22 * n))': "a number",
    'line.setAttribute("x1", "0")': "a constant", 'line.setAttribute("y1", String(22 * i + 11))': "a number",
    'line.setAttribute("x2", "160")': "a constant", 'line.setAttribute("y2", String(22 * j + 11))': "a number",
    'line.setAttribute("stroke", "#2a6fdb")': "a constant", 'line.setAttribute("stroke-width", "2")': "a constant",
    'line.setAttribute("stroke-opacity", String(strength(w)))': "a number",
    'document.body.setAttribute("data-drawn", which() + " " + S.view)': "an attribute no one sees (tests read it)",
    't.querySelector(".w").textContent = fi === null ? "" : fmt(m.W[fi][j])': "a number (fmt: toFixed)",
    '$("note").textContent = "rows: queries, columns: keys; " + what + " as attn matrix --json gives them" +':
        "constants and the --filter choice (a-a, a-b, ...)",
}
PAGE_SINK = re.compile(r"(\S+\.(?:textContent|title|innerHTML|outerHTML|innerText)\s*=[^=].*|\S*\.setAttribute\(.*\)"
                       r"|insertAdjacentHTML|document\.write)")


def _statements(script: str) -> list[str]:
    """Each line's statements, split at the semicolons outside string literals (stripped)."""
    out = []
    for line in script.splitlines():
        current, quote = "", None
        for ch in line.strip():
            if quote:
                quote = None if ch == quote and not current.endswith("\\") else quote
            elif ch in "\"'`":
                quote = ch
            elif ch == ";":
                out.append(current.strip())
                current = ""
                continue
            current += ch
        if current.strip():
            out.append(current.strip())
    return out


def page_sinks_unproven(script: str) -> list[str]:
    """Each line of ``script`` that sets DOM text or an attribute neither through shown( nor allowed."""
    bad = []
    for statement in _statements(script):
        for m in PAGE_SINK.finditer(statement):
            sink = m.group(0)
            if re.search(r"(textContent|title)\s*=\s*shown\(", sink) or sink in PAGE_SINKS_ALLOWED:
                continue
            if "JSON.parse(document.getElementById" in sink:  # reading the data, not drawing it
                continue
            bad.append(sink)
    return bad


def test_every_page_sink_goes_through_shown():
    script = (PKG / "views" / "page.js").read_text(encoding="utf-8")
    assert page_sinks_unproven(script) == []
    for sink in PAGE_SINKS_ALLOWED:  # every allowance is still needed
        assert sink in script, sink


@pytest.mark.parametrize("line, flagged", [
    ('$("sub").textContent = D.text;', True),
    ('$("sub").textContent = shown(D.text);', False),
    ('t.title = cellTitle(m, i, fj);', True),
    ('e.innerHTML = label;', True),
    ('e.setAttribute("title", D.tokens[i]);', True),
])
def test_the_page_rule_catches_unescaped_data(line, flagged):
    assert bool(page_sinks_unproven(line)) is flagged, page_sinks_unproven(line)
