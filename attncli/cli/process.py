"""``attn`` as a process: streams set up for any locale and terminal, the exit code and the last
flush, and the shell-completion flags checked before they write anything.

``run`` is what ``cli/main.py`` calls; whatever stops the process outside a command (``--help``
on a closed stdout, a failure while parsing, ``--install-completion`` for an unknown shell)
ends here in one line and the right exit code. A command's own errors are the group's
(``cli/common.py``).
"""

import os
import sys
from typing import Any

import typer

from attncli.cli.common import quiet_broken_pipe, environment_message, say
from attncli.errors import AttnError, Stopped


def run(command: Any) -> None:
    """Run the Typer app ``command`` as the ``attn`` process: streams set up for any locale and
    terminal size, and whatever stops it outside a command (``--help``/``--version`` on a full or
    closed stdout, a failure while parsing) reported in one line with the right exit code."""
    _configure_streams()
    if sys.stdout is None:
        say("error: standard output is closed (>&-): attn has nowhere to write its results")
        sys.exit(1)
    before = _stdout_identity()
    try:
        cli = typer.main.get_command(command)
        for param in cli.params:
            if param.name in COMPLETION_FLAGS and param.callback is not None:
                param.callback = _checked_completion(param.callback, COMPLETION_FLAGS[param.name])
        cli.parse_args = _shell_named(cli.parse_args)
        cli()
    except BrokenPipeError:
        quiet_broken_pipe()
    except SystemExit as exc:
        code = exc.code
        # rich's Console.on_broken_pipe (used by every rich view and Typer's --help) points stdout
        # at /dev/null and exits 1; a reader that went away (attn ... | head) is not a failure
        if code == 1 and before is not None:
            devnull = os.stat(os.devnull)
            if _stdout_identity() == (devnull.st_dev, devnull.st_ino) != before:
                code = 0
        _finish(code)
    except (KeyboardInterrupt, Stopped) as exc:
        stopped = Stopped.of(exc)
        say(stopped.message)
        sys.exit(stopped.exit_code)
    except AttnError as exc:  # raised by an option's callback, outside any command
        say(f"error: {exc}")
        _finish(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - raised outside a command (Typer's own parsing, --version)
        message = environment_message(exc)
        if message is None:
            raise
        say(f"error: {message}")
        _finish(1)
    _finish(0)


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
COMPLETION_FLAGS = {"install_completion": "--install-completion", "show_completion": "--show-completion"}
NAMED_SHELL = "attn_completion_shell"  # ctx.meta: the shell named after a completion flag


def _shell_named(parse_args: Any) -> Any:
    """The root command's parse_args, taking the word after --install-completion or
    --show-completion as the shell it names. Typer's flags take no value: the word would be left
    for Click, after the flag's callback had installed the script for the shell in use (bash,
    writing ~/.bashrc for ``attn --install-completion nosuchshell``)."""

    def parse(ctx: Any, args: list[str]) -> Any:
        args = list(args)
        for i, arg in enumerate(args):
            if not arg.startswith("-"):
                break  # a command: what follows is its own
            if arg in COMPLETION_FLAGS.values() and i + 1 < len(args) and not args[i + 1].startswith("-"):
                ctx.meta[NAMED_SHELL] = args.pop(i + 1)
                break
        return parse_args(ctx, args)

    return parse


def _checked_completion(callback: Any, flag: str) -> Any:
    """Typer's --install-completion / --show-completion for the shell named after the flag, else
    the shell in use; refused (exit 2) before anything is written for a shell it has no script
    for, instead of a bare "Shell X is not supported." on stdout."""

    def checked(ctx: Any, param: Any, value: Any) -> Any:
        if value and not ctx.resilient_parsing:
            from typer._completion_shared import _get_shell_name

            named = ctx.meta.get(NAMED_SHELL)
            shell = named if named is not None else value if isinstance(value, str) else _get_shell_name()
            if shell not in COMPLETION_SHELLS:
                if named is not None:
                    say(f"error: {flag}: unknown shell {named[:40]!r}: name one of {', '.join(COMPLETION_SHELLS)}, "
                        "or none for the shell in use")
                else:
                    say(f"error: {flag}: the shell {shell or 'in use'!r} is not supported: run it from "
                        "bash, zsh, fish or PowerShell (--show-completion prints the script)")
                sys.exit(2)
            value = shell if named is not None else value  # Typer's callbacks take a str value as the shell
        return callback(ctx, param, value)

    return checked


def _finish(code: Any) -> None:
    """Flush stdout, then exit with ``code``; a flush that fails (a full disk, a reader gone) is
    reported once (when nothing else failed) and the rest of the output is dropped."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
    except OSError as exc:
        _discard_stdout()
        if code in (0, None):
            say(f"error: cannot write the results: {environment_message(exc)}")
            code = 1
    sys.exit(code)


def _discard_stdout() -> None:
    """Point fd 1 at /dev/null, so the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _stdout_identity() -> tuple[int, int] | None:
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _configure_streams() -> None:
    """Any locale and any terminal size: text a stream's encoding cannot hold is written as
    backslash escapes instead of failing (JSON uses its own escapes, ``json_write``), and a
    COLUMNS or LINES that is not a positive number is ignored (rich would draw into 0 columns)."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        if value is not None and not (value.strip().isdigit() and int(value) > 0):
            del os.environ[name]
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if stream is not None and not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
