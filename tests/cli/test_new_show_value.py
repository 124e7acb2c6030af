"""A new --show value touches few files (issue 48's must-show: at most 4): its name in the conflict
table (attncli/rules/option_conflicts.py), its computation (pipeline/compute_view.py), its drawing
(pipeline/view_result.py) and its help sentence (cli/options.py). This test adds a fake one to a copy
of the package, in the one place its name is declared, and checks that every surface that lists the
values takes it: Typer's choices of attn matrix and explore, the word-vector path's refusal, the
--transformer path (which draws the weights for a value it does not compute), and the command line a
view writes of itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import attncli

# what a new --show value edits: the files the test below edits, and those a real view adds (never more than 4)
TOUCHED = {"attncli/rules/option_conflicts.py": 'TRANSFORMER_SHOWS = ("weights", "scores", "norms", *CONTRIBUTIONS)'}
A_REAL_VIEW_ADDS = ("attncli/pipeline/compute_view.py", "attncli/pipeline/view_result.py", "attncli/cli/options.py")


def test_a_new_show_value_is_one_edit_of_the_conflict_table(tmp_path, tiny_gpt2_dir):
    assert len(TOUCHED) + len(A_REAL_VIEW_ADDS) <= 4
    copy = tmp_path / "attncli"
    shutil.copytree(Path(attncli.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, line in TOUCHED.items():
        path = tmp_path / name
        text = path.read_text(encoding="utf-8")
        assert text.count(line) == 1, f"{name} no longer declares the values in one line"
        path.write_text(text.replace(line, line.replace('"norms", ', '"norms", "fake", ')), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "100"}

    def attn(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)

    refused = attn("matrix", "time flies", "--show", "fake")
    assert refused.returncode == 2
    assert " ".join(refused.stderr.split()) == ("error: --show fake needs --transformer NAME_OR_PATH (the value "
                                                "vectors of a pretrained model)")
    drawn = attn("matrix", "time flies like an arrow", "--transformer", str(tiny_gpt2_dir), "--show", "fake", "--json")
    assert drawn.returncode == 0, drawn.stderr
    assert json.loads(drawn.stdout)["show"] == "fake"
    written = subprocess.run([sys.executable, "-c", "from attncli.pipeline import ViewRequest; "
                              "print(ViewRequest('t', transformer='g', show='fake').command_line())"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert written.stdout.strip() == "attn matrix t --transformer g --show fake"
    assert attn("explore", "--show", "fake", "--help").returncode == 0
