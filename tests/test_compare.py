"""``attn compare``: the delta B - A must equal the difference of the two ``attn matrix --json``
outputs it stands for (two texts, two models, two variants, two masks)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.cli.main import app

A, B = "time flies like an arrow", "fruit flies like a banana"


def run(*args):
    import attncli.cli.app as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args))


def as_json(*args):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def check(doc, a, b):
    np.testing.assert_allclose(np.array(doc["a"]["weights"]), a, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(np.array(doc["b"]["weights"]), b, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(np.array(doc["delta"]), b - a, atol=4e-6, rtol=1e-5)
    assert np.abs(b - a).max() > 1e-3  # the two really differ: a zero delta would pass anything


@pytest.mark.parametrize("head", [None, "2"])
def test_two_texts_by_word_equal_two_matrices(tiny_bert_dir, head):
    extra = ["--head", head] if head else []
    doc = as_json("compare", A, B, "--transformer", str(tiny_bert_dir), "--layer", "1", *extra, "--words")
    one = lambda t: as_json("matrix", t, "--transformer", str(tiny_bert_dir), "--layer", "1", *extra, "--words")["words"]  # noqa: E731
    ma, mb = one(A), one(B)
    check(doc, np.array(ma["weights"]), np.array(mb["weights"]))
    assert doc["a"]["tokens"] == ma["tokens"] and doc["b"]["tokens"] == mb["tokens"] and doc["unit"] == "words"


def test_two_models_on_one_text(tiny_bert_dir, tiny_distilbert_dir):
    doc = as_json("compare", A, "--transformer", str(tiny_bert_dir), "--transformer-b", str(tiny_distilbert_dir))
    ma = as_json("matrix", A, "--transformer", str(tiny_bert_dir))
    mb = as_json("matrix", A, "--transformer", str(tiny_distilbert_dir))
    check(doc, np.array(ma["weights"]), np.array(mb["weights"]))
    assert doc["b"]["model"] == str(tiny_distilbert_dir)


@pytest.mark.parametrize("b_args,matrix_b", [(["--variant-b", "additive"], ["--variant", "additive"]),
                                             (["--causal-b"], ["--causal"])])
def test_two_variants_or_masks_on_the_word_vector_path(b_args, matrix_b):
    doc = as_json("compare", A, *b_args)
    check(doc, np.array(as_json("matrix", A)["weights"]), np.array(as_json("matrix", A, *matrix_b)["weights"]))


def test_different_lengths_are_refused_unless_aligned_by_position(tiny_bert_dir):
    result = run("compare", A, "fruit flies", "--transformer", str(tiny_bert_dir))
    assert result.exit_code == 2 and "--align position" in result.stderr and "Traceback" not in result.stderr
    doc = as_json("compare", A, "fruit flies", "--transformer", str(tiny_bert_dir), "--align", "position")
    ma = np.array(as_json("matrix", A, "--transformer", str(tiny_bert_dir))["weights"])
    mb = np.array(as_json("matrix", "fruit flies", "--transformer", str(tiny_bert_dir))["weights"])
    n = mb.shape[0]
    assert doc["cropped"] and np.array(doc["delta"]).shape == (n, n)
    np.testing.assert_allclose(np.array(doc["delta"]), mb - ma[:n, :n], atol=4e-6, rtol=1e-5)


@pytest.mark.parametrize("args,needle", [
    ([A], "nothing to compare"), ([A, "--transformer-b", "x"], "needs --transformer"),
    ([A, B, "--words"], "--words needs --transformer"), ([A, B, "--align", "x"], "--align"),
])
def test_refusals(args, needle):
    result = run("compare", *args)
    assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.stderr


def test_the_drawing_has_three_maps_and_a_diverging_legend():
    result = run("compare", A, "--causal-b")
    assert result.exit_code == 0
    assert "A: " in result.stdout and "B: " in result.stdout and "delta = B - A" in result.stdout
    assert "PuOr" in result.stdout


def test_diverging_palette_is_white_at_zero_and_distinct_at_the_ends():
    from attncli.views.render import contrast_ratio, diverging_palette

    assert diverging_palette(0.5)[0] == "#f7f7f7"
    lo, hi = diverging_palette(0.0), diverging_palette(1.0)
    assert lo[0] != hi[0] and contrast_ratio(*lo) >= 4.5 and contrast_ratio(*hi) >= 4.5
