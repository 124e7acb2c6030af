"""The one place a missing-extra hint is made: the command that installs an extra where this attn
came from. ``pip install 'attncli[gguf]'`` works on no index (attn is not published there), so:

- attn running from a clone (its package folder sits beside the clone's ``pyproject.toml``: an
  editable install, or the folder on PYTHONPATH): ``pip install -e '.[gguf]'`` in the clone's folder;
- attn installed from a wheel: the extra's packages by name, as the installed metadata lists them
  (``pip install 'gguf>=0.10' 'transformers>=4.44' ...``).

Nothing is read until a hint is needed (an error path): importlib.metadata is imported then.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Optional

from attncli.io.fileio import FileProblem, read_text
from attncli.io.textio import visible

TORCH_CPU = "torch's CPU build first: pip install torch --index-url https://download.pytorch.org/whl/cpu"
_CLONE = Path(__file__).resolve().parents[2]  # the clone: above attncli/env/
PROJECT_BYTES = 2**20  # attn's pyproject.toml is about 10 kB


def _clone() -> Optional[Path]:
    """The clone attn runs from: the package's parent folder when it holds attn's pyproject.toml."""
    try:
        text = read_text(_CLONE / "pyproject.toml", PROJECT_BYTES)
    except FileProblem:  # no clone (a wheel's site-packages), or not a regular, bounded UTF-8 file
        return None
    return _CLONE if re.search(r'(?m)^name\s*=\s*"attncli"', text) else None


def _packages(extra: str) -> list[str]:
    """The requirements of ``extra`` as the installed attncli's metadata lists them ([] if none)."""
    from importlib import metadata

    try:
        requires = metadata.distribution("attncli").requires or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    return [r.split(";", 1)[0].strip() for r in requires if ";" in r and marker.search(r.split(";", 1)[1])]


def install_command(extra: str) -> str:
    """The command that installs ``extra`` (a name of pyproject.toml's optional-dependencies) here."""
    clone = _clone()
    if clone is not None:
        return f"pip install -e '.[{extra}]' (in {visible(str(clone))}, the clone attn runs from)"
    packages = _packages(extra)
    if packages:
        return "pip install " + " ".join(shlex.quote(p) for p in packages)
    return f"the packages of attn's {extra!r} extra (see its pyproject.toml)"


def needs(what: str, extra: str, *, torch: bool = False) -> str:
    """"WHAT needs the EXTRA extra: COMMAND", the hint every missing-extra message gives (``torch``:
    the extra brings torch, whose CPU build goes first)."""
    return f"{what} needs the {extra!r} extra: {install_command(extra)}" + (f" ({TORCH_CPU})" if torch else "")
