"""Ctrl-C (and SIGTERM, SIGHUP) at any moment of start-up: one line and 128 + the signal's number,
never a traceback from attn's code.

attncli/cli/entry.py puts a handler on the three signals in its first lines, through the built-in
``_signal`` module, before any other import; ``main`` then installs attncli.cli.signals' handlers
(tests/end_to_end/test_environment.py checks those, delivered on cue). What comes before the entry module's
first line is the interpreter's own: its start-up (``site`` and the ``.pth`` files of the
environment) and the search of ``sys.path`` for the ``attncli`` package. A signal there ends
Python before any attn code runs (killed by the signal, or CPython's own start-up failure,
"init_import_site" or "Could not import runpy module"): those outcomes are named below, and none
may show a frame of attn's files.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attncli.cli import entry
from attncli.errors import Stopped

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = "import sys; from attncli.cli.entry import main; sys.argv[0] = 'attn'; sys.exit(main())"  # as pip writes it
ATTN_FRAME = re.compile(r'File "[^"]*attncli[/\\]')
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("FORCE_COLOR", None)
    return env


def default_signals() -> None:
    for signum in SIGNALS:  # a CI runner may ignore SIGHUP: the child gets the default dispositions
        signal.signal(signum, signal.SIG_DFL)


def test_the_entry_module_installs_its_handlers_before_any_other_import():
    tree = ast.parse((REPO / "attncli" / "cli" / "entry.py").read_text(encoding="utf-8"))
    before = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value) == "_install_early()":
            break
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            before.append(ast.unparse(node))
    else:
        pytest.fail("entry.py never calls _install_early() at module level")
    assert before == ["import _signal"]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_the_early_handler_says_what_the_cli_says(signum):
    assert entry.EARLY_LINES[int(signum)] == Stopped(signum).message


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_right_after_the_entry_module_is_imported_is_one_line(signum):
    """The signal arrives after ``import attncli.cli.entry`` and before ``main`` (which would
    install the CLI's own handlers): the early handler's line and code, nothing else."""
    code = (f"import os, time; import attncli.cli.entry; os.kill(os.getpid(), {int(signum)}); time.sleep(30); "
            "print('not stopped')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=child_env(), preexec_fn=default_signals)
    assert (done.returncode, done.stdout, done.stderr) == (128 + signum, "", Stopped(signum).message + "\n")


def outcome(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["launcher", "python -m"])
def test_ctrl_c_at_any_moment_of_start_up_shows_no_attn_traceback(how):
    argv = [sys.executable] + (["-c", LAUNCHER] if how == "launcher" else ["-m", "attncli"]) + ["variants"]
    seen: dict[str, int] = {}
    for delay_ms in [0, 2, 5, 10, 15, 20, 30, 40, 60, 80, 120, 200, 300] * 2:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=child_env(), preexec_fn=default_signals)
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGINT)
        code, err = outcome(proc)
        where = f"SIGINT after {delay_ms} ms: exit {code}\n{err}"
        assert not ATTN_FRAME.search(err), where  # never a traceback through attn's own files
        if code == 130:
            assert err == "interrupted\n", where
            kind = "attn's handler"
        elif code == 0:
            kind = "finished first"
        elif code == -signal.SIGINT:  # before attn's first line: Python's default handler, or none yet
            kind = "before attn"
        else:  # CPython's own start-up failing ("init_import_site", "Could not import runpy module")
            assert code == 1 and err.rstrip().endswith("\nKeyboardInterrupt"), where
            kind = "before attn"
        seen[kind] = seen.get(kind, 0) + 1
    assert seen.get("attn's handler", 0) >= 1, seen  # the window this test is about was reached


def test_a_signal_whose_handler_runs_inside_a_finalizer_is_delivered_again():
    """Python runs a signal handler at the next safe point, which may be inside a ``__del__`` or a
    weakref callback (the import system's module locks have one): the Stopped raised there cannot
    propagate. It was printed as "Exception ignored in ..." with a traceback and lost (attn went on
    and exited 0, seen once in four runs of the test above); it is now sent again and stops the
    process from the code that follows."""
    code = """
import os, signal
from attncli.cli import signals
from attncli.errors import Stopped
signals.install()

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):  # the handler runs here, inside __del__
            pass

try:
    item = Finalized()
    del item
    for _ in range(10**6):
        pass
    print("not stopped")
except Stopped as stop:
    print("stopped", stop.signum)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env(),
                          preexec_fn=default_signals)
    assert (done.returncode, done.stdout, done.stderr) == (0, "stopped 2\n", "")


def test_python_m_holds_a_signal_that_comes_while_the_entry_module_is_found():
    """On cue instead of on a timer: a finder on sys.meta_path sends SIGINT while ``python -m attncli``
    looks for attncli.cli.entry (the import search that precedes the entry module's first line).
    Held until the entry module's handlers are in place, it ends attn with its one line."""
    code = """
import os, runpy, signal, sys

class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "attncli.cli.entry":
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10000):  # Python's own handler would raise KeyboardInterrupt here
                pass
        return None

sys.meta_path.insert(0, Interrupting())
sys.argv = ["attn", "variants"]
runpy.run_module("attncli", run_name="__main__", alter_sys=True)
print("not stopped")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env(),
                          preexec_fn=default_signals)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "interrupted\n")
