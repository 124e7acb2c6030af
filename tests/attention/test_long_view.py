"""Views of a long text (attncli.attention.long_view): --rows SPEC, --top-k K and --pool, against the
whole matrix they are made of (brute-force sums and means computed here), through the core and
through ``attn matrix --transformer`` (JSON, table, exports), and their refusals (exit 2)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from _tolerance import f32_close

from attncli.attention import long_view as lvm
from attncli.cli.main import app
from attncli.errors import BadInput

TEXT = "the bank was closed. we sat by the river bank. then home"


def run(*args, columns: int = 100):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def matrix_json(model, *args, text=TEXT):
    result = run("matrix", text, "--transformer", str(model), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def flat(text: str) -> str:
    return " ".join(text.split())


def fake_enc(words, pieces=None, text=None, specials=(False, False)):
    """An encoding of ``words`` (each one piece, or ``pieces[w]`` pieces), optionally with a [CLS]
    in front and a [SEP] behind, as attncli.hf.text.encoding.Encoding lays it out."""
    pieces = pieces or [1] * len(words)
    tokens, word_ids = [], []
    for w, (word, n) in enumerate(zip(words, pieces)):
        tokens += [word] + [f"##{word}"] * (n - 1)
        word_ids += [w] * n
    if specials[0]:
        tokens, word_ids = ["[CLS]"] + tokens, [None] + word_ids
    if specials[1]:
        tokens, word_ids = tokens + ["[SEP]"], word_ids + [None]
    return SimpleNamespace(tokens=tokens, word_ids=word_ids, words=list(words), text=text or " ".join(words),
                           pair=None, segments=[None if w is None else "a" for w in word_ids],
                           special=[w is None for w in word_ids])


# --- --rows ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,expected", [("3", [3]), ("2:5", [2, 3, 4]), ("2-5", [2, 3, 4, 5]), ("7:", [7, 8, 9]),
                                           (":2", [0, 1]), ("last:3", [7, 8, 9]), ("last:50", list(range(10))),
                                           ("0:99", list(range(10))), ("word:Bank", [1, 2, 6, 7])])
def test_rows_forms(spec, expected):
    enc = fake_enc(["a", "bank", "b", "c", "d", "bank", "e"], pieces=[1, 2, 1, 1, 1, 2, 2])  # 10 tokens
    assert lvm.row_positions(spec, enc).tolist() == expected


@pytest.mark.parametrize("spec,needle", [("10", "has 10 tokens"), ("4-10", "has 10 tokens"), ("last:0", "N >= 1"),
                                         ("5-3", "A <= B"), ("5:3", "0 <= A < B"), ("x", "last:N"),
                                         ("word:zebra", "no word 'zebra'"), ("word:", "give the word"), ("-1", "0-based")])
def test_rows_outside_or_malformed_is_bad_input(spec, needle):
    enc = fake_enc(["a", "bank", "b", "c", "d", "bank", "e"], pieces=[1, 2, 1, 1, 1, 2, 2])
    with pytest.raises(BadInput, match=re.escape(needle)):
        lvm.row_positions(spec, enc)


# --- --top-k --------------------------------------------------------------------------------------


def test_top_k_keys_plus_other_are_the_row_and_ties_go_to_the_earlier_key():
    rng = np.random.default_rng(0)
    m = rng.dirichlet(np.ones(9), size=6)  # (6, 9) rows summing to 1
    m[0] = [0.2, 0.1, 0.2, 0.1, 0.2, 0.05, 0.05, 0.05, 0.05]  # ties
    top = lvm.top_k(m, 3)
    assert np.allclose(top.weights.sum(axis=1) + top.other, m.sum(axis=1), atol=1e-12)
    assert top.keys[0].tolist() == [0, 2, 4]
    for r in range(6):  # the K largest, largest first, and nothing larger left in "other"
        assert np.all(np.diff(top.weights[r]) <= 0)
        rest = np.delete(m[r], top.keys[r])
        assert rest.max() <= top.weights[r].min()
        assert np.isclose(top.other[r], rest.sum())
    assert lvm.top_k(m, 20).keys.shape == (6, 9) and np.all(lvm.top_k(m, 20).other == 0)


# --- --pool ---------------------------------------------------------------------------------------


def test_span_ids_sentences_lines_and_chunks():
    enc = fake_enc(["one", "two.", "three", "four!", "five"], pieces=[1, 2, 1, 1, 1], specials=(True, True))
    # [CLS] one two ##two three four five [SEP]: the [CLS] joins the first sentence, the [SEP] the last
    assert lvm.span_ids("sentence", enc).tolist() == [0, 0, 0, 0, 1, 1, 2, 2]
    assert lvm.span_ids(3, enc).tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    lines = fake_enc(["one", "two", "three", "four"], text="one two\nthree\n\nfour")
    assert lvm.span_ids("line", lines).tolist() == [0, 0, 1, 2]
    assert lvm.span_ids("line", fake_enc(["no", "breaks"])).tolist() == [0, 0]  # one span


def test_pool_is_the_sum_over_key_spans_and_the_mean_over_query_spans():
    rng = np.random.default_rng(1)
    mats = rng.dirichlet(np.ones(7), size=(3, 5))  # (k=3, R=5, C=7)
    row_span, col_span = np.array([0, 0, 2, 2, 2]), np.array([0, 1, 1, 2, 2, 2, 2])
    pooled, q, k = lvm.pool_matrices(mats, row_span, col_span)
    assert q == [0, 2] and k == [0, 1, 2]
    for h in range(3):
        for a, rs in enumerate([[0, 1], [2, 3, 4]]):
            for b, cs in enumerate([[0], [1, 2], [3, 4, 5, 6]]):
                assert np.isclose(pooled[h, a, b], np.mean([mats[h, i, cs].sum() for i in rs]))
    assert np.allclose(pooled.sum(axis=2), 1.0)


@pytest.mark.parametrize("bad", ["foo", "0", "-3", ""])
def test_pool_spec_that_makes_no_sense_is_bad_input(bad):
    with pytest.raises(BadInput, match="--pool"):
        lvm.parse_pool(bad)


# --- attn matrix --transformer --------------------------------------------------------------------


@pytest.mark.parametrize("model", ["tiny_bert_dir", "tiny_gpt2_dir"])
def test_rows_are_the_whole_matrix_rows(model, request):
    path = request.getfixturevalue(model)
    full = matrix_json(path)
    T = len(full["rows"])
    for spec, rows in (("2-4", [2, 3, 4]), ("last:3", [T - 3, T - 2, T - 1]), ("5", [5])):
        part = matrix_json(path, "--rows", spec)
        assert part["rows"] == rows and part["long_view"]["rows"] == spec
        assert np.allclose(part["weights"], np.asarray(full["weights"])[rows], atol=2e-6)  # fixed: one float64 pass, both printed to 6 digits
        assert np.allclose(part["head_weights"], np.asarray(full["head_weights"])[:, rows], atol=2e-6)  # fixed: one float64 pass, both printed to 6 digits
    word = matrix_json(path, "--rows", "word:bank")
    assert word["tokens"] and all("bank" in t.lower() or t.lower().strip("ġ#") in "bank" for t in word["tokens"])
    assert np.allclose(word["weights"], np.asarray(full["weights"])[word["rows"]], atol=2e-6)  # fixed: one float64 pass, both printed to 6 digits
    hidden, part = matrix_json(path, "--hide-special"), matrix_json(path, "--hide-special", "--rows", "2-4")
    picked = [n for n, t in enumerate(hidden["rows"]) if 2 <= t <= 4]
    assert part["rows"] == [hidden["rows"][n] for n in picked]
    assert np.allclose(part["weights"], np.asarray(hidden["weights"])[picked], atol=2e-6)  # fixed: one float64 pass, both printed to 6 digits
    rollout = matrix_json(path, "--rollout", "--rows", "2-4")  # the rollout needs every row: cut after
    assert np.allclose(rollout["weights"], np.asarray(matrix_json(path, "--rollout")["weights"])[[2, 3, 4]], atol=2e-6)  # fixed: printed to 6 digits


def test_rows_reach_the_trace_as_kept_rows(tiny_gpt2_dir, monkeypatch):
    from attncli.hf.backends.numpy_backend import NumpyPretrained

    seen = []
    original = NumpyPretrained.trace

    def spy(self, enc, keep=None, **kw):
        tr = original(self, enc, keep, **kw)
        seen.append((kw.get("rows"), {name: tr[name].shape for name in tr}))
        return tr

    monkeypatch.setattr(NumpyPretrained, "trace", spy)
    doc = matrix_json(tiny_gpt2_dir, "--rows", "last:2", "--backend", "numpy")
    T = len(doc["key_tokens"])
    assert seen[-1][0] == [T - 2, T - 1]
    assert all(shape[1] == 2 for shape in seen[-1][1].values())  # (h, 2, T): only the two rows held


def test_pool_sentence_equals_brute_force_over_the_whole_matrix(tiny_bert_dir):
    full = matrix_json(tiny_bert_dir)
    tokens = full["tokens"]
    # the sentences by hand: a new one after each "."; [CLS] with the first, [SEP] with the last
    spans, current = [], []
    for t, tok in enumerate(tokens):
        current.append(t)
        if tok == "." and t + 1 < len(tokens) - 1:
            spans.append(current)
            current = []
    spans.append(current)
    assert len(spans) == 3
    A, H = np.asarray(full["weights"]), np.asarray(full["head_weights"])
    expect = np.array([[np.mean([A[i, b].sum() for i in a]) for b in spans] for a in spans])
    pooled = matrix_json(tiny_bert_dir, "--pool", "sentence")
    assert pooled["weights"] is None and pooled["pool"]["span_rows"] == spans
    assert np.allclose(pooled["pool"]["weights"], expect, atol=1e-5)  # fixed: sums of up to 20 printed weights (5e-7 each)
    for h in range(H.shape[0]):
        mine = np.array([[np.mean([H[h, i, b].sum() for i in a]) for b in spans] for a in spans])
        assert np.allclose(pooled["pool"]["head_weights"][h], mine, atol=1e-5)  # fixed: sums of up to 20 printed weights (5e-7 each)
    chunks = matrix_json(tiny_bert_dir, "--pool", "4", "--head", "1")
    H1 = H[1]
    by4 = [list(range(s, min(s + 4, len(tokens)))) for s in range(0, len(tokens), 4)]
    assert np.allclose(chunks["pool"]["weights"], [[np.mean([H1[i, b].sum() for i in a]) for b in by4] for a in by4],
                       atol=1e-5)  # fixed: sums of 4 printed weights, means of them


def test_top_k_rows_plus_other_are_the_whole_rows(tiny_gpt2_dir):
    full = matrix_json(tiny_gpt2_dir)
    A, H = np.asarray(full["weights"]), np.asarray(full["head_weights"])
    doc = matrix_json(tiny_gpt2_dir, "--top-k", "3", "--rows", "4-9")
    top = doc["top_k"]
    assert top["k"] == 3 and doc["weights"] is None
    for n, i in enumerate(range(4, 10)):
        assert np.isclose(sum(top["weights"][n]) + top["other"][n], A[i].sum(), atol=1e-5)  # fixed: sums of up to 20 printed weights (5e-7 each)
        assert np.allclose(top["weights"][n], A[i, top["keys"][n]], atol=1e-5)  # fixed: printed to 6 digits; the keys are input positions
        assert np.sort(A[i])[::-1][:3] == pytest.approx(top["weights"][n], abs=1e-5)  # fixed: printed to 6 digits
        for h, head in enumerate(top["heads"]):
            assert np.isclose(sum(head["weights"][n]) + head["other"][n], H[h, i].sum(), atol=1e-5)  # fixed: sums of up to 20 printed weights (5e-7 each)


def test_the_table_and_the_exports_carry_the_views(tiny_bert_dir, tmp_path):
    svg, html = tmp_path / "v.svg", tmp_path / "v.html"
    result = run("matrix", TEXT, "--transformer", str(tiny_bert_dir), "--top-k", "2", "--head", "0", "--rows", "1-3",
                 "--svg", str(svg), "--html", str(html))
    assert result.exit_code == 0, result.stderr
    out = flat(result.stdout)
    assert "top 2 keys" in out and "other" in out and "--rows 1-3: 3 of the text's" in out
    svg_text = " ".join("".join(ET.fromstring(svg.read_text()).itertext()).replace("\xa0", " ").split())
    assert "top 2 keys" in svg_text and "2 ban" in svg_text and "16 by" in svg_text
    html_text = html.read_text()  # the title wraps where the model's (temporary) path ends: compare words
    assert "top 2 keys" in " ".join(re.sub(r"<[^>]+>", " ", html_text).split())
    assert "<script" not in html_text  # the drawing, not the interactive page
    result = run("matrix", TEXT, "--transformer", str(tiny_bert_dir), "--pool", "sentence", "--svg", str(svg))
    assert result.exit_code == 0, result.stderr
    assert "weights between sentences" in flat(result.stdout)
    assert "weights between sentences" in " ".join("".join(ET.fromstring(svg.read_text()).itertext())
                                                    .replace("\xa0", " ").split())


def test_a_matrix_wider_than_the_terminal_is_drawn_pooled_with_a_note(tiny_bert_dir):
    result = run("matrix", TEXT, "--transformer", str(tiny_bert_dir), "--head", "0", columns=40)
    assert result.exit_code == 0, result.stderr
    out = flat(result.stdout)
    assert "too many for the terminal" in out and "drawn pooled (as --pool sentence)" in out
    assert "weights between sentences" in out and "--rows last:16" in out and "left out" not in out
    by_rows = flat(run("matrix", TEXT, "--transformer", str(tiny_bert_dir), "--head", "0", "--rows", "2-5",
                       columns=40).stdout)
    assert "strongest keys (as --top-k" in by_rows and "top 1 keys" in by_rows
    wide = flat(run("matrix", TEXT, "--transformer", str(tiny_bert_dir), "--head", "0", columns=200).stdout)
    assert "too many for" not in wide  # it fits: the matrix itself
    assert json.loads(run("matrix", TEXT, "--transformer", str(tiny_bert_dir), "--json", columns=40).stdout)["weights"]


BAD = [
    (["--rows", "99"], "the text has"),
    (["--rows", "3-99"], "ends past the text"),
    (["--rows", "word:zebra"], "no word 'zebra'"),
    (["--rows", "last:0"], "N >= 1"),
    (["--pool", "foo"], "--pool 'foo'"),
    (["--pool", "0"], "--pool must be a whole number from 1"),
    (["--top-k", "0"], "--top-k must be"),
    (["--top-k", "2", "--pool", "line"], "give one of them"),
    (["--pool", "line", "--show", "scores"], "drop --show scores"),
    (["--top-k", "2", "--flow"], "drop --flow"),
    (["--pool", "2", "--words"], "drop --words"),
    (["--rows", "last:2", "--model-view"], "--model-view"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_long_views_are_exit_2(tiny_bert_dir, args, needle):
    result = run("matrix", TEXT, "--transformer", str(tiny_bert_dir), *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert needle in flat(result.stderr) and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error:")


def test_top_k_and_pool_need_a_transformer():
    for args in (["--top-k", "2"], ["--pool", "sentence"]):
        result = run("matrix", "time flies", *args)
        assert result.exit_code == 2 and "needs --transformer" in result.stderr


def test_a_bar_per_layer_where_the_trace_reports_layers(monkeypatch):
    import attncli.cli.progress
    from attncli.cli.transformer import layer_progress
    from attncli.pipeline.reads import Reads

    monkeypatch.setattr(attncli.cli.progress, "DELAY", 0.0)
    advanced = []

    class Model:
        can, layers, name = frozenset({"trace", "progress"}), 3, "m"  # model/interface.py: a pass reporting its layers

        def trace(self, enc, keep=None, *, rows=None, on_layer=None):
            for l in range(self.layers):
                on_layer(l, self.layers)
            return {}

    monkeypatch.setattr(attncli.cli.progress.Bar, "advance", lambda self: advanced.append(1))
    with layer_progress(Model(), 5, json_out=True) as on_layer:
        assert on_layer is not None
        Reads(Model(), None, [], on_layer=on_layer)
    assert len(advanced) == 3

    class Old:  # a trace without on_layer: called without it, and a line instead of a bar
        can, layers, name = frozenset({"trace"}), 3, "m"  # model/interface.py: a traced pass

        def trace(self, enc, keep=None, *, rows=None):
            return {}

    with layer_progress(Old(), 5, json_out=True) as on_layer:
        assert on_layer is None
        Reads(Old(), None, [], on_layer=lambda l, L: None)


def test_rows_on_the_torch_backend_are_the_whole_matrix_rows(tiny_gpt2_dir):
    full = matrix_json(tiny_gpt2_dir, "--backend", "torch")
    part = matrix_json(tiny_gpt2_dir, "--backend", "torch", "--rows", "last:3")
    rows = part["rows"]
    assert rows == list(range(len(full["rows"]) - 3, len(full["rows"])))
    f32_close(part["head_weights"], np.asarray(full["head_weights"])[:, rows], depth=2, length=37, per_element=True,
              printed=5e-7)  # the torch pass, float32, cut to the rows or whole
    top = matrix_json(tiny_gpt2_dir, "--backend", "torch", "--rows", "last:3", "--top-k", "2")["top_k"]
    f32_close(np.sum(top["weights"], axis=1) + top["other"], 1.0, length=len(full["rows"]), scale=1.0,
              printed=1.5e-6)  # a float32 row's sum, three printed numbers


@pytest.mark.parametrize("args,message", [
    (["--top-k", "2", "--pool", "sentence"], "--top-k and --pool are two views of the keys: give one of them"),
    (["--rows", "last:2", "--model-view"], "--rows picks rows or keys of one matrix; --model-view draws every head whole: drop one"),
    (["--pool", "4", "--model-view"], "--pool picks rows or keys of one matrix; --model-view draws every head whole: drop one"),
    (["--top-k", "2", "--show", "scores"], "--top-k sums attention weights: drop --show scores"),
    (["--pool", "line", "--flow"], "--pool sums attention weights, and flow values are not shares of a row: drop --flow"),
    (["--pool", "sentence", "--words"], "--pool merges tokens into spans itself: drop --words"),
])
def test_a_long_view_with_an_option_it_cannot_go_with_is_refused_by_name(tmp_path, args, message):
    """Before any model is read (the folder does not even exist); pinned apart from the table
    (attncli.rules.option_conflicts), which makes these messages."""
    result = run("matrix", TEXT, "--transformer", str(tmp_path / "no-model-here"), *args)
    assert result.exit_code == 2 and flat(result.stderr) == f"error: {message}", result.stderr
