"""attn attribute through the command line (a tiny GPT-2): JSON, the drawing, --verify, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")

from _gradient_cli import CLEAN, CORRUPT, run  # noqa: E402


@pytest.mark.parametrize("site, rows", [("resid", "layers"), ("head", "layers"), ("key", "heads")])
def test_the_grid_and_its_verified_cells(tiny_gpt2_dir, site, rows):
    code, out = run("attribute", CLEAN, CORRUPT, "--transformer", str(tiny_gpt2_dir), "--target-id", "7",
                    "--site", site, "--verify", "3", "--json")
    assert code == 0, out
    doc = json.loads(out)
    grid = np.asarray(doc["grid"])
    L, h = 2, 4  # the tiny GPT-2's
    assert doc["method"] == "atp*" and doc["site"] == site
    assert grid.shape[0] == (L * h if rows == "heads" else L) and len(doc["row_labels"]) == grid.shape[0]
    assert len(doc["verify"]) == 3 and all(set(c) == {"row", "column", "estimate", "exact"} for c in doc["verify"])
    assert abs(doc["verify"][0]["estimate"]) == pytest.approx(np.abs(grid).max(), abs=1e-7)  # fixed: one pass's numbers, 8 decimals each


def test_no_qk_fix_and_the_drawing(tiny_gpt2_dir):
    code, out = run("attribute", CLEAN, CORRUPT, "--transformer", str(tiny_gpt2_dir), "--target-id", "7",
                    "--site", "head", "--no-qk-fix")
    assert code == 0, out
    assert "attribute head (AtP)" in out and "L1" in out


@pytest.mark.parametrize("args, said", [
    (("--site", "neurons"), "--site 'neurons'"),
    ((), "give the model with --transformer"),
])
def test_refusals(tiny_gpt2_dir, args, said):
    model = () if said.startswith("give") else ("--transformer", str(tiny_gpt2_dir))
    code, out = run("attribute", CLEAN, CORRUPT, *model, "--target-id", "7", *args)
    assert code == 2 and said in out and "Traceback" not in out


def test_a_bert_with_its_mlm_head_runs_end_to_end(tmp_path):
    """The target at the text's [MASK], read by the MLM head: the command's grid is the library's
    attribution of the same pair, and its verified cells are exact patches."""
    from _trace_reference import drawn_mlm

    from attncli.causal.attribution import attribute
    from attncli.causal.target import resolve
    from attncli.hf import load

    path = str(drawn_mlm("bert", tmp_path / "bert", std=1.0))
    clean, corrupt = "the cat sat on the [MASK] and the dog .", "the dog sat on the [MASK] and the cat ."
    code, out = run("attribute", clean, corrupt, "--transformer", path, "--target-id", "7", "--site", "head",
                    "--verify", "2", "--json")
    assert code == 0, out
    doc = json.loads(out)
    model = load(path, backend="numpy")
    ids, bad = model.encode(clean).ids, model.encode(corrupt).ids
    target = resolve(model, ids, target=None, target_id=7)
    assert target.position == ids.index(model.vocab_id("[MASK]"))
    want = attribute(model, ids, bad, target, where="head").values  # (L, h)
    np.testing.assert_allclose(np.asarray(doc["grid"]), want, rtol=0, atol=1e-7)  # fixed: the same NumPy pass, the document's 8 decimals
    assert np.abs(want).max() > 1e-3 and len(doc["verify"]) == 2
    code, out = run("attribute", clean, corrupt, "--transformer", path, "--target-id", "7", "--site", "mlp")
    assert code == 0 and "Traceback" not in out


def test_an_encoder_is_refused_by_name(tiny_bert_dir):
    code, out = run("attribute", "a [MASK] b", "b [MASK] a", "--transformer", str(tiny_bert_dir), "--target-id", "5")
    assert code == 2 and ("GPT-2 and the Llama family" in out or "masked-language-model" in out)
