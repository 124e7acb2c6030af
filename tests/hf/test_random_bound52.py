"""attn heads --random N's memory, issue 52: each repeated random sequence's attention is
materialized whole, (L, h, T, T) float64 with T = 2N plus the leading specials, and N was bounded
only by the model's positions and 4,096: --random 4,096 asked SmolLM2-135M (30 layers x 9 heads)
for 135 GiB and Gemma-3-270M (18 x 4) for 36 GiB. Now an N whose attention passes
head_roles.RANDOM_ATTENTION_BYTES (2 GiB) is bad input before any pass, naming the largest N that fits."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from conftest import needed

from attncli.errors import BadInput
from attncli.pipeline import head_roles
from attncli.pipeline.head_roles import random_report


def fake(layers: int, heads: int, positions: int = 32768):
    """A decoder of that shape whose pass must not run (a BOS in front of every text)."""
    def no_pass(ids):
        raise AssertionError("a pass ran before the refusal")
    return SimpleNamespace(layers=layers, heads=heads, max_positions=positions, is_decoder=True,
                           encode=lambda text: SimpleNamespace(ids=[1, 7], special=[True, False]),
                           logits_and_attentions=no_pass, special_ids={1}, vocab_size=50_000, name="fake")


@pytest.mark.parametrize("layers, heads, most", [(30, 9, 498), (18, 4, 964)])  # SmolLM2-135M, Gemma-3-270M
def test_a_random_length_whose_attention_passes_the_budget_is_refused_before_any_pass(layers, heads, most):
    T = 2 * most + 1
    assert layers * heads * 8 * T ** 2 <= head_roles.RANDOM_ATTENTION_BYTES < layers * heads * 8 * (T + 2) ** 2
    for n in (most + 1, 4096):
        with pytest.raises(BadInput, match=rf"--random {n}: .* at most --random {most} for this model"):
            random_report(fake(layers, heads), length=n, count=1)


def test_the_largest_length_that_fits_runs_and_one_more_is_refused(tmp_path, monkeypatch):
    needed("tokenizers")
    needed("safetensors")
    from _llama_fixtures import build_decoder
    from attncli.cli.main import app

    path = build_decoder("llama", tmp_path / "m")  # 2 layers x 4 heads, 64 positions, a BOS in front
    budget = 2 * 4 * 8 * 21 ** 2  # T = 21: --random 10 fits, 11 does not
    monkeypatch.setattr(head_roles, "RANDOM_ATTENTION_BYTES", budget)
    assert (math.isqrt(budget // 64) - 1) // 2 == 10
    ok = CliRunner().invoke(app, ["heads", "--transformer", str(path), "--random", "10", "--sentences", "1", "--json"])
    assert ok.exit_code == 0, ok.output
    over = CliRunner().invoke(app, ["heads", "--transformer", str(path), "--random", "11", "--sentences", "1"])
    said = " ".join(over.stderr.split())
    assert over.exit_code == 2 and "--random 11: one sequence's attention" in said, said
    assert "at most --random 10 for this model" in said and "Traceback" not in over.output
