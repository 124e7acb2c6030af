"""Tests that kill the mutants ``.ci/mutation vectors-store`` left alive (docs/mutation.md, issue 24).

Each checks a behaviour the store documents (its module docstrings, its messages) on real files
under a temporary ATTN_HOME: the message a person reads, the file that must change or must stay.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _lookup_fixtures import WORDS, save_plain
from attncli import paths
from attncli.errors import BadInput, RuntimeFailure
from attncli.vectors import store, versions
from attncli.vectors.model import load_vectors


def edit_meta(name: str, change) -> None:
    """Rewrite model ``name``'s meta.json in place with ``change(meta)`` applied."""
    path = store.model_dir(name) / "meta.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    change(meta)
    path.write_text(json.dumps(meta), encoding="utf-8")


# ---------------------------------------------------------------- update_meta


def test_update_meta_changes_the_field_and_keeps_the_rest():
    save_plain("m")
    before = store.read_meta(store.model_dir("m"))
    store.update_meta("m", note="re-labelled", corpus_label="brown")
    after = json.loads((store.model_dir("m") / "meta.json").read_text(encoding="utf-8"))
    assert after == dict(before, note="re-labelled", corpus_label="brown")
    assert load_vectors("m").words == list(WORDS)  # the arrays came along into the new version


def test_update_meta_refuses_the_builtin_model_by_name_and_by_a_link_to_it():
    if not (store.builtin_dir() / "meta.json").is_file():
        pytest.skip("the built-in model is not built")
    builtin_meta = (store.builtin_dir() / "meta.json").read_bytes()
    with pytest.raises(BadInput, match="^the built-in model is read-only$"):
        store.update_meta("default", note="x")
    paths.models_dir().mkdir(parents=True, exist_ok=True)
    (paths.models_dir() / "alias").symlink_to(store.builtin_dir())  # a user name on the built-in files
    with pytest.raises(BadInput, match="^the built-in model is read-only$"):
        store.update_meta("alias", note="x")
    assert (store.builtin_dir() / "meta.json").read_bytes() == builtin_meta
    assert not (paths.models_dir() / ".versions").exists() or not any((paths.models_dir() / ".versions").iterdir())


# ---------------------------------------------------------------- delete_model


def test_delete_model_refuses_an_unknown_name_before_touching_anything():
    save_plain("kept")
    with pytest.raises(BadInput, match="unknown model 'nope'"):
        store.delete_model("nope")
    with pytest.raises(BadInput, match="invalid model name"):
        store.delete_model("../kept")
    assert load_vectors("kept").words == list(WORDS)


def test_delete_model_refuses_the_builtin_model():
    if not (store.builtin_dir() / "meta.json").is_file():
        pytest.skip("the built-in model is not built")
    with pytest.raises(BadInput, match="^the built-in model cannot be deleted$"):
        store.delete_model("default")
    assert (store.builtin_dir() / "meta.json").is_file()


def test_delete_model_refuses_a_real_directory_it_does_not_manage():
    real = paths.models_dir() / "handmade"
    real.mkdir(parents=True)
    (real / "meta.json").write_text("{}", encoding="utf-8")
    with pytest.raises(RuntimeFailure, match=r"handmade is not managed by attn \(not a symlink\): remove it yourself"):
        store.delete_model("handmade")
    assert (real / "meta.json").is_file()


