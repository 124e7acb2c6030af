"""Shared test setup: every test gets its own ATTN_HOME, and NLTK_DATA points at the corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _nltk_data() -> str | None:
    if os.environ.get("NLTK_DATA"):
        return os.environ["NLTK_DATA"]
    shared = REPO.parent / "shared" / "nltk_data"
    return str(shared) if shared.is_dir() else None


@pytest.fixture(autouse=True)
def attn_home(tmp_path, monkeypatch):
    home = tmp_path / "attn-home"
    monkeypatch.setenv("ATTN_HOME", str(home))
    monkeypatch.delenv("ATTN_MODEL", raising=False)
    nltk_data = _nltk_data()
    if nltk_data:
        monkeypatch.setenv("NLTK_DATA", nltk_data)
    return home


def skip_without_brown() -> None:
    """Skip a test that needs the Brown corpus when it is not installed; under CI (CI=true),
    where .ci/run points NLTK_DATA at it, a missing corpus is a failure, not a quiet skip."""
    from attncli import corpus

    if corpus.brown_installed():
        return
    message = "the Brown corpus is not installed: set NLTK_DATA (or run python -m nltk.downloader brown)"
    if os.environ.get("CI"):
        pytest.fail(message + "; CI must run the Brown tests")
    pytest.skip(message)
