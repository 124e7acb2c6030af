"""Every ``attn`` command by name, and the group that imports a command's module only when it runs.

``attn lookup`` should not pay for ``attn matrix``'s imports, nor ``attn matrix`` for
``attn stats``'s: a command module imports what it needs at the top of the file, so the group
loads a module only when its command is about to run (or its ``--help`` is asked for). The
table below knows each command's module and its help's first paragraph, enough for
``attn --help`` and shell completion of the command names without importing any of them.

A new command: register it on ``app`` in its module (``cli/*.py``) and add a row here, in
``--help``'s order; tests/cli/test_lazy_commands.py checks that the row's help is the command's own.
"""

import copy
import importlib
from difflib import get_close_matches
from typing import Any, NamedTuple

import typer.main
from typer.core import TyperCommand, TyperGroup

from attncli.rules import limits


class Listed(NamedTuple):
    module: str  # the module that registers the command on ``app``
    help: str  # the first paragraph of the command's help, as ``attn --help`` lists it


COMMANDS: dict[str, Listed] = {
    # the main job first (looking a key up by attention, a sentence's attention), then the model views,
    # the causal tools, the teaching commands, and last the word vectors and the small LM they train
    "lookup": Listed("attncli.cli.lookup", "Look a key up in a dictionary by attention: softmax over the similarity "
                                           "of the query to every key."),
    "matrix": Listed("attncli.cli.matrix",
                     "Attention matrix of a sentence as a heatmap: rows are queries, columns keys."),
    "explore": Listed("attncli.cli.explore", "Explore attention interactively: the matrix of `attn matrix`, with "
                                             "keys for every setting."),
    "compare": Listed("attncli.cli.compare", "Two attention matrices side by side and their difference B - A (PuOr: "
                                             "purple = A more, orange = B more)."),
    "generate": Listed("attncli.cli.generate",
                       "Let a causal language model continue PROMPT and watch what each new token attends to."),
    "lens": Listed("attncli.cli.lens",
                   "The logit lens: what a decoder would predict next if it stopped after each layer."),
    "ablate": Listed("attncli.cli.causal", "Knock each head out and see how the prediction moves: layers x heads."),
    "patch": Listed("attncli.cli.causal", "Copy clean activations into the corrupted run: the fraction of the logit "
                                          "difference restored."),
    "attribute": Listed("attncli.cli.attribute", "Estimate every cell of attn patch's grid from one forward and one "
                                                 "backward pass (attribution patching)."),
    "circuit": Listed("attncli.cli.circuit", "Score every edge between components (EAP / EAP-IG) and find the "
                                             "smallest circuit that keeps the metric."),
    "sinks": Listed("attncli.cli.sinks", "Attention sinks and massive activations: the residual channels far above "
                                         "the rest, their layer and tokens."),
    "dla": Listed("attncli.cli.causal",
                  "Direct logit attribution: each head's and MLP's direct part of the target's logit."),
    "qk": Listed("attncli.cli.qk",
                 "Why a head attends from token I to token J: its score split into query-side x key-side parts."),
    "stats": Listed("attncli.cli.stats",
                    "Head statistics over a corpus (attn stats CORPUS; attn stats merge DIR...)."),
    "variants": Listed("attncli.cli.matrix", "The attention variants of 'attn matrix --variant': formula and source."),
    "demo": Listed("attncli.cli.matrix", "The seed's worked example of attention, step by step (four words, seed 42)."),
    "scale": Listed("attncli.cli.matrix",
                    "Why scaled dot-product attention divides by sqrt(d_k): softmax saturation, side by side."),
    "train": Listed("attncli.cli.vectors",
                    "Train word vectors on the Brown corpus (or --corpus FILE) and store them as a model."),
    "models": Listed("attncli.cli.vectors",
                     "List the stored models and the built-in default, with their evaluation figures."),
    "eval": Listed("attncli.cli.vectors",
                   "Evaluate a model on WordSim-353, SimLex-999 and the analogy questions gensim ships."),
    "similar": Listed("attncli.cli.vectors",
                      "Nearest neighbours by cosine similarity (like word2vec's distance / fastText's nn)."),
    "import": Listed("attncli.cli.importing",
                     "Import pretrained word vectors (GloVe, word2vec, fastText) as an attn model."),
    "train-attention": Listed("attncli.cli.lm", "Train a small causal transformer LM on Brown over frozen word "
                                                "vectors; store its attention."),
    "heads": Listed("attncli.cli.lm",
                    "Score each learned head as previous-token, first-token, self, local or broad (entropy)."),
}


def prose(doc: str | None) -> str | None:
    """A docstring as help text: paragraphs kept, the line breaks inside each one dropped, so the
    help wraps to the terminal (a docstring's lines are broken at about 100 columns)."""
    import inspect

    if not doc:
        return doc
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines() if line.strip()) for p in paragraphs)


# the commands that refuse to run without --transformer (option_conflicts' rows of paths gradients, qk
# and stats that refuse "no --transformer" alone): --help marks it required
MODEL_REQUIRED = ("attribute", "circuit", "qk", "run")


