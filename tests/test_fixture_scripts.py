"""The fixture scripts the docs run from a clone (`python tests/_llama_head_fixtures.py FOLDER`,
`python tests/_seq2seq_fixtures.py t5 FOLDER`): without the test extra (pytest, torch or
transformers hidden, as on a machine without them) each ends in one line naming what is missing
and how to install it, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HIDE = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
script = sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize("hidden", ["pytest", "torch", "transformers"])
@pytest.mark.parametrize("script,args", [("_llama_head_fixtures.py", []), ("_seq2seq_fixtures.py", ["t5"])],
                         ids=["llama-heads", "seq2seq"])
def test_a_fixture_script_without_the_test_extra_says_what_is_missing(tmp_path, hidden, script, args):
    result = subprocess.run([sys.executable, "-c", HIDE, hidden, str(REPO / "tests" / script), *args,
                             str(tmp_path / "model")], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    line = " ".join(result.stderr.split())  # (transformers warns on its own when torch is missing)
    assert f"error: building the model needs {hidden}," in line and "pip install -e '.[test]'" in line, line
    assert not (tmp_path / "model").exists() or not any((tmp_path / "model").iterdir())


def test_the_folders_the_docs_build_are_ignored_by_git():
    """A reader who follows the docs in the clone builds these folders: git status stays clean."""
    import re

    built = {line.split()[-1] for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
             for line in page.read_text(encoding="utf-8").splitlines()
             if re.match(r"\$ python tests/_\w+\.py ", line)}
    ignored = {line.strip() for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()}
    assert built and {"induction-llama", "tiny-t5"} <= built
    assert not {f"/{folder}/" for folder in built} - ignored
