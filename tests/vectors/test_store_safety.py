"""The store never deletes or follows outside itself, readers see one version, and stale partial
versions are swept (issue 15, classes 1, 2 and 7's sweep). Real files and links under a temp
ATTN_HOME; a directory outside the store holds a sentinel that must survive."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from _attention_fixtures import SENTENCES, make_random_attention, random_config
from _lookup_fixtures import WORDS, save_plain
from attncli.env import paths
from attncli.tinylm import checkpoint, model as trained
from attncli.tinylm import train as train_attention
from attncli.vectors import safeio, store
from attncli.vectors.model import load_vectors


def outside_copy_of(name: str, tmp_path) -> "os.PathLike":
    """A copy of model ``name`` in a directory outside the store, with a sentinel file."""
    outside = tmp_path / "outside" / "precious"
    shutil.copytree(store.model_dir(name), outside)
    (outside / "SENTINEL").write_text("keep me", encoding="utf-8")
    return outside


def point(name: str, target) -> None:
    link = paths.models_dir() / name
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def test_retraining_a_name_linked_outside_the_store_leaves_the_target(tmp_path, capsys):
    save_plain("src")
    outside = outside_copy_of("src", tmp_path)
    point("mine", outside)
    assert load_vectors("mine").words == list(WORDS)  # reading through the link works
    save_plain("mine", seed=1)
    assert (outside / "SENTINEL").read_text(encoding="utf-8") == "keep me"
    assert (outside / "vectors.npy").is_file()
    assert store.store_version(paths.models_dir() / "mine") is not None  # now a store version
    assert "did not create" in capsys.readouterr().err


def test_a_relative_link_climbing_out_of_versions_is_not_removed(tmp_path):
    save_plain("src")
    outside = outside_copy_of("src", tmp_path)
    rel = os.path.relpath(outside, paths.models_dir() / ".versions")
    point("sneaky", os.path.join(".versions", rel))  # .versions/../../.. -> outside
    save_plain("sneaky", seed=2)
    store.delete_model("sneaky")
    assert (outside / "SENTINEL").is_file() and (outside / "vectors.npy").is_file()


def test_a_version_name_that_is_itself_a_link_outside_is_not_removed(tmp_path):
    save_plain("src")
    outside = outside_copy_of("src", tmp_path)
    fake = paths.models_dir() / ".versions" / "fake-0123456789ab"
    fake.symlink_to(outside)
    point("fake", os.path.join(".versions", fake.name))
    save_plain("fake", seed=3)
    assert (outside / "SENTINEL").is_file()
    assert fake.is_symlink()  # left alone, not followed


def test_two_names_on_one_version_keep_it_until_both_are_gone():
    save_plain("a")
    version = os.readlink(paths.models_dir() / "a")
    point("b", version)
    before = np.array(load_vectors("b").vectors)
    save_plain("a", seed=4)  # retrain a: b still refers to the old version
    np.testing.assert_array_equal(np.asarray(load_vectors("b").vectors), before)
    assert not np.array_equal(np.asarray(load_vectors("a").vectors), before)
    old = paths.models_dir() / version
    assert old.is_dir()
    store.delete_model("b")  # the last name: now it goes
    assert not old.exists()
    assert load_vectors("a").words == list(WORDS)


def test_train_attention_writing_back_follows_the_same_rule(tmp_path):
    make_random_attention("tiny")
    outside = outside_copy_of("tiny", tmp_path)
    point("tiny", outside)
    config = random_config(16, 1, 2, 12)
    rng = np.random.default_rng(0)
    weights = {k: rng.normal(size=s).astype(np.float32) for k, s in checkpoint.expected_shapes(config).items()}
    src = store.model_dir("tiny")
    train_attention.save("tiny", src, config, weights, [f"w{i}" for i in range(12)], SENTENCES,
                         dict(store.read_meta(src), attention={"perplexity": 1.0}))
    assert (outside / "SENTINEL").is_file() and (outside / "attention" / "weights.npz").is_file()
    assert trained.load_trained("tiny").layers == 1


def test_a_special_file_in_the_source_of_a_copy_is_damage_not_a_hang(tmp_path):
    make_random_attention("tiny")
    src = store.model_dir("tiny")
    fifo = src / "attention" / "heldout.txt"
    fifo.unlink()
    os.mkfifo(fifo)
    with pytest.raises(store.CorruptModel, match="not a regular file"):
        store.update_meta("tiny", note="x")
    assert not any(p.name.endswith(".partial") for p in (paths.models_dir() / ".versions").iterdir())


# -- 2. one version per load ---------------------------------------------------------------------


@pytest.mark.parametrize("hook", ["read_meta", "load_npy"])
def test_a_retrain_in_the_middle_of_a_load_gives_one_whole_version(monkeypatch, hook):
    save_plain("race", words=WORDS)
    bigger = list(WORDS) + ["extra", "words", "here"]
    module, attr = (store, "read_meta") if hook == "read_meta" else (safeio, "load_npy")
    original = getattr(module, attr)
    fired = []

    def racing(*args, **kw):
        if not fired:
            fired.append(1)
            save_plain("race", seed=5, words=bigger)  # swaps the link and removes the old version
        return original(*args, **kw)

    monkeypatch.setattr(module, attr, racing)
    vec = load_vectors("race")
    assert fired
    assert len(vec.words) == vec.vectors.shape[0]  # never a mix ("inconsistent ... retrain it")
    assert vec.words in (list(WORDS), bigger)


def test_trained_attention_reads_its_vectors_from_its_own_version(monkeypatch):
    make_random_attention("tiny")
    att = trained.load_trained("tiny")
    # a retrain swaps the link after the attention was loaded: the attention's vectors still
    # come from its own version (same checksum), never from the new one
    keep = att.directory.parent
    save_plain("tiny", seed=9, words=list(WORDS))
    assert att.vectors.path == keep
    assert att.vectors.dim == att.d_model
    assert att.attention(["the", "cat"], 0).shape == (4, 2, 2)


# -- 7. stale partial versions are swept -----------------------------------------------------------


def test_a_later_write_sweeps_partials_of_dead_processes():
    save_plain("a")
    versions = paths.models_dir() / ".versions"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = versions / f"a-0123456789ab.{dead_pid}.partial"
    stale.mkdir()
    (stale / "vectors.npy").write_bytes(b"x" * 100)
    alive = versions / f"a-ba9876543210.{os.getpid()}.partial"  # a write in progress: untouched
    alive.mkdir()
    save_plain("b")
    assert not stale.exists()
    assert alive.exists()


def test_an_old_unreferenced_version_is_swept_a_referenced_one_is_not():
    save_plain("a")
    versions = paths.models_dir() / ".versions"
    orphan = versions / "gone-00000000beef"
    orphan.mkdir()
    old = 1_000_000_000
    os.utime(orphan, (old, old))
    live = paths.models_dir() / os.readlink(paths.models_dir() / "a")
    os.utime(live, (old, old))
    save_plain("b")
    assert not orphan.exists()
    assert live.is_dir() and load_vectors("a").words == list(WORDS)
