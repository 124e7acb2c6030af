"""A model's meta.json and files as the store writes and reads them (attncli/vectors/store.py):
update_meta, every field checked with its message and its range at both ends, missing, unreadable
or dangling files named as what they are, the store's own fields, UTF-8 whatever the locale,
indented JSON, and arrays never written as pickles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _lookup_fixtures import WORDS, save_plain

from attncli.env import paths
from attncli.errors import BadInput
from attncli.vectors import store
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
