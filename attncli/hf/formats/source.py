"""Where a pretrained model's files are: a local directory, or a hub id in the Hugging Face cache.

Everything downstream loads from one directory, so a hub id and a path written by
``save_pretrained`` go through the same code. The optional packages are checked here, with the
message that says what to install.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from attncli.env import extras
from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.checks import config_check

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
TOKENIZER = "tokenizer.json"
# what a hub download fetches: configs, tokenizer files and the weights (safetensors first)
HUB_FILES = ["*.json", "*.txt", "*.model", "merges.txt", "*.safetensors"]
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")

CONVERT = ("python -c \"import sys, transformers as t; d = sys.argv[1]; "
           "t.AutoModel.from_pretrained(d).save_pretrained(d)\" MODEL_DIR")


def install_pretrained() -> str:
    return extras.install_command("pretrained")


def install_transformers() -> str:
    return f"{extras.install_command('transformers')} ({extras.TORCH_CPU})"


def missing(*modules: str) -> list[str]:
    """The named top-level modules that are not installed (without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require_pretrained() -> None:
    """The numpy backend's packages: tokenizers and safetensors (no torch, no transformers)."""
    gone = missing("tokenizers", "safetensors")
    if gone:
        raise BadInput(f"pretrained models need {' and '.join(gone)}: {install_pretrained()}")


def require_transformers() -> None:
    gone = missing("torch", "transformers")
    if gone:
        raise BadInput(f"this model runs through transformers, which needs {' and '.join(gone)}: "
                       f"{install_transformers()}")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve(name_or_path: str) -> Path:
    """The directory holding the model: ``name_or_path`` itself when it is a directory, else the
    cached snapshot of a hub id (fetched only when online and ``HF_HUB_OFFLINE`` is unset)."""
    if not name_or_path or not name_or_path.strip():
        raise BadInput("no model given: pass a hub id (e.g. bert-base-uncased) or a directory written by save_pretrained")
    try:
        path = Path(name_or_path).expanduser()
    except RuntimeError:  # ~nosuchuser/...: no such user, no home to expand
        raise BadInput(f"no such model or directory: '{name_or_path}' (no such user's home folder)") from None
    if path.is_dir():
        check_model_dir(path)
        return path
    if path.exists():
        raise BadInput(f"'{name_or_path}' is a file, not a model: pass the directory that holds config.json")
    if name_or_path.startswith((".", "/", "~")) or not HUB_ID.match(name_or_path):  # a path, not an org/name id
        raise BadInput(f"no such model or directory: '{name_or_path}'")
    return _from_hub(name_or_path)


def check_model_dir(path: Path) -> None:
    if not (path / CONFIG).exists():  # a FIFO or device config.json is damage, found when it is read
        raise BadInput(f"'{path}' is not a Hugging Face model: it has no {CONFIG} "
                       "(a model directory is what save_pretrained writes)")
    names = [p.name for p in path.iterdir()]
    if any(n.endswith(".safetensors") for n in names):
        return
    pickles = [n for n in names if n.endswith((".bin", ".pt", ".pth", ".ckpt"))]
    if pickles:
        raise BadInput(f"'{path}' has only pickled weights ({', '.join(sorted(pickles)[:3])}), which attn never loads "
                       "(unpickling can run code): convert them to safetensors on a machine you trust: "
                       f"{CONVERT}")
    raise BadInput(f"'{path}' has a {CONFIG} but no weights (model.safetensors)")


def _from_hub(repo_id: str) -> Path:
    if missing("huggingface_hub"):
        raise BadInput(f"'{repo_id}' is not a local directory, and hub ids need huggingface_hub: {install_pretrained()}")
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    where = f"'{repo_id}' is not a directory here, and no model by that id is in the local Hugging Face cache"
    how = (f"pass a directory written by save_pretrained instead (fetch one where there is network: "
           f"hf download {repo_id} --local-dir DIR)")
    try:
        found = huggingface_hub.snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=True)
    except LocalEntryNotFoundError:
        found = None
    except Exception as exc:  # a malformed id, a broken cache entry
        raise BadInput(f"cannot use '{repo_id}' as a hub id ({exc.__class__.__name__}): "
                       "pass a directory written by save_pretrained") from None
    if found is None or not (Path(found) / CONFIG).is_file():
        if offline():
            raise RuntimeFailure(f"{where}; HF_HUB_OFFLINE is set, so it cannot be downloaded: {how}, "
                                 "or unset HF_HUB_OFFLINE")
        try:
            found = huggingface_hub.snapshot_download(repo_id, allow_patterns=HUB_FILES)
        except Exception as exc:  # no network, no such repository, gated
            raise RuntimeFailure(f"{where}, and downloading it failed ({exc.__class__.__name__}): without network, "
                                 f"set HF_HUB_OFFLINE=1 and {how}") from None
    path = Path(found)
    check_model_dir(path)  # an older repository with only pickled weights is refused: they are never fetched
    return path


def read_config(path: Path) -> dict[str, Any]:
    """config.json, read through the checked door (regular, bounded, not too deep) and validated
    (``config_check.check_config``): damage is RuntimeFailure, a file that is no model's BadInput."""
    config = config_check.read_json(path / CONFIG)
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise BadInput(f"{path / CONFIG} names no model_type: it is not a transformers model config")
    config_check.check_config(config, path)
    return config
