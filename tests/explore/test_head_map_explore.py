"""``attn explore --transformer``'s head map (key H, attncli/explore/head_map_view.py): every layer x
head of a decoder coloured by one role read from its weights, the numbers ``attn heads --weights
--role ROLE --json`` gives; s / S cycle the role without reading the weights again, H returns; the
export and the copied command are that command's; an encoder is refused at once, the view staying.
A snapshot at 80 columns."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")

from test_explore import drive, lines_of, press, settle  # noqa: E402

from attncli.explore.state import ExploreState  # noqa: E402

SENTENCE = "time flies like an arrow"


def weights_doc(path) -> dict:
    from attncli.pipeline.heads_compute import HeadsRequest, compute

    return compute(HeadsRequest(transformer=str(path), weights=True)).doc


def drawn_map(lines: list[str], layers: int) -> np.ndarray:
    """The head map's numbers as drawn: one row per layer ("L0  0.12 -0.40 ..."), NaN for '·'."""
    rows = {}
    for line in lines:
        m = re.match(r"^L(\d+)\s+((?:-?\d+\.\d+|·)(?:\s+(?:-?\d+\.\d+|·))*)\s*$", line.strip())
        if m and int(m.group(1)) < layers and int(m.group(1)) not in rows:
            rows[int(m.group(1))] = [np.nan if c == "·" else float(c) for c in m.group(2).split()]
    return np.array([rows[layer] for layer in range(layers)])


def role_map(doc: dict, role: str) -> np.ndarray:
    out = np.full((doc["layers"], doc["heads_per_layer"]), np.nan)
    for e in doc["heads"]:
        if e[role] is not None:
            out[e["layer"], e["head"]] = e[role]
    return out


def test_H_draws_the_head_map_and_s_cycles_its_role(tiny_gpt2_dir, tmp_path):
    doc = weights_doc(tiny_gpt2_dir)

    async def script(app, pilot):
        await press(app, pilot, "H")
        assert app.message == "" and app.state.head_map == "copying"
        drawn = drawn_map(lines_of(app), doc["layers"])
        np.testing.assert_allclose(drawn, role_map(doc, "copying"), atol=5e-3 + 1e-9)  # fixed: drawn with 2 decimals
        assert app.state.command_line() == f"attn heads --transformer {tiny_gpt2_dir} --weights --role copying"
        assert "H returns" in "\n".join(lines_of(app, "#explain"))
        models = len(app._models)
        await press(app, pilot, "s")
        assert app.state.head_map == "q_in" and len(app._models) == models  # the weights are not read again
        drawn = drawn_map(lines_of(app), doc["layers"])
        np.testing.assert_allclose(drawn, role_map(doc, "q_in"), atol=5e-3 + 1e-9)  # fixed: 2 decimals; layer 0: '·'
        assert "largest Q-composition" in " ".join(" ".join(lines_of(app)).split())
        await press(app, pilot, "S", "S")
        assert app.state.head_map == "v_in"
        from attncli.explore.state import export

        svg = export(app.result, app.state, "map.svg", tmp_path).read_text()  # what x writes
        assert json.loads(export(app.result, app.state, "map.json", tmp_path).read_text())["role"] == "v_in"
        assert svg.count('class="cell"') == doc["layers"] * doc["heads_per_layer"] - doc["heads_per_layer"]  # L0: none
        await press(app, pilot, "H")
        assert app.state.head_map is None and getattr(app.result, "kind", None) == "pretrained"

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir)), size=(140, 45), cwd=tmp_path)


def test_H_on_an_encoder_is_a_message_and_the_view_stays(tiny_bert_dir):
    async def script(app, pilot):
        before = app.result
        await press(app, pilot, "H")
        assert app.message.startswith("the head map reads a decoder's heads") and "is an encoder" in app.message
        assert app.state.head_map is None and app.result is before

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_bert_dir)), size=(120, 40))


def test_snapshot_at_80_columns(snap_compare, tiny_gpt2_dir, tmp_path, monkeypatch):
    """The head map as drawn at 80 x 40 (pytest-textual-snapshot; tests/explore/__snapshots__/), the
    model named by a relative path so that the title reads the same on every machine."""
    needed("pytest_textual_snapshot", reason="the snapshot tests need pytest-textual-snapshot")
    from attncli.explore.app import ExploreApp

    (tmp_path / "tiny-gpt2").symlink_to(tiny_gpt2_dir, target_is_directory=True)
    monkeypatch.chdir(tmp_path)

    async def run_before(pilot) -> None:
        app = pilot.app
        await settle(app, pilot)
        await press(app, pilot, "H")
        assert app.message == ""
        await pilot.pause(0.2)  # as test_explore_beyond's snapshots: draw again at the settled width
        app._draw()
        await settle(app, pilot)

    assert snap_compare(ExploreApp(ExploreState(SENTENCE, transformer="tiny-gpt2"), cwd=tmp_path), terminal_size=(80, 40),
                        run_before=run_before)


@pytest.mark.parametrize("role", ["copying", "k_in"])
def test_the_state_says_the_head_map_command(role):
    state = ExploreState(SENTENCE, transformer="gpt2", head_map=role)
    assert state.command_line() == f"attn heads --transformer gpt2 --weights --role {role}"
    assert "head map" in state.summary() and state.next_head_role(-1).head_map != role
