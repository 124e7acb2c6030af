"""Options declared once (attncli.cli.options): ``attn matrix`` and ``attn explore`` build their
signatures from the same declarations, so a flag's name, type, help and default live in one place."""

import inspect
from typing import Annotated, Any, Optional

import pytest
import typer
from typer.testing import CliRunner

from attncli.cli import options as opts
from attncli.cli.explore import explore_cmd
from attncli.cli.main import app
from attncli.cli.matrix import matrix_cmd


@pytest.mark.parametrize("command", [matrix_cmd, explore_cmd])
def test_the_shared_options_are_the_declarations(command):
    params = inspect.signature(command).parameters
    shared = [name for name in params if name in opts.OPTIONS]
    assert len(shared) >= 30
    own = {"rows"} if command is matrix_cmd else set()  # attn matrix's --rows has its own help (START:END too)
    for name in set(shared) - own:
        annotation, default = opts.OPTIONS[name]
        assert params[name].annotation is annotation and params[name].default == default, name
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_a_declaration_reaches_both_commands_help(monkeypatch):
    """A command built from the declarations takes their flag, help and default; both commands show
    the one help text."""
    monkeypatch.setitem(opts.OPTIONS, "layer", (Annotated[Optional[int], typer.Option(help="Changed here.")], 7))

    @opts.declared("text", "layer", "json_out")
    def probe(text: Annotated[str, typer.Argument()], *, json_out: bool = False, **options: Any) -> None:
        print(options["layer"], json_out)

    probe_app = typer.Typer()
    probe_app.command("probe")(probe)
    probe_app.command("other")(lambda: None)
    runner = CliRunner()
    assert runner.invoke(probe_app, ["probe", "x", "--layer", "3"]).stdout.split() == ["3", "False"]
    assert runner.invoke(probe_app, ["probe", "x"]).stdout.split() == ["7", "False"]
    help_text = " ".join(runner.invoke(probe_app, ["probe", "--help"]).stdout.split())
    assert "Changed here." in help_text and "--json-out" in help_text
    for command in ("matrix", "explore"):
        shown = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout.split())
        assert "Layer of --proj trained (default 0) or of --transformer" in shown, command


def test_declared_names_every_parameter():
    def listed_too_few(text: str, *, mine: Optional[int] = None, **options: Any) -> None: ...

    with pytest.raises(TypeError, match="does not list mine"):
        opts.declared("text", "layer")(listed_too_few)

    def no_options(text: str) -> None: ...

    with pytest.raises(TypeError, match=r"\*\*options"):
        opts.declared("text")(no_options)
    with pytest.raises(KeyError):
        opts.declared("text", "no_such_option")(listed_too_few)


def test_a_new_switch_reaches_the_request_s_command_line_and_explore(monkeypatch):
    """A view's switch declared in option_conflicts.SWITCHES after the others (NEW_SWITCHES) needs
    no line in the command line's writer nor in explore's state: CONTRIBUTING's "Adding a view"."""
    from dataclasses import dataclass

    from attncli.explore import state as explore_state
    from attncli.pipeline import view_request
    from attncli.pipeline.view_request import ViewRequest

    @dataclass
    class WithSwitch(ViewRequest):
        transpose: bool = False

    monkeypatch.setattr(view_request, "NEW_SWITCHES", ("transpose",))
    assert WithSwitch("t", transformer="gpt2", layer=1, transpose=True).command_line() == \
        "attn matrix t --transformer gpt2 --layer 1 --transpose"
    assert "--transpose" not in WithSwitch("t", transformer="gpt2").command_line()
    monkeypatch.setattr(explore_state, "ViewRequest", WithSwitch)
    state = explore_state.ExploreState("t", transformer="gpt2", view_options=(("transpose", True),))
    assert state.view_request().transpose and state.command_line(explain=False).endswith("--transpose")


def test_the_switches_are_declared_with_their_rows():
    """Each switch's flag is built from its declaration beside its conflict rows."""
    from attncli.rules.option_conflicts import SWITCHES

    params = inspect.signature(matrix_cmd).parameters
    for name, help_text in SWITCHES.items():
        info = params[name].annotation.__metadata__[0]
        assert info.help == help_text and "--" + name.replace("_", "-") in (info.default, *info.param_decls)


