"""``attn matrix --transformer M --show alti | globenc | value-zeroing``: the contribution methods as
views. Their numbers are attncli.hf.methods.contributions' (which tests/hf/test_contributions.py holds to the
papers' formulas on transformers' own modules), through the view's one traced pass: the JSON, the
table, --rollout (the product of the layers, computed here), --words and --rows, the exports, and
the refusals (exit 2, one line naming the fix)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")

from attncli.cli.main import app  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.contributions import METHODS, contributions  # noqa: E402

SENTENCE = "time flies like an arrow"
JSON_ROUNDING = 5e-7  # --json writes each weight to 6 decimals


def run(*args, code: int = 0):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})
    assert result.exit_code == code, result.output
    return result


def view(model_dir, *args) -> dict:
    return json.loads(run("matrix", SENTENCE, "--transformer", str(model_dir), *args, "--json").stdout)


@pytest.fixture(params=["tiny_bert_dir", "tiny_gpt2_dir", "minilm_dir"])
def model_dir(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("method", METHODS)
def test_the_json_is_the_methods_matrix_of_the_layer_and_rows_sum_to_1(model_dir, method):
    model = load(str(model_dir), backend="numpy")
    enc = model.encode(SENTENCE)
    expected = contributions(model, enc, method)  # (L, T, T)
    for layer in (0, model.layers - 1):
        doc = view(model_dir, "--show", method, "--layer", str(layer))
        assert doc["show"] == method and doc["layer"] == layer and doc["rollout"] is False
        assert doc["formula"].endswith("rows sum to 1") and doc["head_weights"] is None
        assert doc["tokens"] == enc.tokens
        got = np.array(doc["weights"], dtype=float)  # (T, T)
        np.testing.assert_allclose(got, expected[layer], rtol=0, atol=JSON_ROUNDING)
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=0, atol=len(enc.tokens) * JSON_ROUNDING)
    if model.is_decoder:  # a causal model: no token reaches an earlier one
        assert np.all(np.triu(expected, k=1) == 0)


@pytest.mark.parametrize("method", METHODS)
def test_rollout_is_the_product_of_the_layers_up_to_L(tiny_bert_dir, tiny_gpt2_dir, method):
    for model_dir in (tiny_bert_dir, tiny_gpt2_dir):
        model = load(str(model_dir), backend="numpy")
        per = contributions(model, model.encode(SENTENCE), method)  # (L, T, T)
        for layer in range(model.layers):
            R = np.eye(per.shape[-1])
            for l in range(layer + 1):
                R = per[l] @ R  # C_l ... C_0: the later layer on the left
            doc = view(model_dir, "--show", method, "--layer", str(layer), "--rollout")
            assert doc["rollout"] is True and "rolled out over layers 0..L" in doc["formula"]
            np.testing.assert_allclose(np.array(doc["weights"]), R, rtol=0, atol=JSON_ROUNDING)
        assert not np.allclose(per[1] @ per[0], per[0] @ per[1], atol=1e-3)  # fixed: "differs": the order is tested, not assumed


def test_words_and_rows_are_of_the_same_matrix(tiny_bert_dir):
    whole = np.array(view(tiny_bert_dir, "--show", "alti", "--layer", "1")["weights"])
    rows = view(tiny_bert_dir, "--show", "alti", "--layer", "1", "--rows", "2:4")
    assert rows["rows"] == [2, 3]
    np.testing.assert_allclose(np.array(rows["weights"]), whole[2:4], rtol=0, atol=0)
    words = view(tiny_bert_dir, "--show", "alti", "--layer", "1", "--words")["words"]
    merged = np.array(words["weights"])  # a word's row: the mean of its pieces' rows, its column: the sum
    expected = np.array([[whole[np.ix_(g, k)].sum(axis=1).mean() for k in words["key_groups"]] for g in words["groups"]])
    np.testing.assert_allclose(merged, expected, rtol=0, atol=len(whole) * JSON_ROUNDING)
    assert any(len(g) > 1 for g in words["groups"])  # "flies" is two pieces: the merge is exercised
    np.testing.assert_allclose(merged.sum(axis=-1), 1.0, atol=len(whole) * JSON_ROUNDING)


def test_the_table_draws_the_json_numbers_and_says_what_they_are(tiny_gpt2_dir):
    doc = view(tiny_gpt2_dir, "--show", "value-zeroing", "--layer", "0")
    out = run("matrix", SENTENCE, "--transformer", str(tiny_gpt2_dir), "--show", "value-zeroing", "--layer", "0").stdout
    assert "layer 0 · value-zeroing" in out and "value zeroing (Mohebbi et al. 2023)" in out
    last = [line for line in out.splitlines() if line.lstrip().startswith(f"{len(doc['tokens']) - 1} ")][0]
    assert [float(x) for x in last.split()[2:]] == pytest.approx([round(w, 3) for w in doc["weights"][-1]], abs=1e-9)
    rolled = run("matrix", SENTENCE, "--transformer", str(tiny_gpt2_dir), "--show", "alti", "--rollout").stdout
    assert "rollout through layers 0-1 · alti" in rolled


def test_the_exports_draw_the_view(tiny_bert_dir, tmp_path):
    from test_export import svg_lines

    svg = tmp_path / "globenc.svg"
    run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--show", "globenc", "--layer", "0", "--svg", str(svg))
    lines = svg_lines(svg.read_text())
    doc = view(tiny_bert_dir, "--show", "globenc", "--layer", "0")
    assert any("layer 0 · globenc" in line for line in lines)
    row = [line for line in lines if line.lstrip().startswith("1 ")][0]
    assert [float(x) for x in row.split()[2:]] == pytest.approx([round(w, 3) for w in doc["weights"][1]], abs=1e-9)


@pytest.mark.parametrize("args,needle", [
    (("--head", "1"), "--show alti is one matrix per layer, each row summing to 1: drop --head"),
    (("--hide-special",), "drop --hide-special"),
    (("--model-view",), "drop --model-view"),
    (("--explain", "1", "2"), "drop --explain"),
    (("--flow",), "--flow is one matrix through every head of layers 0..--layer: drop --show"),
    (("--top-k", "2"), "--top-k sums attention weights: drop --show alti"),
    (("--backend", "torch"), "--show alti needs each layer's values, residual and norms as attn's NumPy pass holds "
                             "them (ALTI, GlobEnc, value zeroing)"),
])
def test_refusals_exit_2_with_one_line(tiny_bert_dir, args, needle):
    result = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--show", "alti", *args, code=2)
    message = " ".join(result.stderr.split())
    assert needle in message and "Traceback" not in result.output
    if "torch" in args:
        assert "add --backend numpy" in message


def test_without_a_transformer_it_is_refused(tmp_path):
    result = run("matrix", SENTENCE, "--show", "value-zeroing", code=2)
    assert "--show value-zeroing needs --transformer NAME_OR_PATH" in " ".join(result.stderr.split())


def test_an_encoder_decoder_is_refused_by_name(tmp_path):
    """Found out when the model loads (no --target or --stack typed): refused as the other --show
    views are, exit 2."""
    needed("torch")
    needed("transformers")
    from _seq2seq_fixtures import build_t5

    t5 = build_t5(tmp_path / "t5")
    result = run("matrix", SENTENCE, "--transformer", str(t5), "--show", "globenc", code=2)
    assert ("--show globenc is not implemented for encoder-decoders (T5, BART): use --show weights"
            in " ".join(result.stderr.split()))