def unwrapped(command: Any) -> Any:
    """``command`` with its help (and a group's commands' help) as :func:`prose`, and every
    integer option held to its range (:func:`bounded`)."""
    command.help = prose(command.help)
    bounded(command.params)
    if command.name in MODEL_REQUIRED:
        required_in_help(command, "transformer")
    for sub in getattr(command, "commands", {}).values():
        unwrapped(sub)
    return command


def required_in_help(command: Any, name: str) -> None:
    """``--help`` marks option ``name`` of ``command`` required. Only the help: a run without it is
    refused by the command's own check, whose message says what to give (Click's would only name it)."""
    show = command.format_help

    def format_help(ctx: Any, formatter: Any) -> None:
        params = [p for p in command.params if p.name == name and not p.required]
        for p in params:
            p.required = True
        try:
            show(ctx, formatter)
        finally:
            for p in params:
                p.required = False

    command.format_help = format_help


def bounded(params: list) -> None:
    """Every integer option of ``params`` refuses a value outside ``limits.option_range`` (its own
    min/max inside attn's ranges: attncli/rules/limits.py), at any magnitude, with one line (exit 2)
    before Click converts it. Its help is unchanged."""
    for param in params:
        kind = param.type
        if type(kind).__name__ not in ("IntParamType", "IntRange") or getattr(kind, "attn_range", None) is not None:
            continue
        name = max(param.opts, key=len)
        lo, hi = limits.option_range(name, getattr(kind, "min", None), getattr(kind, "max", None))
        held = copy.copy(kind)
        held.attn_range = (lo, hi)
        held.convert = _converter(kind.convert, name, lo, hi)
        param.type = held


def _converter(convert: Any, name: str, lo: int, hi: int) -> Any:
    def checked(value: Any, param: Any, ctx: Any) -> Any:
        if value is None or isinstance(value, bool):
            return convert(value, param, ctx)
        return limits.whole_number(name, value, lo, hi)

    return checked


class LazyGroup(TyperGroup):
    """A Typer group whose commands are the table above: each one's module is imported, and its
    command built from what it registered on ``source`` (the Typer app), the first time the
    command is looked up to run. Listing them (``attn --help``, completing a command's name)
    imports nothing."""

    source: Any = None  # the typer.Typer the command modules register on (cli/common.py sets it)
    _listing = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        bounded(self.params)  # the root's --threads
        for command in self.commands.values():  # those whose modules were imported before (a test's)
            unwrapped(command)

    def parse_args(self, ctx: Any, args: list[str]) -> Any:
        """The root's options may follow the command (``attn matrix TEXT --threads 2``): moved before it,
        unless the command has an option of that name itself (``attn train-attention --threads``)."""
        if ctx.parent is None:
            args = self._root_options_first(ctx, list(args))
        return super().parse_args(ctx, args)

    def _root_options_first(self, ctx: Any, args: list[str]) -> list[str]:
        valued = {opt for p in self.params if p.param_type_name == "option" and not p.is_flag for opt in p.opts}
        at = 0
        while at < len(args) and args[at].startswith("-") and args[at] != "--":  # the root's own, before the command
            at += 2 if args[at] in valued else 1
        if at >= len(args) or args[at] not in COMMANDS:
            return args
        command = self.get_command(ctx, args[at])
        own = {opt for c in (command, *getattr(command, "commands", {}).values()) for p in c.params for opt in p.opts}
        before, after, i = args[:at], [], at
        while i < len(args):
            name = args[i].split("=", 1)[0]
            if args[i] == "--":
                after += args[i:]
                break
            if name in valued and name not in own:
                width = 1 if "=" in args[i] else 2
                before += args[i:i + width]
                i += width
                continue
            after.append(args[i])
            i += 1
        return before + after

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS) + [name for name in super().list_commands(ctx) if name not in COMMANDS]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """Typer's own, plus a suggestion for a mistyped command ("did you mean 'lookup'?"): Typer
        looks for close names among the commands already built, which here are none."""
        try:
            return super().resolve_command(ctx, args)
        except Exception as e:  # typer's own usage error (typer >= 0.2x vendors click) or click's
            if args and isinstance(getattr(e, "message", None), str) and e.message.startswith("No such command") \
                    and "Did you mean" not in e.message:
                matches = get_close_matches(args[0], self.list_commands(ctx))
                if matches:
                    e.message = f"{e.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        listed = COMMANDS.get(cmd_name)
        if command is not None or listed is None:
            return command
        if self._listing:
            return TyperCommand(cmd_name, help=listed.help)  # a stand-in: its name and help, never run
        importlib.import_module(listed.module)
        command = self._built(cmd_name)
        if command is not None:
            self.commands[cmd_name] = unwrapped(command)
        return command

    def _built(self, name: str) -> Any:
        """The click command ``name`` from what its module registered on ``source``."""
        app = self.source
        for info in app.registered_commands:
            if (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
                return typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                        rich_markup_mode=app.rich_markup_mode)
        for info in app.registered_groups:
            if info.name == name:
                return typer.main.get_group_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                      rich_markup_mode=app.rich_markup_mode,
                                                      suggest_commands=app.suggest_commands)
        return None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: Any, incomplete: str) -> Any:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False