# --- every shared option declared once --------------------------------------------------------------

# flags that name different options in different commands (each declared once, in its command), with why
ONE_FLAG_SEVERAL_OPTIONS = {
    "--target": "attn matrix's decoder text of an encoder-decoder; the causal tests' measured token",
    "--seed": "the random projection's, the sampler's, the probes', the d_k sweep's, training's",
    "--top-k": "a long view's strongest keys; lookup's kept keys; the sampler's; stats' example contexts",
    "--layer": "a view's layer (default the last); qk's head coordinate (default 0); generate's view",
    "--head": "a view's head (default the mean); qk's head coordinate; generate's view",
    "--rollout": "a view's rollout through layers 0..--layer; generate's through every layer, never with --layer",
    "--window": "the local mask; heads' 'local' distance; word2vec's context",
    "--rows": "a view's rows; lookup's table rows",
    "--explain": "a cell of the matrix; explore's starting cursor; lookup's steps",
    "--heads": "--variant multihead's heads; train-attention's heads per layer",
    "--layers": "--model-view's layers; train-attention's layer count",
    "--precision": "stats' NumPy pass; a stored model's precision",
    "--dict": "lookup's dictionary (or stdin); explore's lookup pane (a file)",
    "--file": "matrix's sentence (or stdin); explore's starting sentence; heads' sentences",
    "--top": "generate's strongest keys per row; qk's parts",
    "--site": "patch's sites; attribute's (key and query too)",
    "--epochs": "word2vec's passes; train-attention's",
    "--name": "train's and import's model name; train-attention's",
    "--workers": "--pairs and stats' worker processes; train's threads",
    "--temperature": "lookup's softmax over the keys (-t); generate's sampling (default 1)",
}


def declarations() -> dict[str, set[int]]:
    """flag -> the declarations (typer.Option objects) that the commands' signatures use for it."""
    import importlib

    from attncli.cli.commands import COMMANDS
    from attncli.cli.common import app as typer_app

    for listed in COMMANDS.values():
        importlib.import_module(listed.module)
    groups = [typer_app] + [info.typer_instance for info in typer_app.registered_groups]
    found: dict[str, set[int]] = {}
    for group in groups:
        for info in group.registered_commands:
            for name, param in inspect.signature(info.callback, eval_str=True).parameters.items():
                meta = getattr(param.annotation, "__metadata__", ())
                option = next((m for m in meta if isinstance(m, typer.models.OptionInfo)), None)
                if option is None:
                    continue
                given = (option.default,) if isinstance(option.default, str) else ()  # Annotated: the first flag
                decls = [d for d in (*given, *(option.param_decls or ())) if d.startswith("--")]
                for flag in decls or ["--" + name.replace("_", "-")]:
                    found.setdefault(flag.split("/")[0], set()).add(id(option))
    return found


def test_every_option_shared_by_commands_is_declared_once():
    """--json, --allow-missing-weights, --transformer, --model, --backend, ...: a flag several commands
    take is one declaration (its help once), unless it names different options (listed with why)."""
    found = declarations()
    assert len(found) > 60
    several = {flag: len(ids) for flag, ids in found.items() if len(ids) > 1 and flag not in ONE_FLAG_SEVERAL_OPTIONS}
    assert several == {}, f"declared more than once: {several}"
    assert {flag for flag in ONE_FLAG_SEVERAL_OPTIONS if len(found.get(flag, ())) < 2} == set()  # still several


def test_the_shared_flags_are_spelled_once_in_the_cli():
    """The source itself: each of the most shared flags appears once in attncli/cli (its declaration)."""
    from pathlib import Path

    import attncli.cli

    import ast

    flags = []
    for path in sorted(Path(attncli.cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "typer.Option":
                flags += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    for flag in ("--json", "--allow-missing-weights", "--model", "--transformer", "--backend", "--device-map",
                 "--max-memory", "--pairs", "--out", "--ray", "--target-id", "--contrast", "--explore", "--stack"):
        assert flags.count(flag) <= 1, flag
    assert flags.count("--json") == 1
