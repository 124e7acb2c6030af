"""Gemma 3's join (hf/packaged_models.py) and what is already at its target, issue 52: the join
renamed its file over whatever $ATTN_HOME/pretrained/gemma-3-270m-q4_k_m.gguf was (a file or a
symlink the user put there, lost). Now a file the stamp does not vouch for is hashed: the stated
file is used as it is (a join stopped before its stamp, or the user's copy), the file of attn's
own earlier join (the sha256 its stamp recorded) is joined over, and anything else stays as it
is (exit 1, named). Fake installed packages as tests/hf/test_packaged_models.py makes them."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from test_packaged_models import GEMMA_FILE, attend, fake_gemma3


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder first on sys.path, for fake installed packages (test_packaged_models' fake_gemma3 fills it)."""
    where = tmp_path / "site"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    return where


@pytest.mark.parametrize("kind", ["file", "symlink", "folder"])
def test_what_the_user_put_at_the_target_is_never_renamed_over(kind, site, tmp_path, attn_home):
    fake_gemma3(site, tmp_path)
    target = attn_home / "pretrained" / GEMMA_FILE
    target.parent.mkdir(parents=True)
    mine = tmp_path / "my-notes.txt"
    mine.write_text("my own file")
    if kind == "file":
        target.write_text("my own file")
    elif kind == "symlink":
        target.symlink_to(mine)
    else:
        target.mkdir()
    before = os.lstat(target)
    result = attend("gemma3")
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "attn does not write over it" in said and GEMMA_FILE in said and "Traceback" not in said, said
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert mine.read_text() == "my own file" and (kind != "file" or target.read_text() == "my own file")
    assert sorted(p.name for p in target.parent.iterdir()) == [GEMMA_FILE]  # no temporary file, no stamp


def test_the_stated_file_already_there_without_its_stamp_is_used_as_it_is(site, tmp_path, attn_home):
    """A join stopped between its rename and its stamp (or the user's own copy of the file)."""
    data = fake_gemma3(site, tmp_path)
    target = attn_home / "pretrained" / GEMMA_FILE
    target.parent.mkdir(parents=True)
    target.write_bytes(data)
    inode = target.stat().st_ino
    result = attend("gemma3")
    assert result.exit_code == 0, result.output
    assert target.stat().st_ino == inode and target.read_bytes() == data  # used, not joined again
    assert json.loads((target.parent / (GEMMA_FILE + ".json")).read_text())["sha256"] == hashlib.sha256(data).hexdigest()


def test_attns_own_earlier_join_is_joined_over_when_the_package_changes(site, tmp_path, attn_home):
    fake_gemma3(site, tmp_path)
    assert attend("gemma3").exit_code == 0
    data = fake_gemma3(site, tmp_path, seed=2)  # a new release: new parts, a new sha256
    result = attend("gemma3")
    assert result.exit_code == 0, result.output
    assert (attn_home / "pretrained" / GEMMA_FILE).read_bytes() == data


def test_a_stamp_that_cannot_be_kept_warns_and_the_joined_file_is_used(site, tmp_path, attn_home):
    """The stamp only spares the next run the check: one that cannot be written (here a folder in its
    place, as a full disk would fail it) warns, the joined file is used, and the next run checks it
    (its sha256) instead of joining again."""
    data = fake_gemma3(site, tmp_path)
    target = attn_home / "pretrained" / GEMMA_FILE
    target.parent.mkdir(parents=True)
    (target.parent / (GEMMA_FILE + ".json")).mkdir()
    first = attend("gemma3")
    assert first.exit_code == 0, first.output
    assert "its stamp could not be kept" in " ".join(first.stderr.split())
    assert target.read_bytes() == data
    inode = target.stat().st_ino
    again = attend("gemma3")
    assert again.exit_code == 0 and "its stamp could not be kept" in " ".join(again.stderr.split())
    assert target.stat().st_ino == inode  # checked, not joined again
    assert sorted(p.name for p in target.parent.iterdir()) == [GEMMA_FILE, GEMMA_FILE + ".json"]
