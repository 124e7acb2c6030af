"""One traced forward pass per input text: every view of attn matrix --transformer (--explain,
--show norms / scores / a contribution method, --flow, --html), attn lens, attn heads and each explore view compute what
they show from one pass of attn's NumPy backend per text, counted on NumpyPretrained.forward (the
one function every NumPy pass goes through)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")

from typer.testing import CliRunner  # noqa: E402

from attncli.cli.main import app  # noqa: E402
from attncli.explore.state import ExploreState  # noqa: E402
from attncli.hf.backends.numpy_backend import NumpyPretrained  # noqa: E402

runner = CliRunner()
TEXT = "the cat sat on the mat"


@pytest.fixture
def passes(monkeypatch):
    count = [0]
    real = NumpyPretrained.forward

    def counted(self, *args, **kwargs):
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(NumpyPretrained, "forward", counted)
    return count


@pytest.mark.parametrize("extra", [
    [], ["--explain", "1", "2"], ["--show", "norms"], ["--show", "norms", "--explain", "1", "2"],
    ["--show", "scores"], ["--show", "scores", "--explain", "1", "2"], ["--flow"], ["--model-view"],
    ["--show", "norms", "--html", "PAGE"], ["--show", "scores", "--html", "PAGE"], ["--json", "--flow"],
    ["--show", "alti"], ["--show", "value-zeroing", "--rollout"], ["--show", "globenc", "--rows", "1:3", "--words"],
    ["--show", "alti", "--rollout", "--html", "PAGE"],
])
@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_matrix_runs_one_pass(passes, tiny_bert_dir, tiny_gpt2_dir, tmp_path, kind, extra):
    path = tiny_bert_dir if kind == "bert" else tiny_gpt2_dir
    extra = [str(tmp_path / "p.html") if a == "PAGE" else a for a in extra]
    layer = [] if "--model-view" in extra else ["--layer", "1"]
    result = runner.invoke(app, ["matrix", TEXT, "--transformer", str(path), "--backend", "numpy", *layer, *extra],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert passes[0] == 1


def test_lens_runs_one_pass(passes, tiny_gpt2_dir):
    result = runner.invoke(app, ["lens", TEXT, "--transformer", str(tiny_gpt2_dir), "--json"])
    assert result.exit_code == 0, result.output
    assert passes[0] == 1


@pytest.mark.parametrize("kind, per_text", [("bert", 1), ("gpt2", 2)])  # a decoder also reads the text repeated
def test_heads_runs_one_pass_per_input(passes, tiny_bert_dir, tiny_gpt2_dir, tmp_path, kind, per_text):
    path = tiny_bert_dir if kind == "bert" else tiny_gpt2_dir
    texts = tmp_path / "t.txt"
    texts.write_text("the cat sat on the mat\na dog sat on the log\nthe fox ran\n", encoding="utf-8")
    result = runner.invoke(app, ["heads", "--transformer", str(path), "--file", str(texts), "--backend", "numpy",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert passes[0] == 3 * per_text


@pytest.mark.parametrize("change", [{}, {"norms": True}, {"flow": True}, {"model_view": True}, {"layer": 0},
                                    {"lens": True}, {"compare_text": "a dog sat on the log"}])
def test_each_explore_view_runs_one_pass_per_text(passes, tiny_gpt2_dir, change):
    from attncli.explore.checkpoint_state import compute

    models: dict = {}
    state = replace(ExploreState(TEXT, transformer=str(tiny_gpt2_dir), backend="numpy"), **change)
    res = compute(state, models)
    assert passes[0] == (2 if "compare_text" in change else 1)
    if not (change.get("model_view") or change.get("lens") or "compare_text" in change):
        from attncli.explore.checkpoint_state import explain

        explain(res, state)  # --explain of the cursor's cell reads the same pass
        assert passes[0] == 1
