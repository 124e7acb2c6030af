"""attn ablate / patch / dla as one request, one compute, one result: the command line, explore
and Python build the same request (attncli.causal.causal_request) and get the same document; the refusals
that need no model come from the one table (attncli.rules.option_conflicts): an empty text, --json with
an export into stdout."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.causal.causal_request import AblateRequest, DlaRequest, PatchRequest
from attncli.cli.main import app
from attncli.errors import BadInput

needed("safetensors")
needed("tokenizers")

TEXT = "the cat sat on the mat"


def invoke(*args):
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})
    return r.exit_code, " ".join(r.stderr.split()), r.stdout


@pytest.mark.parametrize("command, texts", [("ablate", [""]), ("dla", [" \t "]), ("patch", ["", TEXT]),
                                            ("patch", [TEXT, "  "]), ("attribute", ["\n", TEXT])])
def test_an_empty_text_is_refused_before_the_model_loads(tiny_gpt2_dir, command, texts):
    code, err, out = invoke(command, *texts, "--transformer", str(tiny_gpt2_dir), "--target-id", "3")
    assert code == 2 and out == ""
    assert err.startswith("error: the text is empty") or err.startswith("error: the corrupted text is empty")


@pytest.mark.parametrize("command", ["ablate", "patch", "dla", "attribute"])
@pytest.mark.parametrize("fmt", ["--svg", "--png"])
def test_json_and_an_export_into_stdout_are_refused(tiny_gpt2_dir, command, fmt):
    """Both would write into the same stream: exit 2 before any work, stdout untouched (a real
    process: /proc/self/fd/1 is its own stdout)."""
    if fmt == "--png":
        needed("PIL")
    texts = [TEXT, TEXT] if command in ("patch", "attribute") else [TEXT]
    r = subprocess.run([sys.executable, "-m", "attncli", command, *texts, "--transformer", str(tiny_gpt2_dir),
                        "--target-id", "3", "--json", fmt, "/proc/self/fd/1"], capture_output=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stdout == b""
    assert b"--json and an export into stdout" in r.stderr


def test_the_python_api_and_the_command_line_make_one_result(tiny_gpt2_dir):
    from attncli.pipeline import compute_causal
    from attncli.views.causal import AblateResult, DlaResult, PatchResult

    for request, kind in ((AblateRequest(TEXT, transformer=str(tiny_gpt2_dir), target_id=3, position=2), AblateResult),
                          (PatchRequest(TEXT, transformer=str(tiny_gpt2_dir), corrupt="the cat sat on the rat",
                                        target_id=3, site="attn"), PatchResult),
                          (DlaRequest(TEXT, transformer=str(tiny_gpt2_dir), target_id=3, contrast_id=5), DlaResult)):
        result = compute_causal(request)
        assert type(result) is kind and result.request is request
        words = shlex.split(result.command_line())
        assert words[:2] == ["attn", request.command]
        code, err, out = invoke(*words[1:], "--json")
        assert code == 0, err
        assert json.loads(out) == json.loads(result.json_text())
        assert result._repr_svg_().startswith("<svg")


def test_the_request_checks_through_the_table():
    with pytest.raises(BadInput, match="^--mode 'half': choose one of zero, mean$"):
        AblateRequest(TEXT, transformer="m", mode="half").check()
    with pytest.raises(BadInput, match="^--site 'embed': choose one of resid, attn, mlp, head$"):
        PatchRequest(TEXT, transformer="m", corrupt=TEXT, site="embed").check()
    DlaRequest(TEXT).check()  # no --transformer: attn's built-in LM
    with pytest.raises(BadInput, match="^--device places a --transformer model: without one, attn's built-in LM"):
        DlaRequest(TEXT, device="cpu").check()
    DlaRequest(TEXT, transformer="m").check()
    with pytest.raises(Exception):  # frozen: a request is a value
        DlaRequest(TEXT, transformer="m").text = "x"


def test_the_tables_choices_are_the_cores():
    from attncli.rules import option_conflicts as oc
    from attncli.causal import grids

    assert oc.ABLATE_MODES == grids.MODES and oc.PATCH_SITES == tuple(grids.PATCH_SITES)


def test_explores_G_and_D_are_refused_by_the_commands_request():
    """The app's keys ask the request the command would build (the table's rows), before the model."""
    from attncli.explore.causal_view import refusal, request_of
    from attncli.explore.state import ExploreState

    blank = ExploreState(" \t ", transformer="m")
    for kind in ("ablate", "dla"):
        assert refusal(None, kind, blank).startswith("the text is empty")
        assert request_of(ExploreState(TEXT, transformer="m"), kind, 7).options()[:3] == [
            ("--transformer", "m"), ("--target", None), ("--target-id", 7)]
