"""Every read of a file goes through one of the two doors (issue 20): an AST walk over attncli/.

The doors: ``attncli.io.textio.read_user_text`` (a user's text: a file, or stdin for ``-``; bounded,
strict UTF-8) with ``read_lines`` / ``stdin_bytes`` for streams, and ``attncli.io.fileio``
(``open_regular`` / ``read_bytes`` / ``read_text``: regular files only, never a FIFO or a device,
at most a stated number of bytes), which ``attncli.vectors.safeio`` re-exports for the store.
This test finds every other way of reading a file (``open()`` for reading, ``Path.read_text`` /
``read_bytes`` / ``open``, ``os.open`` for reading, ``np.load`` / ``np.fromfile`` / ``np.memmap``,
``json.load``, ``pickle``, and the third-party loaders that take a path) and fails unless the site
is in ``ALLOWED`` with the reason it is safe. Writing files is not checked here (``fileio``'s
atomic writers are another door).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _special_files import machine_device
import attncli

PKG = Path(attncli.__file__).parent
KEY = 50  # the first characters of a call's source that name it in ALLOWED

# (file, function, call source, of which the first KEY characters count) -> why it is safe
ALLOWED = {
    ("io/textio.py", "read_user_text", "open(path, 'rb')"):
        "the door for a user's text itself: a FIFO is allowed on purpose (process substitution, <(cmd)), "
        "and at most `limit` bytes are read, a chunk at a time",
    ("io/fileio.py", "open_regular", "os.open(path, flags)"): "the door itself (O_NONBLOCK, regular files only)",
    ("io/export_target.py", "_open_device", "os.open(target.path, _OPEN)"):
        "the export door opens a character device write-only (O_WRONLY, O_NONBLOCK): it reads nothing",
    ("io/export_target.py", "_open_fifo", "os.open(target.path, _OPEN)"):
        "the export door opens a FIFO write-only and non-blocking (ENXIO without a reader): it reads nothing",
    ("io/fileio.py", "fsync_dir", "os.open(path, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))"):
        "opens a folder to fsync it; reads nothing",
    ("vectors/versions.py", "_fsync_tree", "os.open(path, os.O_RDONLY)"):
        "opens a file attn has just written in the store to fsync it; reads nothing",
    ("vectors/safeio.py", "load_npy", "np.memmap(fh, dtype=dtype, mode='r', offset=offset, shape=shape, order='F' if fortran else 'C')"):
        "maps a file opened by open_regular, after its header's shape was checked against the file's size",
    ("vectors/evaluate.py", "read_analogies", "open(path, encoding='utf-8')"):
        "gensim's own bundled evaluation set (gensim.test.utils.datapath), never a user's file",
    ("vectors/evaluate.py", "_pair_oov_ratio", "open(path, encoding='utf-8')"):
        "gensim's own bundled evaluation set (gensim.test.utils.datapath), never a user's file",
    ("vectors/fasttext_bin.py", "read_fasttext_bin", "load_facebook_vectors(str(path))"):
        "gensim reads the .bin only after scan() opened it through open_regular and checked every size and count in it",
    ("hf/formats/weights.py", "__init__", "safe_open(str(shard), framework='numpy')"):
        "safetensors' own reader (no code runs; it checks its header) of a shard whose header read_header "
        "has already read through fileio.open_regular (a regular file, its header bounded)",
    ("hf/backends/torch_backend.py", "_check_checkpoint_finite", "safe_open(str(shard), framework='pt')"):
        "safetensors' own reader (no code runs; it checks its header) of a shard that load's "
        "config_check.check_files has already found to be a regular file (never a FIFO or a device)",
    ("io/fileio.py", "map_regular", "mmap.mmap(fd, size, access=mmap.ACCESS_READ)"):
        "the door for a memory map: the descriptor is open_regular's (a regular file, never a FIFO or a device), "
        "its size at most `limit`; reading nothing itself, it leaves each span to the caller, which checks it "
        "against len() of the map (hf/formats/weights.py's _view: a tensor's data_offsets against its shape "
        "and the mapped size)",
    ("hf/backends/torch_backend.py", "__init__", "transformers.AutoConfig.from_pretrained(self.path, **NEVER_REMOTE)"):
        "transformers' loader (trust_remote_code off: no code from the folder runs), after config_check.check_files",
    ("views/page.py", "interactive_page", "files('attncli.views').joinpath(SCRIPT_FILE).read_text(encoding='utf-8')"):
        "attn's own page script, from its installed package, never a user's file",
    ("hf/backends/torch_backend.py", "__init__", "auto.from_pretrained(self.path, attn_implementation='eager', dtype=torch.float32)"):
        "transformers' loader (trust_remote_code off; safetensors or a weights_only torch.load), after check_model_dir",
    ("hf/backends/torch_backend.py", "__init__", "transformers.AutoTokenizer.from_pretrained(self.path)"):
        "transformers' loader (trust_remote_code off), after check_model_dir",
    ("explore/serve.py", "offline_templates", "template.read_text(encoding='utf-8')"):
        "textual-serve's own page template, from its installed package, never a user's file",
}

LOADERS = {"load", "fromfile", "memmap", "mmap", "loads_file", "load_facebook_vectors", "from_pretrained", "safe_open",
           "load_file"}  # np.load, json.load, pickle.load, np.fromfile, np.memmap, mmap.mmap, gensim, transformers, safetensors
PATH_READERS = {"read_text", "read_bytes"}  # Path's: no positional argument (fileio's take a path and a limit)


def _mode(call: ast.Call, position: int) -> str | None:
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return str(call.args[position].value)
    for k in call.keywords:
        if k.arg == "mode" and isinstance(k.value, ast.Constant):
            return str(k.value.value)
    return None


def _reads(mode: str | None) -> bool:
    return mode is None or not any(c in mode for c in "wax")


def _is_door_fd(node: ast.expr) -> bool:
    """open(open_regular(...)): a descriptor from the door."""
    return isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "open_regular"


def file_reads(source: str) -> list[tuple[str, str, int]]:
    """(function, call source, line) of each way of reading a file that is not a door's call."""
    tree = ast.parse(source)
    found = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
        name = getattr(fn, "name", "<module>")
        body = fn.body if fn is tree else [fn]
        for node in (n for top in body for n in ast.walk(top)):
            if not isinstance(node, ast.Call) or (fn is tree and _inside_function(tree, node)):
                continue
            func = node.func
            what = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            hit = False
            if what == "open" and isinstance(func, ast.Name):  # builtin open()
                hit = _reads(_mode(node, 1)) and not (node.args and _is_door_fd(node.args[0]))
            elif what == "open" and receiver in ("io", "codecs"):
                hit = _reads(_mode(node, 1))
            elif what == "open" and receiver == "os":
                flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
                hit = "O_WRONLY" not in flags and "O_RDWR" not in flags
            elif what == "open" and isinstance(func, ast.Attribute) and receiver not in ("zf", "tarfile", "zipfile"):
                hit = _reads(_mode(node, 0))  # Path.open(); a ZipFile's entries are read inside safeio's door
            elif what in PATH_READERS and isinstance(func, ast.Attribute) and not node.args:
                hit = True
            elif what in LOADERS and not (what == "load" and receiver not in ("np", "numpy", "json", "pickle", "torch")):
                hit = True
            if hit:
                found.append((name, ast.unparse(node), node.lineno))
    return found


