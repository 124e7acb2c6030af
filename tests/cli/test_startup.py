"""Start-up at the floor (issue 12): what `attn lookup` and `attn matrix` import, in a fresh process.

The classic commands need Python, NumPy, the command line and their own code, nothing more: each
module below costs tens of milliseconds to seconds on every run. pydantic arrived with Typer
0.29 (it coerces every option through a TypeAdapter, about 0.13 s), which is why pyproject.toml
bounds typer below 0.29 (CONTRIBUTING.md, "Dependencies, and why").
"""

from __future__ import annotations

from importlib.metadata import version

import pytest
from conftest import _needed_under_ci

from _probe import imported_by


HEAVY = ("pydantic", "torch", "transformers", "gensim", "nltk", "scipy", "tokenizers", "safetensors", "textual",
         "accelerate")

COMMANDS = {
    "lookup": ["lookup", "colour", "--json"],
    "matrix": ["matrix", "time flies like an arrow", "--causal", "--json"],
    "matrix-table": ["matrix", "time flies like an arrow"],
    "lookup-table": ["lookup", "colour"],
}

def _typer_within_bound() -> bool:
    major, minor = (int(p) for p in version("typer").split(".")[:2])
    return (major, minor) < (0, 29)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_classic_commands_import_nothing_heavy(name):
    modules, out = imported_by(COMMANDS[name])
    assert out.strip(), "the command printed nothing"
    heavy = sorted(m for m in HEAVY if m in modules and m != "pydantic")
    assert heavy == [], f"attn {' '.join(COMMANDS[name])} imported {heavy}"


@pytest.mark.parametrize("name", ["lookup", "matrix"])
def test_classic_commands_do_not_import_pydantic(name):
    if not _typer_within_bound():
        _needed_under_ci(f"typer {version('typer')} is installed, outside pyproject's typer<0.29 (it always imports "
                    "pydantic): pip install 'typer>=0.12,<0.29'")
    modules, _ = imported_by(COMMANDS[name])
    assert "pydantic" not in modules


def test_the_probe_sees_what_a_command_imports():
    """The probe itself works: the JSON commands import json and numpy, the tables import rich."""
    modules, _ = imported_by(COMMANDS["lookup"])
    assert {"json", "numpy", "attncli"} <= modules
    modules, _ = imported_by(COMMANDS["matrix-table"])
    assert "rich" in modules


LOOKUP_PIPELINE = {"attncli.pipeline", "attncli.pipeline.lookup_compute", "attncli.pipeline.running"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_classic_commands_do_not_load_the_model_wings(name):
    """attn's own forward passes (attncli.hf) and the pipeline load with a model: a lookup or a
    word-vector matrix pays for neither (cli/lookup.py and cli/matrix.py reach them lazily); a lookup's
    own request and compute (LOOKUP_PIPELINE) are the pipeline's and load no model wing."""
    modules, _ = imported_by(COMMANDS[name], full=True)
    assert "attncli.cli.main" in modules  # the probe sees whole names
    own = LOOKUP_PIPELINE if COMMANDS[name][0] == "lookup" else set()
    loaded = sorted(m for m in modules if (m == "attncli.hf" or m.startswith(("attncli.hf.", "attncli.pipeline")))
                    and m not in own)
    assert loaded == [], f"attn {' '.join(COMMANDS[name])} imported {loaded}"
