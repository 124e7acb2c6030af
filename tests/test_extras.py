"""The missing-extra hint (attncli/env/extras.py): the command that installs an extra where attn came
from, made in one place. ``pip install 'attncli[...]'`` works on no index: no message says it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attncli
from attncli.env import extras

PKG = Path(attncli.__file__).parent


def test_from_a_clone_it_is_an_editable_install_in_the_clone_s_folder(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "attncli"\n', encoding="utf-8")
    monkeypatch.setattr(extras, "_CLONE", tmp_path)
    assert extras.install_command("gguf") == f"pip install -e '.[gguf]' (in {tmp_path}, the clone attn runs from)"
    assert extras.needs("--png (Pillow)", "png").startswith("--png (Pillow) needs the 'png' extra: pip install -e '.[png]'")


def test_from_a_wheel_it_names_the_extra_s_packages(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someone-else"\n', encoding="utf-8")
    monkeypatch.setattr(extras, "_CLONE", tmp_path)  # site-packages: no pyproject of attn's beside the package

    class Installed:
        requires = ["numpy>=1.24", "gguf>=0.10; extra == 'gguf'", "transformers>=4.44; extra == \"gguf\"",
                    "Pillow>=10.1; extra == 'png'", "tokenizers>=0.15; python_version >= '3.9' and extra == 'gguf'"]

    from importlib import metadata

    monkeypatch.setattr(metadata, "distribution", lambda name: Installed)
    assert extras.install_command("gguf") == "pip install 'gguf>=0.10' 'transformers>=4.44' 'tokenizers>=0.15'"
    assert extras.install_command("png") == "pip install 'Pillow>=10.1'"
    Installed.requires = []
    assert "attncli[" not in extras.install_command("png") and "'png' extra" in extras.install_command("png")


def test_this_clone_is_found():
    """The tests run from a clone: the hint names it (pyproject.toml beside the package)."""
    assert extras.install_command("pretrained") == \
        f"pip install -e '.[pretrained]' (in {PKG.parent}, the clone attn runs from)"


def _strings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_message_names_an_extra_of_attncli_by_package(path):
    """Every hint goes through attncli.env.extras: no string of the code says "attncli[...]"."""
    if path.name == "extras.py":
        return  # its docstring says why it exists
    said = [s for s in _strings(ast.parse(path.read_text(encoding="utf-8"))) if "attncli[" in s]
    assert not said, said