def _inside_function(tree: ast.Module, target: ast.AST) -> bool:
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(n is target for n in ast.walk(fn)):
            return True
    return False


def unproven(source: str, rel: str) -> list[str]:
    return [f"{rel}:{line}: {fn}: {call}" for fn, call, line in file_reads(source)
            if (rel, fn, call[:KEY]) not in _ALLOWED]


_ALLOWED = {(rel, fn, call[:KEY]): why for (rel, fn, call), why in ALLOWED.items()}


def modules():
    return sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=[str(p.relative_to(PKG)) for p in modules()])
def test_every_file_read_goes_through_a_door(path):
    rel = str(path.relative_to(PKG))
    bad = unproven(path.read_text(encoding="utf-8"), rel)
    assert not bad, ("a file is read without attncli.io.textio.read_user_text or attncli.io.fileio (regular files only, "
                     "bounded); use them, or add the site to ALLOWED with the reason it is safe:\n" + "\n".join(bad))


def test_every_allowance_is_still_needed():
    used = set()
    for path in modules():
        rel = str(path.relative_to(PKG))
        used |= {(rel, fn, call[:KEY]) for fn, call, _ in file_reads(path.read_text(encoding="utf-8"))}
    stale = sorted(set(_ALLOWED) - used)
    assert not stale, f"ALLOWED lists reads that are gone: {stale}"


@pytest.mark.parametrize("source, flagged", [
    ("def f(p):\n    return open(p).read()\n", True),
    ("def f(p):\n    with open(p, 'rb') as fh:\n        return fh.read()\n", True),
    ("def f(p):\n    with open(p, 'wb') as fh:\n        fh.write(b'')\n", False),
    ("def f(p):\n    return open(open_regular(p), 'rb')\n", False),
    ("def f(p):\n    return json.loads((p / 'config.json').read_text(encoding='utf-8'))\n", True),
    ("def f(p):\n    return p.read_bytes()\n", True),
    ("def f(p):\n    return fileio.read_text(p, 1 << 20)\n", False),
    ("def f(p):\n    return np.load(p)\n", True),
    ("def f(fd):\n    return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)\n", True),
    ("def f(fh):\n    return json.load(fh)\n", True),
    ("def f(p):\n    with p.open() as fh:\n        return fh.read()\n", True),
    ("def f(p):\n    return os.open(p, os.O_RDONLY)\n", True),
    ("def f(p):\n    return os.open(p, os.O_WRONLY)\n", False),
    ("def f(p):\n    return AutoModel.from_pretrained(p)\n", True),
    ("def f(p):\n    return read_user_text(p, '--file')\n", False),
])
def test_the_rule_catches_reads_around_the_doors(source, flagged):
    assert bool(unproven(source, "x.py")) is flagged, unproven(source, "x.py")


