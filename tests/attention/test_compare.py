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
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args))


def as_json(*args):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def check(doc, a, b):
    np.testing.assert_allclose(np.array(doc["a"]["weights"]), a, atol=2e-6, rtol=1e-5)  # fixed: both sides one float64 pass, printed to 6 digits
    np.testing.assert_allclose(np.array(doc["b"]["weights"]), b, atol=2e-6, rtol=1e-5)  # fixed: both sides one float64 pass, printed to 6 digits
    np.testing.assert_allclose(np.array(doc["delta"]), b - a, atol=4e-6, rtol=1e-5)  # fixed: a difference of two 6-digit numbers, printed
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
    np.testing.assert_allclose(np.array(doc["delta"]), mb - ma[:n, :n], atol=4e-6, rtol=1e-5)  # fixed: a difference of two 6-digit numbers, printed


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


def test_compare_labels_join_the_two_sides_only_where_they_differ():
    """A cell's label is the shared token, or "a/b" where the two texts differ there (the drawing's
    row and column labels); the delta is B - A, worked by hand."""
    from attncli.attention.compare import compare

    c = compare(np.eye(2), np.full((2, 2), 0.5), ["time", "flies"], ["fruit", "flies"], ["x", "y"], ["x", "z"])
    assert c.labels == ["time/fruit", "flies"]
    assert c.key_labels == ["x", "y/z"]
    assert c.delta.tolist() == [[-0.5, 0.5], [0.5, -0.5]]


def test_compare_json_document_has_its_documented_keys():
    """docs/beyond-weights.md: {"unit", "align", "cropped", "a": {..., tokens, key_tokens, weights},
    "b": {...}, "delta", "delta_max_abs"}; each side keeps what made it (its text, model, ...)."""
    from attncli.attention.compare import compare, document

    c = compare(np.eye(2), np.full((3, 3), 0.25), ["a", "b"], ["a", "c", "d"], ["a", "b"], ["a", "c", "d"],
                align="position")
    doc = document(c, {"text": "a b"}, {"text": "a c d"}, "tokens")
    assert doc["a"] == {"text": "a b", "tokens": ["a", "b"], "key_tokens": ["a", "b"], "weights": [[1.0, 0.0], [0.0, 1.0]]}
    assert doc["b"] == {"text": "a c d", "tokens": ["a", "c"], "key_tokens": ["a", "c"],
                        "weights": [[0.25, 0.25], [0.25, 0.25]]}
    assert (doc["unit"], doc["align"], doc["cropped"]) == ("tokens", "position", True)
    assert doc["delta"] == [[-0.75, 0.25], [0.25, -0.75]] and doc["delta_max_abs"] == 0.75


def test_compare_of_equal_shapes_is_not_cropped_and_refusals_say_why():
    """Same shapes: aligned as they are, "cropped": false in the JSON (not null); the refusals name
    the rows' unit (tokens unless told) and the two --align choices."""
    from attncli.attention.compare import compare, document
    from attncli.errors import BadInput

    c = compare(np.eye(3), np.eye(3)[::-1], list("abc"), list("abc"), list("abc"), list("abc"))
    assert c.align == "same" and c.cropped is False
    assert document(c, {}, {}, "tokens")["cropped"] is False
    with pytest.raises(BadInput, match=r"2 and 3 tokens \(rows\)"):
        compare(np.eye(2), np.eye(3), list("ab"), list("abc"), list("ab"), list("abc"))
    with pytest.raises(BadInput, match=r"2 and 3 words \(rows\)"):
        compare(np.eye(2), np.eye(3), list("ab"), list("abc"), list("ab"), list("abc"), unit="words")
    with pytest.raises(BadInput, match="--align 'diagonal': choose same or position"):
        compare(np.eye(2), np.eye(2), list("ab"), list("ab"), list("ab"), list("ab"), align="diagonal")


def test_compare_of_empty_matrices_has_a_zero_largest_difference():
    """Nothing to compare (0 x 0): delta_max_abs is 0, not an error from max() of nothing."""
    from attncli.attention.compare import compare, document

    doc = document(compare(np.zeros((0, 0)), np.zeros((0, 0)), [], [], [], []), {}, {}, "tokens")
    assert doc["delta"] == [] and doc["delta_max_abs"] == 0.0


def test_compare_of_rectangular_matrices_names_rows_and_columns_apart():
    """Cross-attention matrices are not square: A (3, 5) and B (4, 2) are refused with each count
    in its place, and aligned by position to the first 3 rows and 2 columns of each."""
    from attncli.attention.compare import compare
    from attncli.errors import BadInput

    a, b = np.arange(15.0).reshape(3, 5), np.arange(8.0).reshape(4, 2)
    with pytest.raises(BadInput, match=r"the two have 3 and 4 tokens \(rows\) and 5 and 2 \(columns\).*the first 3 of each"):
        compare(a, b, list("abc"), list("abcd"), list("xyzuv"), list("pq"))
    c = compare(a, b, list("abc"), list("abcd"), list("xyzuv"), list("pq"), align="position")
    assert c.delta.tolist() == [[0.0, 0.0], [-3.0, -3.0], [-6.0, -6.0]] and c.key_labels == ["x/p", "y/q"]
