"""attn attribute, attn circuit and attn qk from Python (attncli.pipeline: compute_gradients,
compute_qk): each result says its command line, and that command prints the same document; the
result speaks the protocol every view does (attncli.views.result)."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.errors import BadInput

needed("safetensors")
needed("tokenizers")

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog sat on the mat and the cat"  # 14 tokens each


def cli_json(command_line: str) -> dict:
    words = shlex.split(command_line)
    assert words[0] == "attn"
    r = CliRunner().invoke(app, [*words[1:], "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_python_api_and_the_command_line_make_one_result(tiny_gpt2_dir):
    from attncli.pipeline import AttributeRequest, CircuitRequest, QKRequest, compute_gradients, compute_qk
    from attncli.views.causal import AttributeResult
    from attncli.views.circuit_view import CircuitResult
    from attncli.views.qk_view import QKResult

    model = str(tiny_gpt2_dir)
    for request, kind in ((AttributeRequest(CLEAN, corrupt=CORRUPT, transformer=model, target_id=3, site="query",
                                            verify=2), AttributeResult),
                          (CircuitRequest(CLEAN, corrupt=CORRUPT, transformer=model, target_id=3, steps=2,
                                          faithfulness=0.5), CircuitResult)):
        result = compute_gradients(request)
        assert type(result) is kind and result.request is request
        assert result.command_line().startswith(f"attn {request.command} ")
        assert cli_json(result.command_line()) == json.loads(result.json_text())
        assert result._repr_svg_().startswith("<svg")
    qk = compute_qk(QKRequest(CLEAN, transformer=model, layer=1, head=2, top=5))
    assert type(qk) is QKResult
    assert "--query 13 --key 13" in qk.command_line()  # the defaults resolved: the last token, to itself
    doc = json.loads(qk.json_text())
    assert cli_json(qk.command_line()) == doc and len(doc["top"]) == 5


def test_the_compute_checks_the_request_before_loading():
    from attncli.pipeline import AttributeRequest, QKRequest, compute_gradients, compute_qk

    with pytest.raises(BadInput, match="^--site 'embed'"):
        compute_gradients(AttributeRequest(CLEAN, corrupt=CORRUPT, transformer="no-such-model", site="embed"))
    with pytest.raises(BadInput, match="^give the model with --transformer"):
        compute_qk(QKRequest(CLEAN))
