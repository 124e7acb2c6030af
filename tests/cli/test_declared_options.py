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
    from attncli.option_conflicts import SWITCHES

    params = inspect.signature(matrix_cmd).parameters
    for name, help_text in SWITCHES.items():
        info = params[name].annotation.__metadata__[0]
        assert info.help == help_text and "--" + name.replace("_", "-") in (info.default, *info.param_decls)
