"""The suite holds at any temp-path length and terminal width: a sample of the tests whose output
holds a temp path (a model's directory in a title, a file in an error message) or is laid out for
the terminal, run again in a child pytest with ``--basetemp`` of several lengths and COLUMNS at 80
and 200. (A title once wrapped a column apart in the app and in ``attn matrix --model-view`` when
pytest's temp path was 29 characters long, /tmp/pytest-of-root/pytest-10 to -99; tests once read a
console an earlier test had made at its own width.) tests/conftest.py pins COLUMNS=80 and fresh
consoles for every test; a test that depends on the width sets COLUMNS itself."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# path- and width-sensitive tests: a model directory's path in a wrapped title, error messages
# that quote a path, tables and help laid out for the terminal
SAMPLE = [
    "tests/explore/test_explore_transformer.py::test_the_model_view_is_attn_matrix_model_view[keys0-start0-args0]",
    "tests/views/test_export.py::test_a_png_too_big_is_bad_input_and_writes_nothing",
    "tests/cli/test_matrix_cli.py::test_variants_lists_the_registry",
    "tests/cli/test_lookup_cli.py::test_explain_prints_the_formula",
    "tests/cli/test_matrix_cli.py::test_show_scores_and_output[output]",
]


def basetemp_of_length(length: int) -> Path:
    """A fresh, not yet existing directory whose path is exactly ``length`` characters long."""
    root = Path(tempfile.mkdtemp(prefix="attn-bt-"))
    room = length - len(str(root)) - 1
    if room < 1:
        pytest.skip(f"the temp directory {root} is too long to make a {length}-character path")
    return root / ("x" * room)


@pytest.mark.slow  # a child pytest for each
@pytest.mark.timeout(300)
@pytest.mark.parametrize("length, columns", [(29, "80"), (72, "200")])
def test_the_sample_passes_at_this_temp_path_length_and_width(length, columns):
    import shutil

    basetemp = basetemp_of_length(length)
    assert len(str(basetemp)) == length
    env = dict(os.environ, COLUMNS=columns, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                               str(basetemp), *SAMPLE], cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    finally:
        shutil.rmtree(basetemp.parent, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


# -- tests/conftest.py's fixed_terminal: these two run in this order ------------------------------


def test_a_console_made_at_40_columns(monkeypatch):
    from attncli.cli import common as cli_app

    monkeypatch.setenv("COLUMNS", "40")
    cli_app._consoles.clear()
    assert cli_app.out_console().width == 40  # cached: the fixture must not serve it to the next test


def test_the_next_test_starts_at_80_columns_with_a_fresh_console():
    from attncli.cli import common as cli_app

    assert os.environ.get("COLUMNS") == "80"
    assert cli_app.out_console().width == 80


def test_a_new_columns_value_gets_a_console_of_that_width(monkeypatch):
    """Within one test (or any caller), COLUMNS set anew gives consoles of the new width: rich reads
    COLUMNS only when a console is made, and a test's second run at COLUMNS=200 once got the
    console its first run had made at 80 (its stderr wrapped where the temp path ended)."""
    from attncli.cli import common as cli_app

    for columns in (40, 200, 40):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert cli_app.out_console().width == columns and cli_app.err_console().width == columns
