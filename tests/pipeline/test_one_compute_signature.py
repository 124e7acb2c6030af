"""Every compute of the pipeline has one shape (issue 48): a module ``attncli/pipeline/*_compute.py`` (and
compute_view.py, the matrix's) has one public compute, ``compute(request, model=None, *, progress=None)``,
whose request is a TableRequest (one request base: attncli.rules.option_conflicts) and whose result speaks
attncli.views.result's protocol. What else it takes is in attncli.pipeline.running (Later, Progress)."""

from __future__ import annotations

import importlib
import inspect
import typing
from pathlib import Path

import pytest

import attncli
from attncli.rules.option_conflicts import TableRequest
from attncli.views.result import Result

PIPELINE = Path(attncli.__file__).parent / "pipeline"
COMPUTES = sorted(p.stem for p in PIPELINE.glob("*.py") if p.stem.endswith("_compute") or p.stem == "compute_view")
SIGNATURE = ["request", "model", "progress"]


def _classes(hint) -> list[type]:
    """The classes of a type hint: X, Union[X, Y], Optional[X]."""
    args = typing.get_args(hint)
    return [c for c in (args or (hint,)) if c is not type(None)]


def shape_of(module) -> list[str]:
    """What is wrong with ``module``'s compute (empty: nothing)."""
    wrong = []
    others = [name for name, f in vars(module).items() if inspect.isfunction(f) and f.__module__ == module.__name__
              and name.startswith("compute") and name != "compute"]
    if others:
        wrong.append(f"computes besides compute: {others}")
    compute = getattr(module, "compute", None)
    if compute is None:
        return [*wrong, "no compute"]
    params = inspect.signature(compute).parameters
    if list(params) != SIGNATURE:
        return [*wrong, f"compute{inspect.signature(compute)}: not compute(request, model=None, *, progress=None)"]
    request, model, progress = params.values()
    if model.default is not None or model.kind is not model.POSITIONAL_OR_KEYWORD \
            or progress.default is not None or progress.kind is not progress.KEYWORD_ONLY:
        wrong.append("model=None (positional) and progress=None (keyword-only)")
    hints = typing.get_type_hints(compute)
    if not all(isinstance(c, type) and issubclass(c, TableRequest) for c in _classes(hints.get("request"))):
        wrong.append(f"request {hints.get('request')}: not a TableRequest")
    if "return" not in hints or not all(isinstance(c, type) and issubclass(c, Result) for c in _classes(hints["return"])):
        wrong.append(f"returns {hints.get('return')}: not a Result")
    return wrong


def test_the_pipeline_has_its_computes():
    assert {"compute_view", "causal_compute", "gradient_compute", "lens_compute", "compare_compute", "heads_compute",
            "qk_compute", "sinks_compute", "stats_compute", "pairs_compute"} <= set(COMPUTES)


@pytest.mark.parametrize("name", COMPUTES)
def test_every_compute_takes_one_request_and_returns_a_result(name):
    assert shape_of(importlib.import_module(f"attncli.pipeline.{name}")) == []


def test_the_reader_sees_a_compute_of_another_shape():
    import types

    from attncli.pipeline.lens_compute import LensRequest

    module = types.ModuleType("attncli.pipeline.fake_compute")
    exec("from typing import Any\n"
         "def compute(request: LensRequest, load_model=None) -> dict: ...\n"
         "def compute_more(request: LensRequest): ...\n", {"LensRequest": LensRequest, "__name__": module.__name__},
         vars(module))
    assert len(shape_of(module)) == 2