# ---------------------------------------------------------------- the readers fixed for this test, behaving


def in_a_child(code: str) -> str:
    """What ``code`` prints, run in a child under a 512 MiB address-space limit: a reader that
    reads /dev/zero without end fails there (MemoryError) instead of eating the machine's memory."""
    import os
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    repo = str(PKG.parent)
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", "from pathlib import Path; " + code], capture_output=True, text=True,
                          timeout=60, preexec_fn=limit, env=env, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


@pytest.mark.timeout(60)  # the old readers waited for ever on a FIFO
def test_a_model_folders_json_files_are_regular_and_bounded(tmp_path):
    import os

    from attncli.errors import RuntimeFailure
    from attncli.hf.backends import pretrained_base
    from attncli.hf.formats import source

    folder = tmp_path / "model"
    folder.mkdir()
    with open(folder / "config.json", "wb") as fh:  # sparse: 20 MiB of nothing after a brace
        fh.write(b"{")
        fh.truncate(20 << 20)
    with pytest.raises(RuntimeFailure, match=r"damaged model: config\.json: it is 20,971,520 bytes, more than"):
        source.read_config(folder)
    os.mkfifo(folder / "tokenizer_config.json")  # present but not a file: damage, never waited on
    with pytest.raises(RuntimeFailure, match=r"tokenizer_config\.json: it is a FIFO"):
        pretrained_base._json(folder / "tokenizer_config.json")
    assert pretrained_base._json(folder / "absent.json") == {}  # an optional file that is missing
    (folder / "generation_config.json").symlink_to(machine_device("/dev/zero"))
    assert "a device" in in_a_child("from attncli.hf.backends import pretrained_base\n"
                                    "try:\n"
                                    f"    pretrained_base._json(Path({str(folder / 'generation_config.json')!r}))\n"
                                    "except Exception as exc:\n"
                                    "    print(exc)")
    (folder / "real.json").write_text('{"model_max_length": 7}', encoding="utf-8")
    (folder / "linked.json").symlink_to(folder / "real.json")  # the hub cache's links to its blobs
    assert pretrained_base._json(folder / "linked.json") == {"model_max_length": 7}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("modules", ["fifo", "dev-zero", "escape", "absolute"])
def test_an_encoders_pooling_config_is_read_inside_its_folder_only(tmp_path, modules):
    import json
    import os

    from attncli.lookup.encoder import _pooling_config

    folder = tmp_path / "encoder"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text('{"pooling_mode_cls_token": true}', encoding="utf-8")
    pooling = {"escape": "../outside", "absolute": str(outside)}.get(modules, "1_Pooling")
    from attncli.errors import RuntimeFailure

    if modules == "fifo":  # present but not a file: damage (exit 1), never waited on
        os.mkfifo(folder / "modules.json")
        with pytest.raises(RuntimeFailure, match=r"modules\.json: it is a FIFO"):
            _pooling_config(folder)
    elif modules == "dev-zero":
        (folder / "modules.json").symlink_to(machine_device("/dev/zero"))
        assert "modules.json: it is a device" in in_a_child(
            "from attncli.lookup.encoder import _pooling_config\ntry:\n"
            f"    _pooling_config(Path({str(folder)!r}))\nexcept Exception as exc:\n    print(exc)")
    else:
        (folder / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Pooling",
                                                          "path": pooling}]), encoding="utf-8")
        assert _pooling_config(folder) == {}  # a folder outside the model's is not read
    (folder / "modules.json").unlink()
    (folder / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Pooling",
                                                      "path": "1_Pooling"}]), encoding="utf-8")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}', encoding="utf-8")
    assert _pooling_config(folder) == {"pooling_mode_mean_tokens": True}  # the ordinary case still works


@pytest.mark.timeout(60)
def test_a_fasttext_bin_that_is_a_fifo_is_refused_unread(tmp_path):
    import os

    from attncli.errors import BadInput
    from attncli.vectors.fasttext_bin import scan

    os.mkfifo(tmp_path / "model.bin")
    with pytest.raises(BadInput, match="not a regular file"):
        scan(tmp_path / "model.bin", 0, lambda done, total: None)
