"""What every command shares: the Typer app, the two consoles, JSON output, error handling.

Command modules (``cli/*.py``) import ``app`` from here and register their commands on it; the
app's group (``cli/commands.py``) imports a command's module only when that command runs. Keep
this module light: it is on every command's startup path. Running ``attn`` as a process (streams,
exit codes, the completion flags) is ``cli/process.py``.

The command modules do not use ``from __future__ import annotations``: Typer would then evaluate
every option's annotation string twice (``inspect.signature(eval_str=True)`` and
``get_type_hints``) on every run, about 10 ms of each command's start-up (issue 12).
"""

import contextlib
import json
import os
import sys
from typing import Any, Iterator

import typer

from attncli.io import messages as _messages
from attncli.cli.commands import LazyGroup
from attncli.errors import AttnError, BadInput, Stopped, TooLong
from attncli.io.textio import visible

_FRAMEWORK_EXCEPTIONS: tuple[type[BaseException], ...] = (typer.Exit, typer.Abort)
try:  # typer >= 0.2x raises its own usage errors; older ones are click's
    from typer.exceptions import TyperException

    _FRAMEWORK_EXCEPTIONS += (TyperException,)
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import ClickException

    _FRAMEWORK_EXCEPTIONS += (ClickException,)


# a command to paste: "pip install -e '.[pretrained]'", "pip install torch --index-url URL",
# "python -m nltk.downloader brown" (its words up to a parenthesis, a comma, a semicolon or the end)
_PASTEABLE = r"(?:pip install|python -m)(?: (?!\()[^\s();,]+)+"
_GLUE = "\ue000"  # a private-use character: one cell, and not a space rich would break a line at


def print_error(markup: str) -> None:
    """Print an error (rich markup) on stderr, wrapped to the terminal but never inside a command
    to paste: rich breaks lines at spaces, so the command's spaces are glued while it wraps."""
    import re

    console = err_console()
    glued = re.sub(_PASTEABLE, lambda m: m.group(0).replace(" ", _GLUE), markup)
    if glued == markup:
        console.print(markup, highlight=False)
        return
    with console.capture() as captured:
        console.print(glued, highlight=False)
    console.file.write(captured.get().replace(_GLUE, " "))
    console.file.flush()


class RefusesEmptyPaths:
    """A group whose subcommand is refused when a path option of it is given the empty string (which
    Path() would make '.': --out '' writing into the current folder, --pairs '' named '.'): attn's
    top group and every group under it (attn stats)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)  # type: ignore[misc]
        empty = None if ctx.resilient_parsing or command is None else _empty_path_option(command, rest)
        if empty is not None:
            raise BadInput(f"{empty} is empty: give a path (. for the current folder)")
        return name, command, rest


class _AttnGroup(RefusesEmptyPaths, LazyGroup):
    """Turns the core's AttnError, a signal and a failure of the environment into a one-line
    message and an exit code, never a traceback. Every command registered on ``app`` (today's
    and any added later) runs inside ``invoke``, so it gets this for free."""

    def invoke(self, ctx: Any) -> Any:
        _consoles.pop("quiet", None)  # a command's own choice (quiet_stdout), not the last one's
        try:
            return super().invoke(ctx)
        except AttnError as exc:
            said = exc.shorten() if isinstance(exc, TooLong) and not _has_option(self, ctx, "truncate") else str(exc)
            print_error(f"[bold red]error:[/] {escape(said)}")
            sys.exit(exc.exit_code)
        except _FRAMEWORK_EXCEPTIONS:
            raise
        except (KeyboardInterrupt, Stopped) as exc:
            stopped = Stopped.of(exc)
            say(stopped.message)
            sys.exit(stopped.exit_code)
        except BrokenPipeError:
            quiet_broken_pipe()
        except Exception as exc:  # noqa: BLE001
            message = environment_message(exc)
            if message is not None:
                say(f"error: {message}")
                sys.exit(1)
            if os.environ.get("ATTN_DEBUG"):  # a bug: say so plainly, keep the traceback for ATTN_DEBUG=1
                raise
            err_console().print(
                f"[bold red]internal error:[/] {escape(type(exc).__name__)}: {escape(str(exc))}\n"
                "This is a bug in attn; run again with ATTN_DEBUG=1 for the traceback.",
                highlight=False,
            )
            sys.exit(1)


def _empty_path_option(command: Any, args: list[str]) -> str | None:
    """The first path option of ``command`` that ``args`` (its raw arguments) give as ''."""
    paths = {opt for p in command.params if p.param_type_name == "option" and getattr(p.type, "name", "") == "path"
             for opt in p.opts}
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        flag, eq, value = arg.partition("=")
        if (arg in paths and i + 1 < len(args) and args[i + 1] == "") or (eq and flag in paths and not value):
            return flag
    return None


def _has_option(group: Any, ctx: Any, name: str) -> bool:
    """The command ``ctx`` ran (a subcommand of ``group``) has the option ``name``."""
    command = group.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
    return command is not None and any(p.name == name for p in command.params)


_ERRNO_ADVICE = {
    "ENOSPC": "no space left on the device: free some space and run again",
    "EDQUOT": "the disk quota is used up: free some space and run again",
    "EROFS": "the file system is read-only: set ATTN_HOME to a writable folder",
    "EACCES": "permission denied: set ATTN_HOME to a folder you can write, or fix the permissions",
    "EPERM": "operation not permitted: set ATTN_HOME to a folder you can write, or fix the permissions",
    "EMFILE": "too many open files: raise the limit (ulimit -n) and run again",
    "ENFILE": "too many open files in the system: close some programs and run again",
    "ENOMEM": "out of memory: use smaller inputs or models, or free some memory",
    "EIO": "an input/output error on the device: check the disk",
    "EFBIG": "a file became larger than allowed (ulimit -f): raise the limit",
}


def environment_message(exc: BaseException) -> str | None:
    """One line for a failure of the environment rather than of attn (no space, a read-only or
    forbidden folder, too many open files, no memory, a terminal that cannot show the text), or
    None when ``exc`` is not one. Used by the command group and the entry point alike."""
    import errno

    if isinstance(exc, MemoryError):
        return "out of memory: use smaller inputs or models, or free some memory"
    if isinstance(exc, UnicodeEncodeError):
        return (f"the terminal's encoding ({exc.encoding}) cannot show the text: use a UTF-8 locale "
                "(e.g. LANG=C.UTF-8) or PYTHONIOENCODING=utf-8")
    if isinstance(exc, RecursionError):
        return None
    if isinstance(exc, OSError):
        name = errno.errorcode.get(exc.errno or 0, "")
        what = ""
        if exc.filename is not None:
            what = f" ({exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "") + ")"
        advice = _ERRNO_ADVICE.get(name)
        if advice is not None:
            return f"{advice}{what}"
        return f"{exc.strerror or exc}{what}"
    return None


@contextlib.contextmanager
def resumable(out: Any) -> Iterator[None]:
    """A run writing shards into ``out`` (None: none) that a signal stops says, in its one line,
    that the same command resumes from them."""
    try:
        yield
    except (KeyboardInterrupt, Stopped) as exc:
        stopped = Stopped.of(exc)
        if out is not None:
            stopped.resume = str(out)
        raise stopped from None


def say(line: str) -> None:
    """One plain line on stderr, whatever state the consoles are in."""
    try:
        sys.stderr.write(visible_line(line) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def visible_line(line: str) -> str:
    return visible(line)


def quiet_broken_pipe() -> None:
    """The reader went away (``attn ... | head``): stop quietly, the way coreutils do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)


