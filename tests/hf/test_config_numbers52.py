"""Numbers no float holds in a Gemma 3 or Qwen3 config.json (issue 52): JSON's integers have no
bound, and math.isfinite / float() raise OverflowError past 1e308, so a 400-digit
query_pre_attn_scalar or rms_norm_eps ended as "internal error" (exit 1, a bug in attn). Each is
now bad input naming the field (exit 2; damage, exit 1, for the fields config_check bounds), as
is an integer past torch's int64, where transformers fails too ("Overflow when unpacking long long"
for a sliding_window of 10^20). Tiny random models from tests/_llama_fixtures.py."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")
needed("transformers")

from typer.testing import CliRunner  # noqa: E402

from _llama_fixtures import decoders_in  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.hf.checks.config_defaults import finite  # noqa: E402

HUGE = 10**400  # a JSON integer past float's range
CASES = [  # (family, fields set, fields dropped, exit code, the field the message names)
    ("gemma3", {"query_pre_attn_scalar": HUGE}, (), 2, "query_pre_attn_scalar"),
    ("gemma3", {"sliding_window": HUGE}, (), 2, "sliding_window"),
    ("gemma3", {"sliding_window": 10**20}, (), 2, "sliding_window"),  # past int64: transformers fails on it too
    ("gemma3", {"sliding_window_pattern": HUGE}, ("layer_types",), 2, "sliding_window_pattern"),
    ("gemma3", {"rope_local_base_freq": HUGE, "rope_parameters": None}, (), 2, "rope_theta"),
    ("gemma3", {"rms_norm_eps": HUGE}, (), 1, "rms_norm_eps"),
    ("gemma3", {"attention_dropout": HUGE}, (), 1, "attention_dropout"),
    ("qwen3", {"sliding_window": HUGE}, (), 2, "sliding_window"),
    ("qwen3", {"rope_parameters": {"rope_type": "default", "rope_theta": HUGE}}, (), 2, "rope_theta"),
    ("qwen3", {"rope_parameters": {"rope_type": "linear", "rope_theta": 100.0, "factor": HUGE}}, (), 2, "factor"),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return decoders_in(tmp_path_factory.mktemp("numbers52"))


@pytest.mark.parametrize("kind, changes, drop, code, key", CASES,
                         ids=[f"{k}-{'-'.join(c)}-{len(str(next(iter(c.values()))))}" for k, c, *_ in CASES])
def test_a_number_past_float_or_int64_is_refused_naming_its_field(kind, changes, drop, code, key, folders, tmp_path):
    path = tmp_path / "m"
    shutil.copytree(folders(kind), path)
    config = json.loads((path / "config.json").read_text())
    for k in drop:
        del config[k]
    (path / "config.json").write_text(json.dumps({**config, **changes}))
    result = CliRunner().invoke(app, ["matrix", "the cat sat", "--transformer", str(path), "--backend", "numpy",
                                      "--json"])
    text = " ".join(result.stderr.split())
    assert result.exit_code == code, (result.exit_code, text, result.exception)
    assert key in text and "internal error" not in text and "Traceback" not in result.output, text
    assert len(text) < 400, text  # the number cut short, not 400 digits


def test_finite_is_a_number_within_float_and_int64():
    assert all(finite(v) for v in (0, -3, 2.5, 2**63 - 1, -(2**63) + 1, 1e308))
    assert not any(finite(v) for v in (True, None, "1", float("nan"), float("inf"), 2**63, -(2**63), HUGE))
