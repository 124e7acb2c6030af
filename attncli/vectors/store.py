"""The model store: directories of NumPy arrays plus JSON metadata, written atomically.

A stored model is a directory::

    meta.json      name, algorithm, dim, vocab_size, dtype, subword {min_n, max_n, bucket} or null,
                   corpus, params, created, evaluation, ... (see ``save_vectors``); indented UTF-8 JSON
    vocab.txt      one word per line, UTF-8, row i of vectors.npy is word i
    vectors.npy    (V, d) float16 or float32: the word vectors (fastText: already combined
                   with their n-grams, exactly gensim's ``wv.vectors``)
    ngrams.npy     (B, d) the fastText n-gram table, only for models with subwords
    counts.npy     (V,) int64 corpus counts, when known
    attention/     trained attention weights (see tinylm/model.py), when any

Nothing is a pickle: arrays are read with ``allow_pickle=False`` (memory-mapped), metadata is
JSON. Atomic writes: ``$ATTN_HOME/models/<name>`` is a symlink to
``models/.versions/<name>-<id>``. A write fills a new version directory, then swaps the link
with one ``os.replace``, so a reader sees the old model or the new one, never a mix, and a
failed or interrupted write leaves the old model as it was. Every file and directory written is
fsynced before the swap. A reader resolves the name link once per load and reads every file
from that version (``model_dir``, ``read_one_version``).

The store removes only what it created: a directory named ``<name>-<12 hex digits>`` directly
inside ``.versions`` (resolved, so no link leads it elsewhere), and only once no name refers to
it (``release_version``). A name that is a link to anything else is replaced, and what it
pointed at is left alone with a warning. A later write sweeps what killed writes left behind
(``sweep_stale``).

The built-in ``default`` model ships read-only in the package's data directory.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from attncli.io import messages
from attncli.env import paths
from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import fsync_dir
from attncli.io.textio import clip
from attncli.vectors.meta_check import is_int, meta_problem
from attncli.vectors.safeio import FileProblem, read_text
from attncli.vectors.versions import (  # noqa: F401 - part of the store's interface
    VERSION_RE, make_versions_dir, new_version, release_version, store_version, sweep_stale,
)

T = TypeVar("T")

FORMAT = "attn-vectors"
FORMAT_VERSION = 1
BUILTIN = "default"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # used with fullmatch: "$" would allow a final "\n"


class CorruptModel(RuntimeFailure):
    """A stored model's files are missing, truncated or inconsistent (exit 1)."""


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise BadInput(
            f"invalid model name {clip(name) if isinstance(name, str) else repr(name)}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_new_name(name: str) -> str:
    """A valid name for a model to write: the built-in model's name is taken."""
    check_name(name)
    if name == BUILTIN:
        raise BadInput(f"'{BUILTIN}' is the built-in model's name: choose another --name")
    return name


def builtin_dir() -> Path:
    return paths.data_dir() / BUILTIN


def default_model_name() -> str:
    """The model commands use when none is named: ``$ATTN_MODEL``, else the built-in default."""
    return os.environ.get("ATTN_MODEL") or BUILTIN


def user_model_names() -> list[str]:
    root = paths.models_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and p.is_dir())


def model_dir(name: str | None = None) -> Path:
    """The directory of model ``name``, resolved once: the version directory its name link points
    at (every file of one load is read from it, so a retrain racing the reader cannot mix two
    versions), else the built-in one; BadInput if none. ``None`` means ``$ATTN_MODEL`` or the
    built-in model; a bad ``$ATTN_MODEL`` is reported as such."""
    from_env = name is None and bool(os.environ.get("ATTN_MODEL"))
    name = default_model_name() if name is None else name  # "" is an invalid name, not "the default"
    try:
        return _model_dir(name)
    except BadInput as exc:
        if from_env:
            raise BadInput(f"{exc} (the name comes from the ATTN_MODEL environment variable)") from None
        raise


def read_one_version(name: str | None, load: Callable[[Path], T]) -> T:
    """``load(directory)`` on the version model ``name`` resolves to now. A retrain that swaps
    the link and removes that version while it is being read makes its files vanish: then the
    load runs once more on the new version (every file of a load comes from one version)."""
    directory = model_dir(name)
    for attempt in range(SWAPS_FOLLOWED):
        try:
            return load(directory)
        except (CorruptModel, BadInput):
            again = model_dir(name)
            if again == directory or attempt == SWAPS_FOLLOWED - 1:
                raise
            directory = again  # swapped again while being read (retrains in quick succession)
    raise AssertionError("unreachable")


