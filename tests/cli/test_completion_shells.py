"""``attn --install-completion SHELL`` / ``--show-completion SHELL``: the word after the flag is the
shell it names. Typer's flags take no value, so the word used to be left for Click after the flag
had installed the script for the shell in use: ``attn --install-completion nosuchshell`` wrote
~/.bashrc and ~/.bash_completions and exited 0. Now an unknown shell is exit 2 and nothing is
written (HOME is a temporary folder, checked empty); a known one gets its own script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def attn(home: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), SHELL="/bin/bash",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("ZDOTDIR", "XDG_CONFIG_HOME", "FORCE_COLOR"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "attncli", *argv], capture_output=True, text=True, env=env,
                          timeout=120)


def written(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


@pytest.mark.parametrize("flag", ["--install-completion", "--show-completion"])
@pytest.mark.parametrize("shell", ["nosuchshell", "matrix", "sh", "\x1b[31mred"])
def test_an_unknown_shell_named_after_the_flag_is_refused_and_nothing_is_written(flag, shell, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = attn(home, flag, shell)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert " ".join(done.stderr.split()) == (
        f"error: {flag}: unknown shell {shell!r}: name one of bash, zsh, fish, powershell, pwsh, or none for "
        "the shell in use")
    assert "\x1b" not in done.stderr
    assert written(home) == []


def test_a_known_shell_named_after_the_flag_gets_its_own_script(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = attn(home, "--install-completion", "zsh")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("zsh completion installed in ")
    files = written(home)
    assert ".zshrc" in files and not any(".bash" in f for f in files), files  # zsh's, not the shell in use's
    shown = attn(home, "--show-completion", "fish")
    assert shown.returncode == 0 and shown.stdout.startswith("complete --command ")
