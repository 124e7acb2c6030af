"""Tests that kill the mutants the second sampled run of ``.ci/mutation vectors-store`` left alive
(``--sample 120 --seed 1``; docs/mutation.md (its git history), "Second sample (seed 1)").

Continues tests/test_mutation_kills_vectors_store.py: each checks a behaviour the store documents
(its docstrings, its messages, the README's "Where things live") on real files under a temporary
ATTN_HOME; faults (a busy file, a link moved away mid-scan) are injected only at the OS calls.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _lookup_fixtures import WORDS, save_plain
from attncli import paths
from attncli.vectors import store, versions
from attncli.vectors.model import load_vectors
from test_mutation_kills_vectors_store import assert_meta_refused, edit_meta

# the mutants the second sampled run left alive: docs/mutation.md (its git history), "Second sample"


def aged(path: Path, seconds: float = 2 * 3600) -> None:
    """Set ``path``'s own mtime (a link's, not its target's) ``seconds`` in the past."""
    import time

    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def dead_pid() -> int:
    """The pid of a process that has exited (a writer killed mid-write)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_file_that_cannot_be_removed_keeps_only_itself_when_the_sweep_clears_a_killed_write(monkeypatch):
    """The sweep removes what it can: one busy file neither stops the rest of a dead writer's partial
    version nor of a stale unreferenced version from being reclaimed (the first file removed in
    each directory fails, whichever the listing gives first)."""
    save_plain("m")
    root = paths.models_dir() / ".versions"
    partial = root / f"gone-0123456789ab.{dead_pid()}.partial"
    stale = root / "gone-0123456789cd"  # a finished version no name refers to, older than an hour
    for top in (partial, stale):
        top.mkdir()
        for f in ("a.npy", "b.npy", "c.npy"):
            (top / f).write_bytes(b"x")
    aged(stale)
    real_unlink = os.unlink
    failed_in: set = set()

    def busy_once_per_directory(path, *, dir_fd=None):
        where = os.fstat(dir_fd).st_ino if dir_fd is not None else os.path.dirname(os.path.abspath(path))
        if where not in failed_in:
            failed_in.add(where)
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", busy_once_per_directory)
    versions.sweep_stale()
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert len(failed_in) == 2
    assert len(list(partial.iterdir())) == 1 and len(list(stale.iterdir())) == 1
    assert load_vectors("m").words == list(WORDS)  # the model in use is never touched


def test_stale_temporary_links_are_swept_and_a_fresh_one_is_kept():
    """A killed write leaves ``models/.NAME.link-ID``: swept once older than an hour; a younger one
    may be a live writer's, about to be swapped in."""
    save_plain("m")
    root = paths.models_dir()
    target = os.readlink(root / "m")
    old_link, young_link = root / ".m.link-0123456789ab", root / ".m.link-0123456789cd"
    old_link.symlink_to(target)
    young_link.symlink_to(target)
    aged(old_link)
    not_a_link = root / ".m.link-0123456789ef"  # not the store's: left alone
    not_a_link.write_text("", encoding="utf-8")
    aged(not_a_link)
    versions.sweep_stale()
    assert not old_link.is_symlink() and young_link.is_symlink() and not_a_link.is_file()
    assert load_vectors("m").words == list(WORDS)


