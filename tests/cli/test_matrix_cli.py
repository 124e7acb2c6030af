"""``attn matrix`` and ``attn variants`` through the CLI runner: JSON, pipeline maths, bad input, startup."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from attncli.vectors import store
from attncli.cli.main import app

WORDS = "the time flies like an arrow fruit a banana quick brown fox jumps over lazy dog".split()
DIM = 12
SENTENCE = "time flies like an arrow"


@pytest.fixture
def tiny(attn_home):
    """A small fastText-style model 'tiny' (with an n-gram table) and 'plain' (without)."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(WORDS), DIM)).astype(np.float32)
    store.save_vectors("tiny", WORDS, vectors, ngrams=rng.standard_normal((64, DIM)),
                       subword={"min_n": 3, "max_n": 6, "bucket": 64})
    store.save_vectors("plain", WORDS, vectors)
    return {w: vectors[i].astype(np.float64) for i, w in enumerate(WORDS)}


def run(*args, input=None):
    result = CliRunner().invoke(app, list(args), input=input)
    return result


def matrix_json(*args, input=None):
    result = run("matrix", *args, "--model", "tiny", "--json", input=input)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _sinusoidal(n, d):
    pe = np.zeros((n, d))
    for p in range(n):
        for i in range(d):
            angle = p / 10000 ** ((i - i % 2) / d)
            pe[p, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    return pe


def _softmax_rows(scores, mask):
    import torch

    s = torch.tensor(scores).masked_fill(~torch.tensor(mask), float("-inf"))
    return torch.softmax(s, dim=-1).numpy()


def test_json_keys_and_shapes(tiny):
    doc = matrix_json(SENTENCE, "--causal")
    for key in ("tokens", "key_tokens", "variant", "mask", "projection", "heads", "weights", "head_weights", "scores", "output"):
        assert key in doc
    assert doc["tokens"] == SENTENCE.split() == doc["key_tokens"]
    assert doc["variant"] == "scaled" and doc["projection"] == "identity" and doc["heads"] == 1
    assert doc["mask"] == {"causal": True, "window": None, "padding": None}
    w = np.array(doc["weights"])
    assert w.shape == (5, 5) and np.array(doc["output"]).shape == (5, DIM)
    assert np.all(np.triu(w, 1) == 0.0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-5)  # fixed: float64 weights (attention/matrix.py) printed with 6 digits: 5 of them sum to 1 within 5 x 5e-6 x w
    for i in range(5):
        for j in range(5):
            assert (doc["scores"][i][j] is None) == (j > i)


@pytest.mark.parametrize("positions", ["none", "sinusoidal"])
def test_pipeline_matches_an_independent_computation(tiny, positions):
    doc = matrix_json(SENTENCE, "--causal", "--positions", positions)
    x = np.stack([tiny[w] for w in SENTENCE.split()])
    if positions == "sinusoidal":
        typical = np.mean([np.linalg.norm(tiny[w]) for w in WORDS])  # the model has < 1,000 words
        x = x + _sinusoidal(5, DIM) * typical / math.sqrt(DIM / 2)
    causal = np.tril(np.ones((5, 5), dtype=bool))
    expected = _softmax_rows(x @ x.T / math.sqrt(DIM), causal)
    np.testing.assert_allclose(np.array(doc["weights"]), expected, rtol=1e-5, atol=1e-6)  # fixed: a float64 pass against float64; the JSON's %.6g moves each number by 5e-6 of itself
    np.testing.assert_allclose(np.array(doc["output"]), expected @ x, rtol=1e-5, atol=1e-5)  # fixed: float64 against float64, through the JSON's %.6g (5e-6 relative)


def test_random_projection_is_seeded_and_sized(tiny):
    a = matrix_json(SENTENCE, "--proj", "random", "--seed", "3", "--d-k", "6")
    b = matrix_json(SENTENCE, "--proj", "random", "--seed", "3", "--d-k", "6")
    c = matrix_json(SENTENCE, "--proj", "random", "--seed", "4", "--d-k", "6")
    assert a["weights"] == b["weights"] and a["weights"] != c["weights"]
    assert np.array(a["output"]).shape == (5, 6) and a["projection"] == "random"


def test_cross_attention_and_padding(tiny):
    doc = matrix_json(SENTENCE, "--context", "fruit flies like a banana", "--pad-to", "7")
    assert doc["tokens"] == SENTENCE.split()
    assert doc["key_tokens"] == "fruit flies like a banana".split() + ["<pad>", "<pad>"]
    w = np.array(doc["weights"])
    assert w.shape == (5, 7) and np.all(w[:, 5:] == 0.0)
    assert all(row[5] is None and row[6] is None for row in doc["scores"])


def test_self_attention_padding_adds_query_rows_and_masks_pad_keys(tiny):
    doc = matrix_json(SENTENCE, "--pad-to", "6", "--causal")
    assert doc["tokens"][-1] == "<pad>" and len(doc["weights"]) == 6
    w = np.array(doc["weights"])
    assert np.all(w[:, 5] == 0.0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-5)  # fixed: float64 weights printed with 6 digits: a row sums to 1 within 5e-6
    assert doc["empty_rows"] == []


def test_multihead_json(tiny):
    doc = matrix_json(SENTENCE, "--variant", "multihead", "--heads", "3", "--proj", "random", "--causal")
    hw = np.array(doc["head_weights"])
    assert doc["heads"] == 3 and hw.shape == (3, 5, 5)
    np.testing.assert_allclose(np.array(doc["weights"]), hw.mean(axis=0), atol=2e-6)  # fixed: float64 heads and their mean, each printed with %.6g (<= 5e-7 for weights <= 1)
    assert np.all(hw[:, np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0.0)


@pytest.mark.parametrize("variant", ["dot", "scaled", "additive", "multiplicative", "cosine", "multihead", "relative", "local"])
@pytest.mark.parametrize("mask", [[], ["--causal"], ["--window", "1"], ["--pad-to", "7"], ["--causal", "--window", "2", "--pad-to", "6"]])
def test_every_variant_and_mask_through_the_cli(tiny, variant, mask):
    heads = ["--heads", "2"] if variant == "multihead" else []
    doc = matrix_json(SENTENCE, "--variant", variant, *heads, *mask)
    w = np.array(doc["weights"])
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-5)  # fixed: float64 weights printed with 6 digits: a row sums to 1 within 5e-6
    scores = doc["scores"]
    masked = np.array([[s is None for s in row] for row in scores])
    assert np.all(w[masked] == 0.0)
    if "--causal" in mask:
        assert np.all(np.triu(w, 1) == 0.0)


def test_explain_recomputes_the_cell(tiny):
    doc = matrix_json(SENTENCE, "--variant", "relative", "--explain", "3", "1")
    ex = doc["explanation"]
    assert ex["query"] == {"index": 3, "token": "an"} and ex["key"] == {"index": 1, "token": "flies"}
    assert ex["weight"] == pytest.approx(doc["weights"][3][1], rel=1e-5)  # fixed: float64 recomputation against the %.6g-printed matrix (5e-6 relative)
    assert ex["score"] == pytest.approx(doc["scores"][3][1], rel=1e-5)  # fixed: float64 recomputation against the %.6g-printed matrix (5e-6 relative)
    assert any("relative" in s["name"] for s in ex["steps"])
    masked = matrix_json(SENTENCE, "--causal", "--explain", "1", "3")["explanation"]
    assert masked["masked"] and masked["weight"] == 0.0 and "causal" in masked["mask_reasons"][0]


EXPLAIN_CASES = [
    (variant, mask)
    for variant in ("dot", "scaled", "additive", "multiplicative", "cosine", "relative", "local", "multihead")
    for mask in ({}, {"causal": True}, {"window": 1, "pad_to": 7})
]


def _final_weight(steps):
    return next(s for s in steps if s["name"] == "weight = exp / sum")["value"]


@pytest.mark.parametrize("variant,mask", EXPLAIN_CASES)
def test_explain_recomputes_every_visible_cell_of_every_variant(tiny, variant, mask):
    """explain's per-cell formulas against attention.py's vectorised ones (which test_variants_math.py
    checks against torch and loops): every visible cell's score and weight, every head's."""
    from attncli.attention.explain import explain
    from attncli.attention.masks import MaskSpec
    from attncli.attention.matrix import MatrixRequest, compute

    extra = {"projection": "random", "d_k": 6, "heads": 3} if variant == "multihead" else {}
    res = compute(MatrixRequest(text=SENTENCE, variant=variant, mask=MaskSpec(**mask), model="tiny", **extra))
    att = res.attention
    T, S = att.weights.shape
    checked = 0
    for i in range(T):
        for j in range(S):
            ex = explain(res, i, j)
            assert "MISMATCH" not in json.dumps(ex)
            if not att.mask[i, j]:
                assert ex["masked"] and ex["weight"] == 0.0 and ex["score"] is None
                continue
            checked += 1
            if variant == "multihead":
                for head in ex["heads"]:
                    h = head["head"]
                    assert head["score"] == pytest.approx(att.head_scores[h, i, j], rel=1e-9, abs=1e-12)
                    assert _final_weight(head["steps"]) == pytest.approx(att.head_weights[h, i, j], rel=1e-9, abs=1e-12)
            else:
                assert ex["score"] == pytest.approx(att.scores[i, j], rel=1e-9, abs=1e-12)
                assert _final_weight(ex["steps"]) == pytest.approx(att.weights[i, j], rel=1e-9, abs=1e-12)
    assert checked >= 5
    # the CLI carries the same explanation
    i, j = int(np.argwhere(att.mask)[-1][0]), int(np.argwhere(att.mask)[-1][1])
    cli_names = {"projection": "proj"}
    flags = [f"--{cli_names.get(k, k).replace('_', '-')}" + ("" if v is True else f"={v}") for k, v in {**mask, **extra}.items()]
    doc = matrix_json(SENTENCE, "--variant", variant, *flags, "--explain", str(i), str(j))
    assert doc["explanation"] == json.loads(json.dumps(explain(res, i, j)))


def test_explain_flags_a_score_that_disagrees_with_the_matrix(tiny, monkeypatch):
    """The self-check can fail: a wrong per-cell formula shows MISMATCH, not 'matches the matrix'."""
    from attncli.attention import explain as explain_mod

    right = explain_mod._score_steps

    def off_by_one(*args, **kwargs):
        steps, score = right(*args, **kwargs)
        return steps, score + 1.0

    monkeypatch.setattr(explain_mod, "_score_steps", off_by_one)
    ex = matrix_json(SENTENCE, "--explain", "3", "1")["explanation"]
    notes = [s["note"] for s in ex["steps"]]
    assert any(n.startswith("MISMATCH with the score above") for n in notes)
    assert any(n.startswith("MISMATCH: the matrix has") for n in notes)
    assert "matches the matrix" not in notes


def test_terminal_view_and_explain_text(tiny):
    result = run("matrix", SENTENCE, "--model", "tiny", "--causal", "--explain", "2", "0")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "scaled dot-product" in out and "causal" in out and "identity" in out
    assert "·" in out and "matches the matrix" in out


@pytest.mark.parametrize("show", ["scores", "output"])
def test_show_scores_and_output(tiny, show):
    result = run("matrix", SENTENCE, "--model", "tiny", "--show", show, "--causal")
    assert result.exit_code == 0, result.stderr
    assert ("before softmax" if show == "scores" else "output vectors") in result.stdout


def test_sentence_from_file_and_stdin(tiny, tmp_path):
    path = tmp_path / "s.txt"
    path.write_text(SENTENCE + "\n", encoding="utf-8")
    assert matrix_json("--file", str(path))["tokens"] == SENTENCE.split()
    assert matrix_json("-", input=SENTENCE)["tokens"] == SENTENCE.split()


def test_unknown_word_uses_subwords(tiny):
    doc = matrix_json("time flies like a zebra")
    assert doc["tokens"][-1] == "zebra"


def test_svg_and_html_export(tiny, tmp_path):
    svg, html = tmp_path / "m.svg", tmp_path / "m.html"
    result = run("matrix", SENTENCE, "--model", "tiny", "--svg", str(svg), "--html", str(html))
    assert result.exit_code == 0, result.stderr
    assert svg.read_text().lstrip().startswith("<svg") and "arrow" in svg.read_text()
    assert "arrow" in html.read_text()


BAD = [
    ([""], "empty"),
    (["?!, ..."], "no word"),
    (["time flies like a zebra", "--model", "plain"], "unknown word 'zebra'"),
    ([SENTENCE, "--variant", "multihead", "--heads", "5"], "does not divide"),
    ([SENTENCE, "--window", "0"], "--window"),
    ([SENTENCE, "--explain", "5", "0"], "outside"),
    ([SENTENCE, "--variant", "bogus"], "unknown variant"),
    ([SENTENCE, "--proj", "bogus"], "unknown projection"),
    ([SENTENCE, "--causal", "--context", "fruit flies"], "contradicts"),
    ([SENTENCE, "--heads", "2"], "needs --variant multihead"),
    ([SENTENCE, "--d-k", "4"], "--d-k"),
    ([SENTENCE, "--pad-to", "3"], "shorter"),
    ([SENTENCE, "--file", "x.txt"], "not both"),
    ([], "give a sentence"),
    ([SENTENCE, "--rows", "5:2"], "--rows"),
    ([SENTENCE, "--cols", "5:9"], "--cols starts at 5"),
    ([SENTENCE, "--rows", "99999999999999999999:"], "--rows must be a whole number from"),
    ([SENTENCE, "--max-relative", "0", "--variant", "relative"], "--max-relative"),
    ([SENTENCE, "--max-relative", "1000000000", "--variant", "relative"], "--max-relative"),
    ([SENTENCE, "--variant", "multihead", "--heads", "0"], "--heads must be"),
    ([SENTENCE, "--seed", "-1", "--proj", "random"], "--seed"),
    ([SENTENCE, "--pad-to", "100000"], "--pad-to"),
    ([SENTENCE, "--proj", "random", "--d-k", "0"], "--d-k"),
    ([SENTENCE, "--context", ""], "context is empty"),
    ([SENTENCE, "--layer", "1"], "--layer needs --proj trained"),
    ([SENTENCE, "--proj", "trained"], "has no trained attention"),
    ([SENTENCE, "--svg", "/"], "is a directory: give a file name"),
    ([SENTENCE, "--html", "/nonexistent-folder/view.html"], "does not exist"),
    ([SENTENCE, "--html", "-"], "needs a file name"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_exits_2_with_a_message(tiny, args, needle):
    model = [] if "--model" in args else ["--model", "tiny"]
    result = run("matrix", *args, *model)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""


def test_bad_choice_is_a_usage_error_exit_2(tiny):
    result = run("matrix", SENTENCE, "--model", "tiny", "--show", "bogus")
    assert result.exit_code == 2 and "internal error" not in result.stderr


def test_variants_lists_the_registry():
    from attncli.attention.variants import VARIANTS

    result = run("variants", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["variants"]
    assert [r["name"] for r in rows] == list(VARIANTS)
    assert [r["name"] for r in rows if r["default"]] == ["scaled"]
    text = run("variants").stdout
    for name in VARIANTS:
        assert name in text
    assert "Shaw et al. 2018" in text and "Bahdanau" in text


def test_matrix_path_imports_no_torch_gensim_nltk(tiny, attn_home):
    code = (
        "import sys\n"
        "from attncli.cli.main import main\n"
        f"sys.argv = ['attn', 'matrix', {SENTENCE!r}, '--causal', '--json', '--model', 'tiny']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = sorted(m for m in ('torch', 'gensim', 'nltk', 'scipy', 'transformers', 'tokenizers', 'safetensors', 'huggingface_hub') if m in sys.modules)\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    env = dict(os.environ, ATTN_HOME=str(attn_home))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tokens"] == SENTENCE.split()
    assert "HEAVY=\n" in proc.stderr


def test_a_long_text_gives_its_full_matrix_and_the_view_says_what_it_left_out(tiny, tmp_path):
    text = " ".join(WORDS[i % len(WORDS)] for i in range(600))
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    doc = matrix_json("--file", str(path), "--causal")
    assert np.array(doc["weights"]).shape == (600, 600)
    result = run("matrix", "--file", str(path), "--model", "tiny", "--causal")
    assert result.exit_code == 0
    assert "left out" in result.stdout and "rows 0-59 of 0-599" in result.stdout


def test_streamed_json_equals_the_plain_document(tiny):
    import io

    from attncli.attention.masks import MaskSpec
    from attncli.attention.matrix import MatrixRequest, compute
    from attncli.attention.document import to_json, write_json

    res = compute(MatrixRequest(text=SENTENCE, model="tiny", variant="multihead", heads=2, mask=MaskSpec(causal=True)))
    buf = io.StringIO()
    write_json(res, buf.write)
    streamed = json.loads(buf.getvalue())
    assert streamed == to_json(res)
    assert len(buf.getvalue().splitlines()) > 5 * 4  # one matrix row per line
    assert streamed["head_scores"][1][0][1] is None and streamed["head_weights"][1][0][1] == 0.0


def test_numbers_keep_six_significant_digits():
    from attncli.attention.document import Rows

    values = np.array([[0.123456789, -2.5e-12, 9.9999999, 123456789.0, 0.0, 1e-20, 1e300, -7.123456789e-5]])
    line = next(Rows(values).lines())
    assert json.loads(line) == [0.123457, -2.5e-12, 10.0, 123457000.0, 0.0, 1e-20, 1e300, -7.12346e-05]
    masked = next(Rows(values, values != 0.0).lines())
    assert json.loads(masked)[4] is None and json.loads(masked)[0] == 0.123457
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 300)) * 10.0 ** rng.integers(-12, 12, (3, 300))
    back = np.array([json.loads(line) for line in Rows(x).lines()])
    np.testing.assert_allclose(back, x, rtol=5e-6)  # fixed: %.6g's own bound, half a unit in the 6th digit
    with pytest.raises(ValueError):
        Rows(np.array([[1.0, np.nan]]))


def test_proj_trained_through_the_cli_without_torch(attn_home):
    from _attention_fixtures import make_random_attention

    make_random_attention("rand", layers=2, heads=4)
    code = (
        "import sys\n"
        "from attncli.cli.main import main\n"
        "sys.argv = ['attn', 'matrix', 'the old man saw the cat', '--proj', 'trained', '--model', 'rand',\n"
        "            '--variant', 'multihead', '--layer', '1', '--causal', '--json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "sys.stderr.write('HEAVY=' + ','.join(m for m in ('torch', 'gensim', 'nltk', 'transformers', 'tokenizers', 'safetensors', 'huggingface_hub') if m in sys.modules) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, ATTN_HOME=str(attn_home)))
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["projection"] == "trained" and doc["heads"] == 4 and "layer 1" in doc["settings"]["projection"]
    one = json.loads(run("matrix", "the old man saw the cat", "--proj", "trained", "--model", "rand", "--layer", "1",
                         "--head", "2", "--causal", "--json").stdout)
    np.testing.assert_allclose(np.array(one["weights"]), np.array(doc["head_weights"][2]), atol=2e-6)  # fixed: one q, k, v (tinylm project), head 2 alone or split from all, float64 attention; %.6g printing
    whole_layer_one_head = run("matrix", "the old man", "--proj", "trained", "--model", "rand")
    assert whole_layer_one_head.exit_code == 2 and "--variant multihead" in whole_layer_one_head.stderr


def test_proj_trained_hints_at_the_causal_mask_it_was_trained_under(attn_home):
    from _attention_fixtures import make_random_attention

    make_random_attention("rand", layers=1, heads=2)
    args = ("matrix", "the old man saw the cat", "--proj", "trained", "--model", "rand", "--variant", "multihead")
    open_mask = run(*args)
    assert open_mask.exit_code == 0 and "add --causal" in open_mask.stderr
    causal = run(*args, "--causal", "--json")
    assert causal.exit_code == 0 and "add --causal" not in causal.stderr
    doc = json.loads(causal.stdout)
    assert doc["settings"]["positions"].startswith("the trained model's own")  # --positions does not apply
    no_pe = json.loads(run(*args, "--causal", "--json", "--positions", "none").stdout)
    assert no_pe["weights"] == doc["weights"] and no_pe["settings"]["positions"] == doc["settings"]["positions"]
    assert "positions: the trained model's own" in " ".join(open_mask.stdout.split())
    assert np.allclose(np.triu(np.array(json.loads(causal.stdout)["weights"]), 1), 0)


def test_multihead_memory_is_bounded_and_the_default_heads_are_named(tiny, tmp_path):
    text = tmp_path / "long.txt"
    text.write_text(" ".join(["time flies like an arrow"] * 400), encoding="utf-8")  # 2,000 tokens
    big = run("matrix", "--file", str(text), "--model", "tiny", "--variant", "multihead", "--heads", "32",
              "--proj", "random", "--d-k", "64")
    assert big.exit_code == 2 and "use fewer heads or a shorter text" in big.stderr, big.stderr
    odd = run("matrix", SENTENCE, "--model", "tiny", "--variant", "multihead", "--proj", "random", "--d-k", "6")
    assert odd.exit_code == 2 and "the default of 4 heads does not divide" in " ".join(odd.stderr.split())


def test_relative_at_4096_tokens_stays_in_memory(tiny):
    """Shaw et al.'s a^K_ij, a^V_ij are never built as (T, S, d) tensors: 4,096 tokens in a few s."""
    import resource

    from attncli.attention.variants import VariantConfig, attend, init_params

    T, d = 4096, 16
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((T, d)), rng.standard_normal((T, d))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = attend("relative", q, k, k, params=init_params("relative", d, d, seed=0, config=VariantConfig(max_relative=4)))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.output.shape == (T, d) and np.allclose(res.weights.sum(axis=1), 1.0)
    assert grown_mib < 2048, grown_mib  # the (T, S, d) tensors alone would be 2 x 2 GiB at d = 16


def test_scale_seed_range():
    assert run("scale", "--seed", "-1").exit_code == 2
    assert run("scale", "--seed", "99999999999999999999999").exit_code == 2
    assert run("scale", "--seed", "7", "--json").exit_code == 0


def test_short_model_flag_and_empty_model_name(tiny):
    assert run("matrix", SENTENCE, "-m", "tiny").exit_code == 0
    empty = run("matrix", SENTENCE, "--model", "")
    assert empty.exit_code == 2 and "invalid model name ''" in empty.stderr


def test_the_variants_table_s_title_carries_no_trailing_spaces():
    out = CliRunner().invoke(app, ["variants"], env={"COLUMNS": "120"}).stdout
    assert out.splitlines()[0] == "attention variants (attn matrix --variant NAME)"
