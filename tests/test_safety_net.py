"""The safety net itself (issue 24): CI fails instead of skipping what it installs, a hang fails
its test instead of hanging the suite, and no test asserts on wall-clock time."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from conftest import needed, under_ci

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def test_ci_run_exports_ci_true():
    """.ci/run exports CI=true before it runs the suite (through .ci/test, which runs pytest)."""
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    export = script.index("export CI=true")
    assert export < script.index('\n.ci/test "$@"')
    assert "python -m pytest" in (REPO / ".ci" / "test").read_text(encoding="utf-8")


def test_a_missing_module_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        needed("attncli_no_such_module")
    for value in ("true", "1"):
        monkeypatch.setenv("CI", value)
        assert under_ci()
        with pytest.raises(pytest.fail.Exception, match="CI must run"):
            needed("attncli_no_such_module")
    monkeypatch.setenv("CI", "false")
    assert not under_ci()
    assert needed("json").dumps([1]) == "[1]"


def _calls(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            out.append(ast.unparse(node.func))
    return out


def test_no_test_skips_an_import_around_the_door():
    """Every optional import goes through conftest.needed (which fails under CI)."""
    offenders = [p.name for p in TESTS.rglob("*.py") if p.name != "conftest.py"
                 and {"importorskip", "pytest.importorskip"} & set(_calls(ast.parse(p.read_text(encoding="utf-8"))))]
    assert offenders == []


def test_no_test_asserts_on_wall_clock_time():
    """Timing lives in bench/; a test counts work (operations, bytes, memory) or relies on the
    per-test timeout. A clock may only bound a polling loop (waiting for a server)."""
    clock = re.compile(r"\b(time\.(monotonic|perf_counter|time|process_time)\(\))")
    offenders = []
    for path in TESTS.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            text = ast.unparse(node.test) if isinstance(node, ast.Assert) else ""
            if "deadline" in text:  # the bound of a polling loop, not a measurement
                continue
            if clock.search(text):
                offenders.append(f"{path.name}:{node.lineno}")
            if re.search(r"\b(seconds|elapsed)\b\s*[<>]", text):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_every_test_has_a_timeout():
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert 0 < int(config["timeout"]) <= 600
    assert config["timeout_method"] == "thread"  # a signal cannot stop a hang inside C code


def test_each_pause_point_is_in_the_code_once_and_inert_unless_named(monkeypatch):
    from attncli.io import faultpoints

    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "attncli").rglob("*.py"))
    for stage in faultpoints.STAGES:
        assert source.count(f'pause_at("{stage}")') == 1, stage
    for module, stages in faultpoints.STAGES_OF.items():  # listed under the module that pauses there, in order
        own = (REPO / "attncli" / module).read_text(encoding="utf-8")
        at = [own.find(f'pause_at("{stage}")') for stage in stages]
        assert -1 not in at and at == sorted(at), (module, dict(zip(stages, at)))
    assert len(faultpoints.STAGES) == sum(map(len, faultpoints.STAGES_OF.values()))  # no stage listed twice
    monkeypatch.delenv("ATTN_TEST_PAUSE_AT", raising=False)
    faultpoints.pause_at("version-written")  # returns at once
    monkeypatch.setenv("ATTN_TEST_PAUSE_AT", "start-up,link-made")
    faultpoints.pause_at("version-written")  # another stage: returns at once


def test_the_mutation_config_names_real_files_and_agrees_with_ci_mutation():
    import runpy

    script = runpy.run_path(str(REPO / ".ci" / "mutation"))
    wings = script["WINGS"]
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    ours = tomllib.loads(script["config"]([], []))["tool"]["mutmut"]  # the table .ci/mutation writes into its copy
    assert ours["also_copy"] == config["also_copy"] and ours["pytest_add_cli_args"] == config["pytest_add_cli_args"]
    assert all((REPO / name).exists() for name in config["also_copy"])
    assert sorted(config["only_mutate"]) == sorted(m for mods, _ in wings.values() for m in mods)
    assert sorted(config["pytest_add_cli_args_test_selection"]) == sorted({t for _, ts in wings.values() for t in ts})
    for mods, tests in wings.values():
        assert all(list(REPO.glob(m)) for m in mods), mods
        assert all((REPO / t).is_file() for t in tests), tests
