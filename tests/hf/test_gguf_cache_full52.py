"""The GGUF tokenizer cache when its file cannot be written (issue 52): the cache is a convenience,
so a full disk or a folder in the cache file's place warns and goes on (its docstring says so), but
atomic_write reports a failed write as a RuntimeFailure, which the cache did not catch: the command
failed, exit 1 ("cannot write ...: File too large"), though the model had loaded."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from _gguf_fixtures import write_gguf
from conftest import needed

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_full_disk_under_the_cache_warns_and_the_command_runs(tmp_path):
    needed("gguf")
    needed("transformers")
    path = write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")  # its tokenizer's JSON is about 3 kB

    def small_files():  # the child may write files of at most 2 kB: the tokenizer's does not fit
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    env = {**os.environ, "ATTN_HOME": str(tmp_path / "home"), "PYTHONPATH": HERE + os.pathsep
           + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "attncli", "matrix", "hello world", "--transformer", str(path),
                           "--json"], capture_output=True, text=True, env=env, preexec_fn=small_files, timeout=240)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, said
    assert "could not keep m.gguf's tokenizer" in said and "File too large" in said, said
    assert list((tmp_path / "home" / "cache" / "gguf-tokenizers").iterdir()) == []  # no torn file left


@pytest.mark.parametrize("twice", [False, True])
def test_a_folder_where_the_cache_file_goes_warns_and_the_model_loads(tmp_path, monkeypatch, capsys, twice):
    needed("gguf")
    needed("transformers")
    from attncli.env import paths
    from attncli.hf.loader import load

    monkeypatch.setenv("ATTN_HOME", str(tmp_path / "home"))
    path = write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    want = load(str(path)).encode("hello world").ids
    (cached,) = (paths.cache_dir() / "gguf-tokenizers").glob("*.json")
    cached.unlink()
    cached.mkdir()  # os.replace cannot put the file there
    capsys.readouterr()
    for _ in range(2 if twice else 1):
        assert load(str(path)).encode("hello world").ids == want
    assert "could not keep m.gguf's tokenizer" in capsys.readouterr().err
    assert cached.is_dir()
