"""attn lens refuses in its own name, and says which families its NumPy pass reads: an encoder
("attn lens needs a causal LM ...", never "attn generate"), and a decoder on the transformers path
(GPT-2 and the Llama family, not "GPT-2 family" alone)."""

from __future__ import annotations

import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.hf.families import gpt2, llama
from attncli.hf.families.registry import DECODER_FAMILIES, NUMPY_MODEL_TYPES

runner = CliRunner()
FAMILIES = "GPT-2 and the Llama family (gemma, gemma3_text, llama, mistral, phi3, qwen2, qwen3)"


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_families_named_are_the_decoders_the_numpy_pass_runs():
    assert DECODER_FAMILIES == FAMILIES
    assert gpt2.MODEL_TYPES | llama.MODEL_TYPES <= NUMPY_MODEL_TYPES
    assert all(t in DECODER_FAMILIES for t in llama.MODEL_TYPES)


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "minilm_dir"])
def test_lens_on_an_encoder_names_attn_lens_and_the_families(fixture, request):
    path = request.getfixturevalue(fixture)
    result = runner.invoke(app, ["lens", "time flies", "--transformer", str(path)])
    assert result.exit_code == 2, result.output
    said = flat(result.stderr)
    assert said.endswith("is an encoder: it predicts no next token, attn lens needs a causal LM that attn runs in "
                         f"NumPy: {FAMILIES}")
    assert "attn generate" not in said


def test_generate_on_an_encoder_still_names_attn_generate(tiny_bert_dir):
    result = runner.invoke(app, ["generate", "time flies", "--transformer", str(tiny_bert_dir)])
    assert result.exit_code == 2
    assert "attn generate needs a causal LM" in flat(result.stderr) and "attn lens" not in result.stderr


def test_lens_on_a_decoder_the_numpy_pass_does_not_run_names_the_families(tmp_path):
    needed("torch")
    needed("transformers")
    from _transformer_fixtures import build_opt_lm

    result = runner.invoke(app, ["lens", "the cat sat", "--transformer", str(build_opt_lm(tmp_path / "opt"))])
    assert result.exit_code == 2, result.output
    said = flat(result.stderr)
    assert f"the logit lens reads attn's own NumPy forward pass, which runs {FAMILIES};" in said
    assert "runs on the torch backend (model_type 'opt')" in said
    assert "(GPT-2 family)" not in said


def test_explore_says_the_same_families(tiny_bert_dir):
    from attncli.explore.lens_compare import lens_refusal
    from attncli.hf import load

    message = lens_refusal(load(str(tiny_bert_dir)))
    assert message.endswith(f"start attn explore with a decoder attn runs in NumPy: {FAMILIES}")
