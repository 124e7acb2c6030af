"""weight_hold: the budget of made weights (ATTN_WEIGHTS_BUDGET, else HOLD_BYTES) and what a Hold
keeps within it. The readers' use of it: tests/hf/test_gguf.py (GGUF), tests/hf/test_gguf_half.py
(bfloat16 / float16 safetensors)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from _gguf_fixtures import write_gguf
from conftest import needed

from attncli.cli.main import app
from attncli.errors import BadInput
from attncli.hf.formats.weight_hold import HOLD_BYTES, Hold, budget


@pytest.mark.parametrize("given,bytes_", [(None, HOLD_BYTES), ("", HOLD_BYTES), ("0", 0), ("123", 123),
                                          ("512M", 512 * 2**20), ("2g", 2 * 2**30), ("64KiB", 64 * 2**10),
                                          (" 1 GB ", 2**30)])
def test_budget_from_the_environment(monkeypatch, given, bytes_):
    if given is None:
        monkeypatch.delenv("ATTN_WEIGHTS_BUDGET", raising=False)
    else:
        monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", given)
    assert budget() == bytes_


@pytest.mark.parametrize("given", ["lots", "-1", "1.5G", "2X", "9" * 40])
def test_a_budget_that_is_no_size_is_bad_input(monkeypatch, given):
    monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", given)
    with pytest.raises(BadInput, match="ATTN_WEIGHTS_BUDGET=.* is not a size"):
        budget()


def test_a_budget_that_is_no_size_exits_2_in_one_line(tmp_path, monkeypatch):
    needed("gguf")
    write_gguf(tmp_path / "m.gguf", "llama", "Q8_0")
    monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", "lots")
    result = CliRunner().invoke(app, ["matrix", "hello", "--transformer", str(tmp_path / "m.gguf")])
    said = " ".join(result.output.split())  # (the terminal's width wraps the line)
    assert result.exit_code == 2 and result.output.count("error:") == 1 and "Traceback" not in said, result.output
    assert "error: ATTN_WEIGHTS_BUDGET='lots' is not a size" in said


def test_a_hold_keeps_a_whole_model_that_fits_else_the_layer_at_hand(monkeypatch):
    monkeypatch.setenv("ATTN_WEIGHTS_BUDGET", "100")
    a, b, table = np.zeros(10), np.zeros(3), np.zeros(12)  # 80, 24 and 96 bytes
    fits = Hold(100)
    fits.keep("a", "layers.0.", a)
    assert fits.find("a", "layers.0.") is a and fits.find("a", None) is a and fits.held == 80
    fits.keep("b", "layers.1.", b)  # 104 bytes: past the limit, kept as the layer at hand
    assert fits.held == 80 and fits.find("b", "layers.1.") is b and fits.find("b", "layers.2.") is None
    over = Hold(101)  # a model over the budget keeps nothing across passes
    over.keep("a", "layers.0.", a)
    over.keep("t", None, table)  # a table outside the layers: not kept at all
    assert over.held == 0 and over.find("a", "layers.0.") is a and over.find("t", None) is None
    over.keep("b", "layers.1.", b)  # another layer's: the first one dropped
    assert over.find("a", "layers.0.") is None and over.find("b", "layers.1.") is b
    over.extend()  # a corpus's share: the budget
    over.keep("t", None, table)
    assert over.find("t", None) is table and over.held == 96
