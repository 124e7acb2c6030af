"""Every file attn's own code names in its docstrings and comments exists: a reader who follows
``tinylm/model.py`` or ``docs/causal.md`` finds it (names that outlived a rename, ``trained.py`` or
``train_attention.py``, sent readers to files that were gone). Paths under attncli/, tests/,
docs/, bench/ and .ci/ must exist in the repository; a bare ``name.py`` must be one of attn's own
modules, benchmarks or tests, or one of transformers' modeling and configuration files the NumPy passes follow."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "attncli"
EXTENSIONS = (".py", ".md", ".json", ".yml", ".toml", ".txt")
PATH = re.compile(r"(?<![\w/.-])((?:attncli|tests|docs|bench|\.ci)/[\w./-]*[\w])")
BARE = re.compile(r"(?<![\w/.-])([A-Za-z_][\w]*\.py)(?![\w/])")
OUTSIDE = re.compile(r"(modeling|configuration|tokenization)_\w+\.py")  # transformers' files
# paths that exist only once attn is installed (the wheel maps data/ into the package)
INSTALLED = {"attncli/data"}


def named_paths(text: str) -> tuple[list[str], list[str]]:
    paths = [m.group(1).rstrip(".") for m in PATH.finditer(text)]
    bare = [m.group(1) for m in BARE.finditer(text)]
    return paths, bare


def missing_names(root: Path) -> list[str]:
    modules = {p.name for folder in (root, root.parent / "bench", root.parent / "tests") for p in folder.rglob("*.py")}
    gone = []
    for source in sorted(root.rglob("*.py")):
        paths, bare = named_paths(source.read_text(encoding="utf-8"))
        where = source.relative_to(root.parent).as_posix()
        for name in paths:
            is_file = name.endswith(EXTENSIONS)
            if name in INSTALLED or not (is_file or "." not in Path(name).name):
                continue  # a module attribute (tests/_chromium.read_png), not a file
            if not (root.parent / name).exists():
                gone.append(f"{where}: {name}")
        for name in bare:
            if name not in modules and not OUTSIDE.fullmatch(name):
                gone.append(f"{where}: {name}")
    return gone


def test_every_file_attn_s_code_names_exists():
    assert missing_names(PACKAGE) == []


def test_the_check_finds_a_name_that_outlived_its_file(tmp_path):
    package = tmp_path / "attncli"
    (package / "tinylm").mkdir(parents=True)
    (package / "tinylm" / "model.py").write_text('"""The model ``train_attention.py`` trains; see docs/gone.md."""\n')
    (tmp_path / "docs").mkdir()
    assert missing_names(package) == ["attncli/tinylm/model.py: docs/gone.md", "attncli/tinylm/model.py: train_attention.py"]
    (tmp_path / "docs" / "gone.md").write_text("here\n")
    (package / "tinylm" / "train_attention.py").write_text("")
    assert missing_names(package) == []