def test_a_link_that_vanishes_while_the_sweep_lists_names_does_not_hide_the_other_names(monkeypatch):
    """A concurrent writer's ``os.replace`` moves its temporary link away between realpath's lstat
    and readlink (FileNotFoundError): the names listed after it still protect their versions, old
    as they are, from the sweep."""
    save_plain("m1")
    save_plain("m2", seed=1)
    root = paths.models_dir()
    for name in ("m1", "m2"):
        aged(root / os.readlink(root / name))
    (root / ".w.link-0123456789ab").symlink_to(os.path.join(".versions", "w-0123456789ab"))
    real_scandir, real_realpath = os.scandir, os.path.realpath

    def listed_hidden_first(path="."):  # a listing order the file system may give: sorted, "." first
        if not isinstance(path, int) and os.fspath(path) == os.fspath(root):  # (rmtree lists by fd)
            return sorted(real_scandir(path), key=lambda e: e.name)
        return real_scandir(path)

    def vanishing(path, *args, **kwargs):
        if os.path.basename(os.fspath(path)).startswith(".w.link-"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
        return real_realpath(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", listed_hidden_first)
    monkeypatch.setattr(os.path, "realpath", vanishing)
    versions.sweep_stale()
    monkeypatch.setattr(os, "scandir", real_scandir)
    monkeypatch.setattr(os.path, "realpath", real_realpath)
    assert load_vectors("m1").words == list(WORDS) and load_vectors("m2").words == list(WORDS)


@pytest.mark.parametrize("change", [
    {"dim": 1}, {"dim": 65_536},  # the documented range [1, 65,536], both ends
    {"vocab_size": 0}, {"vocab_size": 2**31},  # [0, 2,147,483,648]
    {"subword": {"min_n": 64, "max_n": 64, "bucket": 2**31}},  # [1, 64] and [1, 2,147,483,648]
    {"subword": {"min_n": 1, "max_n": 1, "bucket": 1}},
])
def test_meta_json_values_at_both_ends_of_their_ranges_are_accepted(change):
    save_plain("m")
    edit_meta("m", lambda meta: meta.update(change))
    meta = store.read_meta(store.model_dir("m"))
    assert {k: meta[k] for k in change} == change


@pytest.mark.parametrize("change, problem", [
    ({"dim": 0}, "dim is 0, not a whole number in [1, 65,536]"),
    ({"dim": 65_537}, "dim is 65537, not a whole number in [1, 65,536]"),
    ({"vocab_size": -1}, "vocab_size is -1, not a whole number in [0, 2,147,483,648]"),
    ({"vocab_size": 2**31 + 1}, "vocab_size is 2147483649, not a whole number in [0, 2,147,483,648]"),
    ({"subword": {"min_n": 3, "max_n": 65, "bucket": 10}}, "subword.max_n is 65, not a whole number in [1, 64]"),
    ({"subword": {"min_n": 0, "max_n": 3, "bucket": 10}}, "subword.min_n is 0, not a whole number in [1, 64]"),
    ({"subword": {"min_n": 3, "max_n": 6, "bucket": 2**31 + 1}},
     "subword.bucket is 2147483649, not a whole number in [1, 2,147,483,648]"),
])
def test_meta_json_values_just_outside_their_ranges_are_refused_with_the_range(change, problem):
    assert_meta_refused(change, problem)


@pytest.mark.parametrize("word", ["two\nlines", "carriage\rreturn", ""])
def test_a_word_that_would_break_vocab_txt_is_refused_before_anything_is_written(word):
    save_plain("m")
    old = (paths.models_dir() / "m").resolve()
    with pytest.raises(ValueError, match="^words must be non-empty and free of line breaks$"):
        store.save_vectors("m", ["fine", word], [[1.0], [2.0]])
    assert (paths.models_dir() / "m").resolve() == old and load_vectors("m").words == list(WORDS)


def test_the_stores_own_fields_win_over_the_callers_metadata():
    """``meta`` adds fields; name, format, format_version, dim, vocab_size, dtype and subword come
    from the data written (a copied meta.json of another model cannot mislabel this one)."""
    import numpy as np

    stale = {"name": "other", "format": "x", "format_version": 2, "dim": 999, "vocab_size": 0, "dtype": "int8",
             "subword": {"min_n": 1, "max_n": 2, "bucket": 3}, "note": "kept"}
    store.save_vectors("m", ["a", "b", "c"], np.ones((3, 2), dtype=np.float32), meta=stale, dtype="float16")
    meta = store.read_meta(store.model_dir("m"))
    assert {k: meta[k] for k in stale} == {"name": "m", "format": "attn-vectors", "format_version": 1, "dim": 2,
                                           "vocab_size": 3, "dtype": "float16", "subword": None, "note": "kept"}
    assert load_vectors("m").words == ["a", "b", "c"]


def test_meta_json_is_indented_utf8_a_person_can_read():
    import numpy as np

    store.save_vectors("m", ["a"], np.ones((1, 2), dtype=np.float32), meta={"corpus_label": "Café crème"})
    text = (paths.models_dir() / "m" / "meta.json").read_bytes().decode("utf-8")
    assert text.startswith('{\n  "corpus_label": "Café crème",\n  "format": "attn-vectors",\n')
    assert '\n  "subword": null\n}\n' in text and text.endswith("}\n")


def test_vocab_txt_and_meta_json_are_utf8_whatever_the_locale():
    """vocab.txt and meta.json are UTF-8 (the module docstring) even when attn runs under a locale
    that is not: here the C locale with Python's UTF-8 mode off, whose encoding is ASCII."""
    words = ["café", "naïve", "Ωmega"]
    code = ("import numpy as np\nfrom attncli.vectors import store\n"  # the words \u-escaped: argv is ASCII too
            f"store.save_vectors('m', {ascii(words)}, np.ones((3, 2), dtype=np.float32), "
            f"meta={{'corpus_label': {ascii('Café crème')}}})\n")
    package_root = str(Path(store.__file__).resolve().parents[2])
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONPATH=package_root)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, encoding="utf-8")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (paths.models_dir() / "m" / "vocab.txt").read_bytes() == "café\nnaïve\nΩmega\n".encode("utf-8")
    assert '"corpus_label": "Café crème"' in (paths.models_dir() / "m" / "meta.json").read_bytes().decode("utf-8")
    assert load_vectors("m").words == words


def test_a_finished_version_no_name_uses_is_swept_only_once_an_hour_old():
    """sweep_stale's promise: an unreferenced version younger than an hour may be a concurrent
    writer's, about to be linked, and is kept; an older one is what a killed write left: removed."""
    import shutil

    save_plain("m")
    in_use = Path(os.path.realpath(paths.models_dir() / "m"))
    young, old = in_use.parent / "m-0123456789ab", in_use.parent / "m-0123456789cd"
    for copy in (young, old):
        shutil.copytree(in_use, copy)
    aged(old)
    versions.sweep_stale()
    assert young.is_dir() and not old.exists() and in_use.is_dir()
    assert load_vectors("m").words == list(WORDS)


def test_a_dangling_meta_json_link_is_named_as_what_it_is_not_as_missing():
    """meta.json as a link to nothing exists as a name: the message gives the reader's problem with
    it, not "it has no meta.json" (that is for a model directory without the name)."""
    save_plain("m")
    meta = store.model_dir("m") / "meta.json"
    meta.unlink()
    meta.symlink_to(meta.parent / "gone.json")
    with pytest.raises(store.CorruptModel) as info:
        store.read_meta(store.model_dir("m"))
    assert str(info.value).startswith(f"model 'm' at {paths.models_dir() / 'm'} is damaged (meta.json: ")
    assert "has no meta.json" not in str(info.value)