app = typer.Typer(
    cls=_AttnGroup,
    name="attn",
    help="attn: see how attention works, from word vectors to attention matrices.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
_AttnGroup.source = app  # the group builds a command from what its module registered here

_consoles: dict[str, Any] = {}


def _console(stream: str):
    """The console of ``stream`` ("out" or "err"), made once per COLUMNS value: rich reads COLUMNS
    when a console is made, so a caller that changes it (a test's runner) gets a console of the
    new width, not one made for the old."""
    columns = os.environ.get("COLUMNS")
    made = _consoles.get(stream)
    if made is None or made[0] != columns:
        from rich.console import Console

        made = _consoles[stream] = (columns, Console(stderr=stream == "err"))
    return made[1]


def out_console():
    """The console for results (stdout), or one drawing nowhere after :func:`quiet_stdout`."""
    if "quiet" in _consoles:
        return _consoles["quiet"]
    return _console("out")


def quiet_stdout() -> None:
    """An export writes into stdout (``--svg /dev/stdout``): the results console draws nowhere from
    now on, so the export is all stdout carries (hints and errors stay on stderr)."""
    from io import StringIO

    from rich.console import Console

    _consoles["quiet"] = Console(file=StringIO())


def err_console():
    """The console for progress, warnings and hints (stderr)."""
    return _console("err")


def shown(text: Any) -> str:
    """Data (a key, a value, a word, a query, a model's metadata, a token) made safe to put in a
    rich markup string: control characters escaped visibly (``attncli.io.textio.visible``), then
    rich's markup escaped. Every rich view uses it for everything that came from data; for a
    ``rich.text.Text`` (no markup) use ``visible`` alone. JSON output never goes through it."""
    from rich.markup import escape as _escape

    return _escape(visible(text if isinstance(text, str) else str(text)))


escape = shown  # the older name: messages quote data too, so they get the same treatment


def emit_json(obj: Any, *, lines: bool = False) -> None:
    """Write one JSON document (or one JSON Lines record) to stdout. NaN/Infinity are refused."""
    text = json.dumps(obj, allow_nan=False, ensure_ascii=False, indent=None if lines else 2)
    json_write(text + "\n")
    sys.stdout.flush()


def json_write(text: str) -> None:
    """Write JSON text to stdout exactly: where stdout cannot encode every character (an ASCII
    locale), non-ASCII characters are written as JSON's own \\u escapes, which decode to the
    same text."""
    if not _stdout_is_unicode():
        import re

        text = re.sub(r"[^\x00-\x7f]", lambda m: json.dumps(m.group(0))[1:-1], text)
    sys.stdout.write(text)


def _stdout_is_unicode() -> bool:
    encoding = (getattr(sys.stdout, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
    return encoding.startswith("utf")


def warn(message: str) -> None:
    err_console().print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


def info(message: str) -> None:
    err_console().print(escape(message), highlight=False)


# the core wings' messages (attncli.io.messages) look like the CLI's own
_messages.install(warn=warn, info=info)