def test_delete_model_of_a_link_outside_the_store_names_the_model_and_leaves_the_target(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SENTINEL").write_text("keep me", encoding="utf-8")
    paths.models_dir().mkdir(parents=True)
    (paths.models_dir() / "borrowed").symlink_to(outside)
    store.delete_model("borrowed")
    assert not (paths.models_dir() / "borrowed").is_symlink()
    assert (outside / "SENTINEL").read_text(encoding="utf-8") == "keep me"
    # compared without whitespace: rich wraps the temporary path wherever the width ends
    said = "".join(capsys.readouterr().err.split())
    assert "".join(f"model 'borrowed' pointed at {outside}, which attn did not create".split()) in said


# ---------------------------------------------------------------- meta.json checks


def test_a_missing_required_field_is_named_as_missing():
    save_plain("m")
    edit_meta("m", lambda meta: meta.pop("dim"))
    with pytest.raises(store.CorruptModel, match=r"in its meta.json, dim is missing, not a whole number in \[1, 65,536\]"):
        store.read_meta(store.model_dir("m"))


@pytest.mark.parametrize("key, bad, shown", [("dim", "16", "'16'"), ("vocab_size", -1, "-1"), ("dim", True, "True")])
def test_a_wrong_field_is_shown_as_it_is_written(key, bad, shown):
    save_plain("m")
    edit_meta("m", lambda meta: meta.update({key: bad}))
    with pytest.raises(store.CorruptModel, match=rf"in its meta.json, {key} is {shown}, not a whole number"):
        store.read_meta(store.model_dir("m"))


# ---------------------------------------------------------------- which model a command uses


def test_attn_model_names_the_model_used_when_none_is_given(monkeypatch):
    save_plain("mine")
    assert store.default_model_name() == "default"
    monkeypatch.setenv("ATTN_MODEL", "mine")
    assert store.default_model_name() == "mine"
    assert store.model_dir(None) == (paths.models_dir() / "mine").resolve()
    assert store.model_dir("default") == store.builtin_dir()  # a name given wins over ATTN_MODEL
    monkeypatch.setenv("ATTN_MODEL", "")  # set but empty: the built-in model
    assert store.default_model_name() == "default"


# ---------------------------------------------------------------- names, listing, writability


def test_check_new_name_refuses_the_builtin_name_with_its_message():
    with pytest.raises(BadInput, match="^'default' is the built-in model's name: choose another --name$"):
        store.check_new_name("default")
    assert store.check_new_name("mine") == "mine"


def test_user_model_names_are_the_visible_model_directories_only():
    save_plain("b")
    save_plain("a")
    (paths.models_dir() / "notes.txt").write_text("not a model", encoding="utf-8")
    (paths.models_dir() / ".hidden").mkdir()
    assert (paths.models_dir() / ".versions").is_dir()
    assert store.user_model_names() == ["a", "b"]


def test_check_writable_refuses_a_real_directory_and_accepts_a_model_to_replace():
    save_plain("m")
    store.check_writable("m")  # a name link of the store: replacing it is a normal retrain
    store.check_writable("new")
    (paths.models_dir() / "handmade").mkdir()
    with pytest.raises(RuntimeFailure, match=r"handmade is not managed by attn \(not a symlink\): move it away first$"):
        store.check_writable("handmade")


def test_check_writable_says_why_the_store_cannot_be_written(monkeypatch):
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.name.startswith(".probe-"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(RuntimeFailure) as info:
        store.check_writable("m")
    assert str(info.value) == f"cannot write to the model store at {paths.models_dir()}: Read-only file system"


def test_list_models_rows_name_path_and_builtin_flag():
    save_plain("m")
    (paths.models_dir() / "alias").symlink_to(os.readlink(paths.models_dir() / "m"))  # two names, one version
    rows = {r["name"]: r for r in store.list_models()}
    assert rows["m"]["builtin"] is False and rows["alias"]["builtin"] is False
    assert rows["m"]["path"] == str(paths.models_dir() / "m") and rows["alias"]["path"] == str(paths.models_dir() / "alias")
    assert rows["alias"]["vocab_size"] == len(WORDS)
    if (store.builtin_dir() / "meta.json").is_file():
        assert rows["default"]["builtin"] is True and rows["default"]["path"] == str(store.builtin_dir())


def test_list_models_lists_a_damaged_builtin_and_skips_a_missing_one(monkeypatch, tmp_path):
    save_plain("m")
    damaged = tmp_path / "package-data" / "default"
    damaged.mkdir(parents=True)
    (damaged / "meta.json").write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(store, "builtin_dir", lambda: damaged)
    rows = {r["name"]: r for r in store.list_models()}
    assert set(rows) == {"default", "m"} and rows["default"]["builtin"] is True
    assert rows["default"]["error"].startswith(f"model 'default' at {damaged} is damaged (unreadable meta.json: ")
    assert rows["default"]["error"].endswith("): reinstall attn")  # not "retrain it": the user cannot
    monkeypatch.setattr(store, "builtin_dir", lambda: tmp_path / "nowhere" / "default")
    assert [r["name"] for r in store.list_models()] == ["m"]  # a wheel without the model: the user's still listed


# ---------------------------------------------------------------- retraining a model with attention


def test_check_replace_refuses_without_force_and_warns_once_with_it(monkeypatch, capsys):
    monkeypatch.setattr(store, "_REPLACE_WARNED", set())
    save_plain("plain")
    store.check_replace("plain", force=False)  # no trained attention: nothing to lose
    save_plain("m")
    (store.model_dir("m") / "attention").mkdir()
    (store.model_dir("m") / "attention" / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(BadInput, match="model 'm' has trained attention.*Give --force to replace the model"):
        store.check_replace("m", force=False)
    capsys.readouterr()
    store.check_replace("m", force=True)
    store.check_replace("m", force=True)  # the CLI checks early, the trainer again: one warning
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("model 'm' has trained attention: the new vectors replace the model and its attention is discarded") == 1


# ---------------------------------------------------------------- versions


def test_store_version_is_only_a_real_version_directory_inside_versions(tmp_path):
    save_plain("m")
    version = (paths.models_dir() / "m").resolve()
    assert versions.store_version(paths.models_dir() / "m") == version
    lookalike = tmp_path / "elsewhere" / version.name  # the right name, the wrong place
    lookalike.mkdir(parents=True)
    assert versions.store_version(lookalike) is None
    handmade = paths.models_dir() / ".versions" / "handmade"  # the right place, not a version's name
    handmade.mkdir()
    assert versions.store_version(handmade) is None
    a_file = paths.models_dir() / ".versions" / "x-0123456789ab"  # a version's name, but a file
    a_file.write_text("", encoding="utf-8")
    assert versions.store_version(a_file) is None


def test_a_version_that_cannot_be_removed_does_not_fail_the_delete(monkeypatch):
    save_plain("m")
    version = (paths.models_dir() / "m").resolve()

    def busy(*args, **kwargs):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(os, "rmdir", busy)
    store.delete_model("m")  # the name is gone; what is left of the version is swept later
    assert not (paths.models_dir() / "m").is_symlink() and version.is_dir()


def test_the_sweep_never_signals_a_live_writer_nor_removes_its_partial_version():
    save_plain("m")
    # a stand-in writer that reports any signal it is sent (every catchable one, whatever the
    # dispositions it inherited, e.g. SIGHUP ignored under nohup) by exiting
    code = ("import signal, sys, time\n"
            "for s in signal.valid_signals():\n"
            "    try:\n        signal.signal(s, lambda n, f: sys.exit(100 + n))\n"
            "    except (OSError, ValueError, RuntimeError):\n        pass\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "ready\n"
        partial = paths.models_dir() / ".versions" / f"m-0123456789ab.{writer.pid}.partial"
        unknowable = paths.models_dir() / ".versions" / f"m-0123456789ac.{10**20}.partial"  # no such pid can be asked
        partial.mkdir()
        unknowable.mkdir()
        versions.sweep_stale()
        assert partial.is_dir() and unknowable.is_dir()
        with pytest.raises(subprocess.TimeoutExpired):  # still running: asked with signal 0, never sent a signal
            writer.wait(timeout=1)
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    versions.sweep_stale()
    assert not partial.exists() and unknowable.is_dir()


def test_a_symlink_inside_a_model_is_damage_not_followed_when_copied(tmp_path):
    save_plain("m")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the model's", encoding="utf-8")
    (store.model_dir("m") / "notes.txt").symlink_to(secret)
    with pytest.raises(store.CorruptModel, match="notes.txt is not a regular file"):
        store.update_meta("m", note="x")


# ---------------------------------------------------------------- sampled run (2026-11-25)
# the mutants of the sampled run left alive: docs/mutation.md (its git history), "Sampled run"


def test_a_damaged_model_is_read_once_when_no_retrain_swapped_it():
    save_plain("m")
    seen = []

    def load(directory):
        seen.append(directory)
        raise store.CorruptModel("vectors.npy is truncated")

    with pytest.raises(store.CorruptModel, match="^vectors.npy is truncated$"):
        store.read_one_version("m", load)
    assert seen == [(paths.models_dir() / "m").resolve()]  # the same version twice would be damage, not a race


def test_a_retrain_during_a_load_makes_the_load_run_again_on_the_new_version():
    save_plain("m")
    old = (paths.models_dir() / "m").resolve()
    bigger = list(WORDS) + ["extra"]
    seen = []

    def load(directory):
        seen.append(directory)
        if len(seen) == 1:
            save_plain("m", seed=5, words=bigger)  # swaps the link and removes the version being read
        return load_vectors("m", directory=directory)

    vectors = store.read_one_version("m", load)
    assert vectors.words == bigger
    assert seen == [old, (paths.models_dir() / "m").resolve()] and not old.exists()


def test_a_name_swapped_on_every_load_gives_up_with_the_load_error_after_the_documented_swaps():
    save_plain("m")
    calls = []

    def load(directory):
        calls.append(directory)
        save_plain("m", seed=len(calls))  # a new version on every attempt
        raise store.CorruptModel(f"vanished {len(calls)}")

    with pytest.raises(store.CorruptModel, match=f"^vanished {store.SWAPS_FOLLOWED}$"):
        store.read_one_version("m", load)
    assert len(calls) == store.SWAPS_FOLLOWED and len(set(calls)) == store.SWAPS_FOLLOWED


def test_an_invalid_name_is_refused_with_the_rule_and_quoted_briefly():
    with pytest.raises(BadInput) as info:
        store.check_name("bad name")
    assert str(info.value) == ("invalid model name 'bad name': use 1-64 letters, digits, '.', '_' or '-', "
                               "starting with a letter or digit")
    with pytest.raises(BadInput) as info:
        store.check_name("x" * 10_000 + " ")
    assert len(str(info.value)) < 300 and "10,001 characters" in str(info.value)  # never the whole name
    with pytest.raises(BadInput, match="^invalid model name 42: use 1-64"):
        store.check_name(42)


def test_a_bad_attn_model_says_the_name_came_from_the_environment(monkeypatch):
    monkeypatch.setenv("ATTN_MODEL", "no/such")
    with pytest.raises(BadInput) as info:
        store.model_dir(None)
    assert str(info.value).startswith("invalid model name 'no/such': ")
    assert str(info.value).endswith(" (the name comes from the ATTN_MODEL environment variable)")
    with pytest.raises(BadInput) as info:
        store.model_dir("no/such")  # named on the command line: not the environment's fault
    assert "ATTN_MODEL" not in str(info.value)


def test_a_missing_builtin_model_says_how_to_get_a_model(monkeypatch, tmp_path):
    gone = tmp_path / "wheel-data" / "default"
    monkeypatch.setattr(store, "builtin_dir", lambda: gone)
    with pytest.raises(RuntimeFailure) as info:
        store.model_dir("default")
    assert str(info.value) == (f"the built-in default model is missing from {gone}: reinstall attn, or train a model "
                               "with 'attn train' and name it with --model or ATTN_MODEL")


def test_the_store_that_cannot_be_created_says_why():
    paths.models_dir().parent.mkdir(parents=True, exist_ok=True)
    paths.models_dir().write_text("a file where the store should be", encoding="utf-8")
    with pytest.raises(RuntimeFailure) as info:
        store.check_writable("m")
    assert str(info.value) == f"cannot create the model store at {paths.models_dir()}: {os.strerror(errno.ENOTDIR)}"


def damaged_message(name: str, detail: str) -> str:
    """The message documented for a user model that cannot be used (hand-written, not store.damaged)."""
    return f"model '{name}' at {paths.models_dir() / name} is damaged ({detail}): retrain it with 'attn train --name {name}'"


def test_a_missing_meta_json_is_named_as_missing():
    save_plain("m")
    (store.model_dir("m") / "meta.json").unlink()
    with pytest.raises(store.CorruptModel) as info:
        store.read_meta(store.model_dir("m"))
    assert str(info.value) == damaged_message("m", "it has no meta.json: it is not an attn model, or was damaged")


def test_an_unreadable_meta_json_says_what_is_wrong_with_it():
    save_plain("m")
    (store.model_dir("m") / "meta.json").write_bytes(b"\xff{}")
    with pytest.raises(store.CorruptModel) as info:
        store.read_meta(store.model_dir("m"))
    assert str(info.value) == damaged_message("m", "meta.json: it is not UTF-8 text (byte 0)")
    (store.model_dir("m") / "meta.json").unlink()
    (store.model_dir("m") / "meta.json").mkdir()  # there, but not a file: not "it has no meta.json"
    with pytest.raises(store.CorruptModel) as info:
        store.read_meta(store.model_dir("m"))
    assert str(info.value) == damaged_message("m", "meta.json: it is a directory, not a regular file")


@pytest.mark.parametrize("document", [{"format": "another-tool"}, {"format": None}, [1, 2]])
def test_a_json_that_is_not_an_attn_model_description_is_refused(document):
    save_plain("m")
    path = store.model_dir("m") / "meta.json"
    if isinstance(document, dict):  # every other field as valid as a real model's
        document = dict(json.loads(path.read_text(encoding="utf-8")), **document)
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(store.CorruptModel) as info:
        store.read_meta(store.model_dir("m"))
    assert str(info.value) == damaged_message("m", "its meta.json is not an attn model description")


@pytest.mark.parametrize("change, problem", [
    ({"format_version": -1}, "format_version is -1, not a version number"),
    ({"name": 5}, "name is 5, not a string"),
    ({"dtype": 5}, "dtype is 5, not a string"),
    ({"algorithm": 5}, "algorithm is 5, not a string"),
    ({"created": 5}, "created is 5, not a string"),
    ({"corpus_label": 5}, "corpus_label is 5, not a string"),
    ({"corpus": 5}, "corpus is 5, not a string or an object"),
    ({"evaluation": {"simlex": 5}}, "evaluation.simlex is 5, not an object"),
    ({"subword": {"min_n": 4, "max_n": 3, "bucket": 10}}, "subword.min_n 4 is above subword.max_n 3"),
])
def test_each_field_of_meta_json_is_checked_with_its_message(change, problem):
    assert_meta_refused(change, problem)


def assert_meta_refused(change: dict, problem: str) -> None:
    """Model 'm' with ``change`` made to its meta.json is refused with exactly ``problem``."""
    save_plain("m")
    edit_meta("m", lambda meta: meta.update(change))
    with pytest.raises(store.CorruptModel) as info:
        store.read_meta(store.model_dir("m"))
    assert str(info.value) == damaged_message("m", f"in its meta.json, {problem}")


@pytest.mark.parametrize("change", [
    {"format_version": 0},  # what a missing format_version means: the first format
    {"subword": {"min_n": 3, "max_n": 3, "bucket": 10}},  # fastText's n-grams of one length (minn == maxn)
    {"corpus": {"files": 2}, "corpus_label": "brown", "evaluation": {"simlex": None, "ws353": {"spearman": 0.5}}},
])
def test_valid_meta_json_values_at_the_edges_are_accepted(change):
    save_plain("m")
    edit_meta("m", lambda meta: meta.update(change))
    meta = store.read_meta(store.model_dir("m"))
    assert {k: meta[k] for k in change} == change


def test_a_nan_in_the_metadata_fails_the_write_and_keeps_the_old_model():
    save_plain("m")
    old = (paths.models_dir() / "m").resolve()
    with pytest.raises(ValueError):  # strict JSON: NaN is not a JSON number
        store.save_vectors("m", ["x"], [[1.0, 2.0]], meta={"evaluation": {"simlex": {"spearman": float("nan")}}})
    assert (paths.models_dir() / "m").resolve() == old and load_vectors("m").words == list(WORDS)
    assert sorted(p.name for p in (paths.models_dir() / ".versions").iterdir()) == [old.name]


def test_arrays_are_never_written_as_pickles(tmp_path):
    import numpy as np

    with pytest.raises(ValueError):
        store.write_npy(tmp_path / "objects.npy", np.array([{"run": "code"}], dtype=object))
