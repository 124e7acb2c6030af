"""``attn explore --transformer``: the key that cycles weights, scores and norms (s / S) goes on to the
contribution methods (alti, globenc, value-zeroing); each view drawn is ``attn matrix --json`` of the
command the app copies."""

from __future__ import annotations

import numpy as np
from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")

from test_explore import drive, lines_of, press  # noqa: E402
from test_explore_transformer import SENTENCE, last_table, transformer_json  # noqa: E402

from attncli.explore.state import ExploreState  # noqa: E402


def test_s_cycles_into_the_contribution_methods_and_draws_the_command_s_numbers(tiny_bert_dir):
    async def script(app, pilot):
        await press(app, pilot, "s", "s")  # scores, norms
        assert app.state.transformer_show() == "norms"
        for method in ("alti", "globenc", "value-zeroing"):
            await press(app, pilot, "s")
            assert app.message == "" and app.state.contribution == method and app.state.head is None
            command = app.state.command_line(explain=app.result.explainable() is None)
            assert f"--show {method}" in command and "--head" not in command and "--explain" not in command
            doc = transformer_json(command)
            assert doc["show"] == method and "rows sum to 1" in doc["formula"]
            np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits
            np.testing.assert_allclose(last_table(lines_of(app), doc["tokens"]), doc["weights"], atol=5e-4 + 1e-9)  # fixed: as drawn
            assert f"show {method}" in app.state.summary()
            assert "no explanation of a cell of --show" in "\n".join(lines_of(app, "#explain"))
        await press(app, pilot, "s")
        assert app.state.transformer_show() == "weights" and app.message == ""
        await press(app, pilot, "S")  # back: the last method
        assert app.state.contribution == "value-zeroing" and app.message == ""
        await press(app, pilot, "r")  # --rollout goes with a contribution method: its product over the layers
        assert app.message == "" and app.state.rollout
        doc = transformer_json(app.state.command_line(explain=False))
        assert doc["rollout"] is True and doc["show"] == "value-zeroing"
        np.testing.assert_allclose(app.result.view.weights, np.array(doc["weights"]), atol=1e-6)  # fixed: JSON's 6 digits

    # a head picked: the contribution methods are the whole layer's, so the key drops it
    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir), head=1), size=(160, 50))


def test_the_head_keys_are_disabled_with_the_table_s_reason_while_a_method_is_shown():
    from attncli.explore.disabled_keys import key_refusal

    state = ExploreState(SENTENCE, transformer="m", contribution="globenc")
    why = key_refusal(state, "head", (1,), heads=4, layers=2)
    assert why == ("--show globenc is one matrix per layer, each row summing to 1: drop --head (the residual and the "
                   "norms are the whole layer's)")
    assert key_refusal(state, "flag", ("rollout",), heads=4, layers=2) is None  # its rollout is the layers' product
    assert key_refusal(ExploreState(SENTENCE, transformer="m"), "head", (1,), heads=4, layers=2) is None
