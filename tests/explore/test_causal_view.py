"""attn explore's G and D keys: the head-ablation grid and the direct logit attribution of the
sentence's top prediction, the same documents as attn ablate / attn dla --json with that target,
and their command lines; an encoder without an MLM head gets a message and the view stays."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from conftest import needed

needed("textual")
needed("tokenizers")
needed("safetensors")

from typer.testing import CliRunner  # noqa: E402

from test_explore import drive, lines_of, press  # noqa: E402
from _tolerance import f32_close  # noqa: E402

from attncli.cli.main import app as cli  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402

SENTENCE = "the cat sat on the mat"


@pytest.mark.parametrize("kind", ["ablate", "dla"])
def test_the_view_is_the_commands_json_with_the_top_prediction(tiny_gpt2_dir, kind):
    from attncli.explore.checkpoint_state import command_line, compute

    state = ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir), causal_view=kind)
    res = compute(state, {})
    command = command_line(res, state)
    assert command.startswith(f"attn {kind} ") and "--target-id" in command
    result = CliRunner().invoke(cli, shlex.split(command)[1:] + ["--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(json.dumps(res.doc)) == json.loads(result.stdout)
    model = res.model
    logits = model.trace(res.enc.ids, "logits")["logits"][-1]
    assert res.doc["target"]["id"] == int(np.argmax(logits))


def test_G_and_D_draw_and_return(tiny_gpt2_dir):
    async def script(app, pilot):
        await press(app, pilot, "G")
        assert app.message == "" and app.state.causal_view == "ablate"
        text = " ".join("\n".join(lines_of(app)).split())  # the title holds the model's path: it wraps where it ends
        assert "ablate (zero)" in text and "L1" in text and "H3" in text
        await press(app, pilot, "D")
        assert app.state.causal_view == "dla" and "each head's direct contribution" in "\n".join(lines_of(app))
        await press(app, pilot, "D")
        assert app.state.causal_view is None and app.result.view is not None

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir)), size=(140, 45))


def test_an_encoder_without_a_head_is_a_message_and_the_view_stays(tiny_bert_dir):
    async def script(app, pilot):
        before = app.result
        await press(app, pilot, "G")
        assert "no masked-language-model head" in app.message and app.state.causal_view is None
        assert app.result is before
        await press(app, pilot, "D")
        assert "decoders" in app.message and app.result is before

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(100, 30))


def test_the_ablation_grid_on_the_torch_backend_is_the_commands(tiny_gpt2_dir):
    """G with --backend torch: the grid from the torch trace, its command line naming the backend,
    the same numbers as the NumPy backend's; D stays refused there, by name."""
    needed("torch")
    from attncli.explore.checkpoint_state import command_line, compute

    state = ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir), causal_view="ablate", backend="torch")
    res = compute(state, {})
    assert res.model.backend == "torch"
    command = command_line(res, state)
    assert "--backend torch" in command
    result = CliRunner().invoke(cli, shlex.split(command)[1:] + ["--json"])
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(json.loads(result.stdout)["grid"], res.doc["grid"], atol=1e-7)  # fixed: the JSON's printed digits
    fast = compute(ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir), causal_view="ablate", backend="numpy"), {})
    f32_close(res.doc["grid"], fast.doc["grid"], depth=2, length=37)  # torch beside attn's float32 grid
    from attncli.errors import BadInput
    from attncli.explore.causal_view import refusal

    assert refusal(res.model, "ablate") is None
    assert "--backend numpy" in refusal(res.model, "dla") and "torch backend" in refusal(res.model, "dla")
    with pytest.raises(BadInput):
        compute(ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir), causal_view="dla", backend="torch"), {})