SWAPS_FOLLOWED = 8  # a load follows the name to a newer version at most this many times


def _model_dir(name: str) -> Path:
    if name == BUILTIN:
        if not (builtin_dir() / "meta.json").is_file():
            raise RuntimeFailure(
                f"the built-in default model is missing from {builtin_dir()}: reinstall attn, or train "
                "a model with 'attn train' and name it with --model or ATTN_MODEL"
            )
        return builtin_dir()
    check_name(name)
    path = paths.models_dir() / name
    for _ in range(SWAPS_FOLLOWED):
        real = Path(os.path.realpath(path))
        if real.is_dir():
            return real
        if Path(os.path.realpath(path)) == real:
            break  # not a version released while the name was being swapped: missing
    known = ", ".join([BUILTIN] + user_model_names())
    raise BadInput(f"unknown model '{name}': known models are {known} (see 'attn models')")


MAX_META_BYTES = 16 * 2**20


def read_meta(directory: Path) -> dict[str, Any]:
    """The model's meta.json, checked by ``validate_meta``: CorruptModel if it is missing or damaged."""
    name = BUILTIN if directory == builtin_dir() else shown_path(directory).name
    try:
        meta = json.loads(read_text(directory / "meta.json", MAX_META_BYTES))
    except FileProblem as exc:
        if not (directory / "meta.json").exists() and not (directory / "meta.json").is_symlink():
            raise damaged(name, directory, "it has no meta.json: it is not an attn model, or was damaged") from None
        raise damaged(name, directory, f"meta.json: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise damaged(name, directory, f"unreadable meta.json: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise damaged(name, directory, "its meta.json is not an attn model description")
    validate_meta(meta, directory)
    return meta


def validate_meta(meta: dict[str, Any], directory: Path) -> None:
    """CorruptModel unless the fields the loaders use have the right types and ranges.

    One place for every check of meta.json: ``load_vectors``, ``attn models`` and the trainers
    can then use ``meta["subword"]["min_n"]`` and the like without guarding each access.
    """
    version = meta.get("format_version", 0)
    if is_int(version) and version > FORMAT_VERSION:  # before the fields: a newer format may change them
        raise RuntimeFailure(f"model at {shown_path(directory)} was written by a newer attn: upgrade attn to read it")
    problem = meta_problem(meta)
    if problem is not None:
        name = BUILTIN if directory == builtin_dir() else shown_path(directory).name
        raise damaged(name, directory, f"in its meta.json, {problem}")


def damaged(name: str, directory: Path, detail: str) -> CorruptModel:
    """The error for a model whose files cannot be used, with the way out."""
    fix = "reinstall attn" if name == BUILTIN else f"retrain it with 'attn train --name {name}'"
    return CorruptModel(f"model '{name}' at {shown_path(directory)} is damaged ({detail}): {fix}")


def shown_path(directory: Path) -> Path:
    """How messages name a model's directory: a version the store created as its name link
    (``models/NAME``), anything else as it is."""
    directory = Path(directory)
    m = VERSION_RE.fullmatch(directory.name)
    if m is not None and directory.parent.name == ".versions":
        return directory.parent.parent / m["name"]
    return directory


def write_json(path: Path, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, ensure_ascii=False, allow_nan=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_npy(path: Path, array) -> None:
    import numpy as np

    with open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())


def check_writable(name: str) -> None:
    """RuntimeFailure (exit 1) now, before a long training, if model ``name`` could not be written:
    the store cannot be created or written, or ``name`` is something attn does not manage."""
    check_new_name(name)
    versions = make_versions_dir()
    root = versions.parent
    link = root / name
    if (link.exists() or link.is_symlink()) and not link.is_symlink():
        raise RuntimeFailure(f"{link} is not managed by attn (not a symlink): move it away first")
    probe = versions / f".probe-{uuid.uuid4().hex[:12]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise RuntimeFailure(f"cannot write to the model store at {root}: {exc.strerror or exc}") from None


def check_replace(name: str, *, force: bool) -> None:
    """Retraining the vectors of a model that has trained attention: the attention was trained on
    the old vectors and cannot be kept with new ones. BadInput (exit 2) unless ``force``; with
    it, a warning says the attention is discarded."""
    link = paths.models_dir() / name
    if not (link / "attention" / "config.json").exists():
        return
    if not force:
        raise BadInput(
            f"model '{name}' has trained attention, which new vectors would make useless (it was trained on "
            f"the current ones): retraining would discard it. Give --force to replace the model and discard "
            f"its attention, or choose another --name"
        )
    if name not in _REPLACE_WARNED:  # the CLI checks early, the trainer again: say it once
        _REPLACE_WARNED.add(name)
        messages.warn(f"model '{name}' has trained attention: the new vectors replace the model and its attention is discarded")


_REPLACE_WARNED: set[str] = set()


@contextmanager
def writing_model(name: str, *, start_from: Path | None = None) -> Iterator[Path]:
    """Yield an empty (or ``start_from``-copied) directory; on a clean exit it becomes model ``name``.

    On any exception, KeyboardInterrupt and a stopping signal included, the new directory is
    removed and the model that was there before stays untouched. Everything written is fsynced,
    directories included, before the link is swapped; the old version is removed only if the
    store created it and no other name refers to it (``attncli.vectors.versions``).
    """
    check_name(name)
    if name == BUILTIN:
        raise BadInput(f"'{BUILTIN}' is the built-in model's name: choose another --name")
    try:
        with new_version(name, start_from=start_from) as tmp:
            yield tmp
    except FileProblem as exc:
        raise CorruptModel(f"model at {shown_path(start_from)} is damaged ({exc}): retrain it") from None


def save_vectors(
    name: str,
    words: list[str],
    vectors,
    *,
    ngrams=None,
    subword: dict[str, int] | None = None,
    counts=None,
    meta: dict[str, Any] | None = None,
    dtype: str = "float32",
) -> Path:
    """Store word vectors (V, d) and optionally a fastText n-gram table (B, d) as model ``name``.

    ``meta`` adds fields to meta.json; the store's own (format, format_version, name, dim,
    vocab_size, dtype, subword) come from the data written and override any in ``meta``."""
    import numpy as np

    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ValueError(f"vectors {vectors.shape} do not match {len(words)} words")
    if (ngrams is None) != (subword is None):
        raise ValueError("ngrams and subword go together")
    if any(("\n" in w or "\r" in w or not w) for w in words):
        raise ValueError("words must be non-empty and free of line breaks")
    record = dict(meta or {})
    record.update(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        name=name,
        dim=int(vectors.shape[1]),
        vocab_size=len(words),
        dtype=dtype,
        subword=dict(subword) if subword else None,
    )
    with writing_model(name) as tmp:
        (tmp / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
        write_npy(tmp / "vectors.npy", vectors.astype(dtype, copy=False))
        if ngrams is not None:
            write_npy(tmp / "ngrams.npy", np.asarray(ngrams).astype(dtype))
        if counts is not None:
            write_npy(tmp / "counts.npy", np.asarray(counts, dtype=np.int64))
        write_json(tmp / "meta.json", record)
    return paths.models_dir() / name


def update_meta(name: str, **fields: Any) -> None:
    """Atomically rewrite a user model with some metadata fields changed."""
    src = model_dir(name)
    if name == BUILTIN or src == builtin_dir():
        raise BadInput("the built-in model is read-only")
    meta = read_meta(src)
    meta.update(fields)
    with writing_model(name, start_from=src.resolve()) as tmp:
        write_json(tmp / "meta.json", meta)


def delete_model(name: str) -> None:
    model_dir(name)  # an invalid or unknown name is refused before anything is touched
    if name == BUILTIN:
        raise BadInput("the built-in model cannot be deleted")
    link = paths.models_dir() / name
    if not link.is_symlink():
        raise RuntimeFailure(f"{link} is not managed by attn (not a symlink): remove it yourself if you mean to")
    target = Path(os.path.join(link.parent, os.readlink(link)))
    os.unlink(link)
    fsync_dir(link.parent)
    release_version(target, name=name)


def list_models() -> list[dict[str, Any]]:
    """Metadata of the built-in model and every user model; a damaged one is listed with its error."""
    out = []
    for name, directory, builtin in [(BUILTIN, builtin_dir(), True)] + [
        (n, paths.models_dir() / n, False) for n in user_model_names()
    ]:
        try:
            meta = read_meta(directory)
        except RuntimeFailure as exc:
            if builtin and not directory.exists():
                continue
            meta = {"name": name, "error": str(exc)}
        meta = dict(meta, name=name, builtin=builtin, path=str(directory))
        out.append(meta)
    return out
