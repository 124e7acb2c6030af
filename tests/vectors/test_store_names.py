"""The store's names (attncli/vectors/store.py) on real files under a temporary ATTN_HOME: which model
a command uses (--model, ATTN_MODEL, the built-in), names refused with their rule, the listing, a
store that cannot be written or created, deleting a model and what it may never delete, and
retraining a model that has attention; each message as a person reads it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from _lookup_fixtures import WORDS, save_plain

from attncli.env import paths
from attncli.errors import BadInput, RuntimeFailure
from attncli.vectors import store
from attncli.vectors.model import load_vectors


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
