"""Gemma 3 and Qwen3 config fields read as transformers 5 reads them at the edges, issue 52, each
case against transformers' own eager pass on the same edited folder (attentions and logits within
float32 rounding, or both refusing):

- a setting of a layer kind the model has no layer of (a yarn or a negative factor on
  full_attention when every layer is sliding) is not read: Gemma3RotaryEmbedding builds only the
  kinds layer_types holds (attn refused the folder);
- partial_rotary_factor beside Gemma 3's default RoPE is not read: its default RoPE rotates whole
  heads (attn refused the folder);
- a null sliding_window fails transformers' Gemma 3 even when every layer is global (it makes its
  sliding mask for every model): attn refuses it too (it ran the folder);
- a float sliding_window (2.0) is refused by Qwen3Config (strict int | None): attn refuses it too
  (it ran a window of 2);
- Gemma 3's sliding_window_pattern is any number but 0 (layer i global when (i + 1) % pattern is 0,
  Python's %), Qwen3's max_window_layers any integer (a negative one: every layer sliding): attn
  refused a negative or fractional pattern and a negative max_window_layers.
Tiny random models from tests/_llama_fixtures.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")
torch = needed("torch")
transformers = needed("transformers")

from _llama_fixtures import decoders_in  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402

torch.set_num_threads(1)
TEXT = "the cat sat on the mat and the dog sat on the log"
SLIDING, FULL = "sliding_attention", "full_attention"
LOCAL = {"rope_type": "default", "rope_theta": 100.0}
CASES = [  # (family, fields set, "ran" or "refused")
    ("gemma3", {"layer_types": [SLIDING] * 2, "rope_parameters": {SLIDING: LOCAL, FULL: {"rope_type": "yarn",
                                                                                        "factor": 2.0}}}, "ran"),
    ("gemma3", {"layer_types": [SLIDING] * 2, "rope_parameters": {SLIDING: LOCAL, FULL: {"rope_type": "linear",
                                                                                        "factor": -2.0}}}, "ran"),
    ("gemma3", {"layer_types": [FULL] * 2, "rope_parameters": {SLIDING: {"rope_type": "linear", "rope_theta": "x"},
                                                                FULL: {"rope_type": "default", "rope_theta": 50.0}}},
     "ran"),
    ("gemma3", {"partial_rotary_factor": 0.5}, "ran"),
    ("gemma3", {"partial_rotary_factor": 1.5}, "ran"),
    ("gemma3", {"rope_parameters": {SLIDING: {**LOCAL, "partial_rotary_factor": 0.25},
                                    FULL: {"rope_type": "default", "rope_theta": 5000.0}}}, "ran"),
    ("gemma3", {"rope_parameters": {SLIDING: {"rope_type": "linear", "rope_theta": 100.0, "factor": 4.0,
                                              "partial_rotary_factor": 0.5},
                                    FULL: {"rope_type": "default", "rope_theta": 5000.0}}}, "refused"),
    ("gemma3", {"sliding_window": None, "layer_types": [FULL] * 2}, "refused"),
    ("gemma3", {"layer_types": None, "sliding_window_pattern": -2}, "ran"),  # Python's %: layer 1 global
    ("gemma3", {"layer_types": None, "sliding_window_pattern": 1.5}, "ran"),
    ("gemma3", {"layer_types": None, "sliding_window_pattern": 0}, "refused"),
    ("qwen3", {"layer_types": None, "max_window_layers": -1}, "ran"),  # every layer sliding
    ("qwen3", {"sliding_window": 2.0}, "refused"),
    ("qwen3", {"sliding_window": 2}, "ran"),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return decoders_in(tmp_path_factory.mktemp("meaning52"))


def theirs(path: Path, ids: list[int]):
    """transformers' (attentions (L, h, T, T), logits (T, V)) float64, or None when it will not run the folder."""
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager",
                                                                  dtype=torch.float32).eval()
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
    except Exception:
        return None
    return np.stack([a[0].double().numpy() for a in out.attentions]), out.logits[0].double().numpy()


@pytest.mark.parametrize("kind, changes, outcome", CASES, ids=[f"{k}-{i}" for i, (k, *_) in enumerate(CASES)])
def test_an_edge_field_reads_as_transformers_reads_it(kind, changes, outcome, folders, tmp_path):
    path = tmp_path / "m"
    shutil.copytree(folders(kind), path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **changes}))
    if outcome == "refused":
        with pytest.raises(BadInput, match="the numpy backend cannot run"):
            load(str(path), backend="numpy")
        assert theirs(path, [1, 5, 7, 9]) is None  # transformers will not run it either
        return
    model = load(str(path), backend="numpy")
    ids = model.encode(TEXT).ids
    logits, att = model.logits_and_attentions(ids)  # (T, V), (L, h, T, T)
    want = theirs(path, ids)
    assert want is not None
    size = f32_size(path)
    f32_close(att, want[0], *size, per_element=True, what=f"attentions with {changes}")
    f32_close(logits, want[1], *size, what=f"logits with {changes}")


@pytest.mark.parametrize("value", [[1], {"name": "gelu"}, 3])
def test_a_hidden_activation_that_is_no_name_is_refused_naming_the_field(value, folders, tmp_path):
    """Gemma3TextConfig's hidden_activation is a str: a list or a dict was refused as "lacks or
    garbles unhashable type: 'list'", the field unnamed."""
    from typer.testing import CliRunner

    from attncli.cli.main import app

    path = tmp_path / "m"
    shutil.copytree(folders("gemma3"), path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "hidden_activation": value}))
    result = CliRunner().invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "'hidden_activation' (" in said and "unhashable" not in said, said


def test_a_qwen3_layer_types_of_lists_is_refused_naming_the_field(folders, tmp_path):
    """Each of layer_types' items a list: refused as "lacks or garbles unhashable type: 'list'" before."""
    from typer.testing import CliRunner

    from attncli.cli.main import app

    path = tmp_path / "m"
    shutil.copytree(folders("qwen3"), path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "layer_types": [["full_attention"]] * 2}))
    result = CliRunner().invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "'layer_types' (one of" in said and "unhashable" not in said, said
