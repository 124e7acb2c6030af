"""attn explore's Q: the QK split of the cursor's cell beside its explanation, on a tiny GPT-2 and a
tiny Llama. The panel's parts are attn qk's (hf/methods/qk_attribution.qk_parts on a model loaded here),
they add up to the view's own score (--explain's arithmetic), the numbers drawn are the
document's, the split follows the cursor, and a model or a view that cannot give one is refused
by name."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import needed

needed("textual", reason="attn explore needs the explore extra (textual)")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder, build_mpnet  # noqa: E402
from _tolerance import f32_atol  # noqa: E402
from _transformer_fixtures import build_gpt2  # noqa: E402
from test_explore import drive, lines_of, press  # noqa: E402

from attncli.explore.state import ExploreState  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.qk_attribution import qk_parts  # noqa: E402

TEXT = "the cat sat on the mat and the dog sat"
BUILD = {"gpt2": lambda d: build_gpt2(d), "llama3": lambda d: build_decoder("llama3", d)}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    made = {}

    def get(kind):
        if kind not in made:
            made[kind] = BUILD[kind](tmp_path_factory.mktemp(kind) / kind)
        return made[kind]
    return get


def drawn_split(lines: list[str]) -> tuple[list[float], float, float]:
    """The top parts' values and the check line's sum and score, as the panel draws them."""
    text = "\n".join(lines)
    top = text.split("QK split of this cell", 1)[1].split("by query side", 1)[0]
    values = [float(m) for m in re.findall(r"^\s*\S+\s+\S+\s+([+-]\d+\.\d{4})\s", top, flags=re.M)]
    m = re.search(r"sum of every part = ([+-]\d+\.\d+); the score = ([+-]\d+\.\d+)", " ".join(text.split()))
    return values, float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("kind", ["gpt2", "llama3"])
def test_the_split_is_attn_qks_and_adds_up_to_the_views_score(model_dir, kind):
    path = model_dir(kind)
    model = load(str(path), backend="numpy")  # a model of the test's own, for the reference split
    enc = model.encode(TEXT)
    T = len(enc.ids)
    layer, head, i, j = model.layers - 1, 1, T - 1, T - 3
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "Q")
        seen["message"], seen["doc"] = app.message, app.qk_doc
        seen["explained"] = app.explanation["score"]
        seen["lines"] = lines_of(app, "#explain")
        await press(app, pilot, "left")  # the split follows the cursor
        seen["moved"] = app.qk_doc
        await press(app, pilot, "Q")
        seen["off"] = (app.qk_doc, "QK split" in "\n".join(lines_of(app, "#explain")))

    drive(script, ExploreState(TEXT, transformer=str(path), layer=layer, head=head, cursor=(i, j)), size=(160, 80))
    assert seen["message"] == ""
    doc, ref = seen["doc"], qk_parts(model, enc, layer, head, i, j)
    assert (doc["layer"], doc["head"], doc["query"]["position"], doc["key"]["position"]) == (layer, head, i, j)
    assert doc["components"] == ref.labels
    np.testing.assert_allclose(doc["parts"], ref.parts, rtol=0, atol=1e-12)  # the same float64 arithmetic
    scale = float(np.abs(ref.parts).sum())  # the parts' size bounds the rounding of their sum
    atol = f32_atol(scale, depth=model.layers + 1, length=model.arch.d)
    assert abs(np.sum(doc["parts"]) - doc["score"]) <= atol
    assert abs(np.sum(doc["parts"]) - seen["explained"]) <= atol  # the explanation's score, beside it
    values, drawn_sum, drawn_score = drawn_split(seen["lines"])
    assert values == [round(p["value"], 4) for p in doc["top"]] and len(values) == 8
    assert abs(drawn_sum - doc["sum"]) <= 1e-6 and abs(drawn_score - doc["score"]) <= 1e-6  # fixed: as drawn
    moved = qk_parts(model, enc, layer, head, i, j - 1)
    assert seen["moved"]["key"]["position"] == j - 1
    np.testing.assert_allclose(seen["moved"]["parts"], moved.parts, rtol=0, atol=1e-12)
    assert seen["off"] == (None, False)


def test_a_view_without_one_head_or_a_model_without_the_split_is_refused_by_name(model_dir, tmp_path):
    gpt2 = str(model_dir("gpt2"))
    seen = {}

    async def all_heads(app, pilot):
        await press(app, pilot, "Q")
        seen["all heads"] = (app.message, app.qk_on)

    async def word_vectors(app, pilot):
        await press(app, pilot, "Q")
        seen["word vectors"] = app.message

    async def mpnet(app, pilot):
        await press(app, pilot, "Q")
        seen["mpnet"] = (app.message, app.qk_on)

    drive(all_heads, ExploreState(TEXT, transformer=gpt2), size=(120, 40))
    drive(word_vectors, ExploreState(TEXT), size=(120, 40))
    drive(mpnet, ExploreState(TEXT, transformer=str(build_mpnet(tmp_path / "mpnet")), head=0), size=(120, 40))
    assert "pick a head" in seen["all heads"][0] and seen["all heads"][1] is False
    assert "--transformer" in seen["word vectors"]
    message, on = seen["mpnet"]
    assert not on and "needs attention scores that are q k^T alone" in message
    assert "mpnet" in message and "relative position bias" in message


def test_on_the_torch_backend_the_split_is_refused_by_name(model_dir):
    needed("torch")
    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "Q")
        seen["message"] = app.message

    drive(script, ExploreState(TEXT, transformer=str(model_dir("gpt2")), head=0, backend="torch"), size=(120, 40))
    assert "NumPy pass" in seen["message"] and "torch" in seen["message"]


def test_the_split_on_screen_is_in_the_export(model_dir, tmp_path):
    """x with the split shown: the .json holds attn qk --json's document of the cell under "qk_split"
    beside attn matrix --json --explain's, the .svg draws it with its command line; a sentence's
    control characters stay escaped in both; with Q off the export is the view's alone."""
    import json
    import shlex

    from typer.testing import CliRunner

    from attncli.cli.main import app as cli
    from attncli.explore.qk_split import command_line
    from test_explore import settle

    text = "the cat \x1b[2J sat on the mat"  # ESC would clear a terminal: escaped in every export
    path = str(model_dir("gpt2"))
    seen = {}

    async def export(app, pilot, name):
        await press(app, pilot, "x")
        app.screen.query_one("#export-path").value = name
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.message == f"wrote {tmp_path / name}", app.message

    async def script(app, pilot):
        await press(app, pilot, "Q")
        seen["doc"], seen["state"] = app.qk_doc, app.state
        await export(app, pilot, "split.json")
        await export(app, pilot, "split.svg")
        await press(app, pilot, "Q")
        await export(app, pilot, "plain.json")

    drive(script, ExploreState(text, transformer=path, layer=1, head=2, cursor=(5, 2)), size=(160, 60), cwd=tmp_path)
    doc, state = seen["doc"], seen["state"]
    assert doc is not None and (doc["layer"], doc["head"]) == (1, 2)
    raw = (tmp_path / "split.json").read_text(encoding="utf-8")
    assert "\x1b" not in raw
    exported, plain = json.loads(raw), json.loads((tmp_path / "plain.json").read_text(encoding="utf-8"))
    qk = CliRunner().invoke(cli, [*shlex.split(command_line(doc, state))[1:], "--json"])
    assert qk.exit_code == 0, qk.output
    assert exported.pop("qk_split") == json.loads(qk.stdout) and "qk_split" not in plain
    assert exported == plain  # the rest: the view's own document, as Q off exports it
    svg = (tmp_path / "split.svg").read_text(encoding="utf-8")
    assert "\x1b" not in svg and "\\x1b" in svg
    assert "QK&#160;split&#160;of&#160;this&#160;cell" in svg or "QK split of this cell" in svg
    assert f"{doc['top'][0]['value']:+.4f}" in svg
