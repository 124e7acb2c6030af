"""``attn matrix --transformer`` and ``attn heads --transformer`` through the CLI runner.

The reference is transformers' own ``output_attentions`` (eager attention): every layer and head
of the CLI's JSON must equal it, on MiniLM and the tiny random models, single sentences and pairs.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from _tolerance import f32_close, f32_size
from attncli.cli.main import app

SENTENCE, PAIR = "time flies like an arrow", "fruit flies like a banana"
TINY = ["tiny_bert_dir", "tiny_roberta_dir", "tiny_distilbert_dir", "tiny_gpt2_dir"]
_reference_cache: dict = {}


def run(*args, env=None):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()  # a console sized by COLUMNS is made afresh for every run
    return CliRunner().invoke(app, list(args), env=env)


def matrix_json(model, *args):
    result = run("matrix", *args, "--transformer", str(model), "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def reference(path, text, pair=None):
    """(L, h, T, T) attentions and tokens from transformers itself, eager attention."""
    key = (str(path), text, pair)
    if key not in _reference_cache:
        import torch
        from transformers import AutoModel, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
        model = AutoModel.from_pretrained(str(path), attn_implementation="eager").eval()
        enc = tok(text, pair, return_tensors="pt") if pair is not None else tok(text, return_tensors="pt")
        with torch.no_grad():
            out = model(**enc, output_attentions=True)
        assert len(out.attentions) == model.config.num_hidden_layers
        att = np.stack([a[0].double().numpy() for a in out.attentions])  # (L, h, T, T)
        _reference_cache[key] = (att, tok.convert_ids_to_tokens(enc["input_ids"][0]))
    return _reference_cache[key]


def check_every_layer(path, backend, pair):
    """Every layer's and head's weights in attn matrix --json against transformers' float32 eager
    attention, within float32 rounding of each weight (tests/_tolerance.py, the model's size)."""
    size = f32_size(path)
    att, tokens = reference(path, SENTENCE, pair)
    extra = ["--pair", pair] if pair is not None else []
    for layer in range(att.shape[0]):
        doc = matrix_json(path, SENTENCE, *extra, "--layer", str(layer), "--backend", backend)
        assert doc["tokens"] == tokens and doc["backend"] == backend and doc["layer"] == layer
        hw = np.array(doc["head_weights"])  # (h, T, T)
        f32_close(hw, att[layer], *size, per_element=True, what=f"layer {layer}")
        f32_close(doc["weights"], att[layer].mean(axis=0), *size, per_element=True, what=f"layer {layer} mean")
    head = att.shape[1] - 1
    doc = matrix_json(path, SENTENCE, *extra, "--layer", "0", "--head", str(head), "--backend", backend)
    assert doc["head"] == head and doc["head_weights"] is None
    f32_close(doc["weights"], att[0, head], *size, per_element=True)
    return doc


@pytest.mark.parametrize("backend", ["torch", "numpy"])  # torch: sdpa, weights from q, k
@pytest.mark.parametrize("pair", [None, PAIR])
def test_minilm_weights_equal_transformers(minilm_dir, backend, pair):
    doc = check_every_layer(minilm_dir, backend, pair)
    if pair is not None:
        assert doc["segments"][0] is None and doc["special"][0] is True
        assert doc["segments"][1] == "a" and doc["segments"][-2] == "b"


@pytest.mark.parametrize("fixture", TINY)
@pytest.mark.parametrize("backend", ["torch", "numpy"])  # torch: sdpa, weights from q, k
def test_tiny_models_weights_equal_transformers(request, fixture, backend):
    path = request.getfixturevalue(fixture)
    check_every_layer(path, backend, None)
    if fixture != "tiny_gpt2_dir":
        check_every_layer(path, backend, PAIR)


def test_gpt2_is_causal_and_has_no_pairs(tiny_gpt2_dir):
    doc = matrix_json(tiny_gpt2_dir, SENTENCE, "--layer", "1")
    w = np.array(doc["head_weights"])
    assert doc["causal"] is True and np.all(np.triu(w, 1) == 0.0)
    result = run("matrix", SENTENCE, "--transformer", str(tiny_gpt2_dir), "--pair", PAIR)
    assert result.exit_code == 2 and "pair" in result.stderr and "Traceback" not in result.stderr


def test_default_layer_is_the_last(tiny_bert_dir):
    att, _ = reference(tiny_bert_dir, SENTENCE)
    doc = matrix_json(tiny_bert_dir, SENTENCE)
    assert doc["layer"] == att.shape[0] - 1 and doc["head"] is None
    f32_close(doc["head_weights"], att[-1], *f32_size(tiny_bert_dir), per_element=True)


def words_by_formula(A: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """--words written out (bertviz / Clark et al. 2019's word-level attention): the weight from
    word I to word J is the mean over I's pieces i of the sum over J's pieces j of A[i, j]."""
    out = np.zeros((len(groups), len(groups)))
    for I, rows in enumerate(groups):
        for J, cols in enumerate(groups):
            out[I, J] = sum(sum(A[i, j] for j in cols) for i in rows) / len(rows)
    return out


def hide_special_by_formula(A: np.ndarray, keep: list[bool]) -> tuple[np.ndarray, list[float]]:
    """--hide-special written out: kept rows and keys, each row renormalised over the kept keys;
    and the share of each kept row that went to the dropped keys."""
    kept = [i for i, k in enumerate(keep) if k]
    out = np.array([[A[i, j] / sum(A[i, jj] for jj in kept) for j in kept] for i in kept])
    return out, [float(sum(A[i, j] for j in range(len(keep)) if not keep[j])) for i in kept]


def rollout_by_formula(att: np.ndarray, upto: int) -> np.ndarray:
    """--rollout written out (Abnar & Zuidema 2020): per layer 0.5 (mean of the heads) + 0.5 I,
    multiplied from the first layer up: R = B_upto ... B_1 B_0."""
    T = att.shape[-1]
    R = np.eye(T)
    for layer in range(upto + 1):
        B = 0.5 * att[layer].astype(np.float64).mean(axis=0) + 0.5 * np.eye(T)
        R = B @ R
    return R


def test_words_hide_special_filter_and_rollout_from_the_reference(minilm_dir):
    from attncli.attention.rollout import rollout
    from attncli.attention.words import hide_special, merge_words

    att, tokens = reference(minilm_dir, "the tokenization flies", None)
    size = f32_size(minilm_dir)  # float32 weights against attn's: sums and products of weights, per element
    doc = matrix_json(minilm_dir, "the tokenization flies", "--layer", "2", "--head", "3", "--words")
    w = doc["words"]
    assert w["tokens"] == ["[CLS]", "the", "tokenization", "flies", "[SEP]"]
    groups = w["groups"]
    assert groups == [[0], [1], [2, 3], [4], [5]], tokens  # 'tokenization' = 'token', '##ization'
    f32_close(w["weights"], merge_words(att[2, 3], groups, groups), *size, per_element=True)
    f32_close(w["weights"], words_by_formula(att[2, 3], groups), *size, per_element=True)
    # a float32 softmax row sums to 1 within its normalising sum's rounding; the JSON's %.6g: 5e-6 of it
    f32_close(np.array(w["weights"]).sum(-1), 1.0, length=len(tokens), scale=1.0, printed=5e-6)
    # a one-piece word keeps its weights: 'the' attending to [SEP]
    f32_close(w["weights"][1][-1], att[2, 3, 1, -1], *size, per_element=True)

    hidden = matrix_json(minilm_dir, "the tokenization flies", "--layer", "2", "--head", "3", "--hide-special")
    keep = ~np.array([t in ("[CLS]", "[SEP]") for t in tokens])
    expected, share = hide_special(att[2, 3], keep, keep)
    assert hidden["tokens"] == [t for t, k in zip(tokens, keep) if k] and not any(hidden["special"])
    f32_close(hidden["weights"], expected, *size, per_element=True)
    f32_close(hidden["special_share"], share, *size)
    by_formula, share_by_formula = hide_special_by_formula(att[2, 3], list(keep))
    f32_close(hidden["weights"], by_formula, *size, per_element=True)
    f32_close(hidden["special_share"], share_by_formula, *size)

    att2, tokens2 = reference(minilm_dir, SENTENCE, PAIR)
    block = matrix_json(minilm_dir, SENTENCE, "--pair", PAIR, "--filter", "b-a", "--layer", "5", "--head", "8")
    assert block["tokens"] == PAIR.split() and block["key_tokens"] == SENTENCE.split()
    rows, cols = block["rows"], block["cols"]
    f32_close(block["weights"], att2[5, 8][np.ix_(rows, cols)], *size, per_element=True)

    rolled = matrix_json(minilm_dir, SENTENCE, "--rollout")
    att1, _ = reference(minilm_dir, SENTENCE)
    f32_close(rolled["weights"], rollout(att1), *size, per_element=True)
    f32_close(rolled["weights"], rollout_by_formula(att1, att1.shape[0] - 1), *size, per_element=True)
    f32_close(np.array(rolled["weights"]).sum(-1), 1.0, size[0], len(rolled["tokens"]), scale=1.0,  # a product of
              printed=5e-6)  # every layer's rows, each summing to 1 within its rounding
    partial = matrix_json(minilm_dir, SENTENCE, "--rollout", "--layer", "1")
    f32_close(partial["weights"], rollout(att1, upto=1), *size, per_element=True)
    f32_close(partial["weights"], rollout_by_formula(att1, 1), *size, per_element=True)


@pytest.mark.parametrize("args", [["--hide-special"], ["--words", "--hide-special"], ["--pair", "fruit flies", "--filter", "b-a"],
                                  ["--words", "--pair", "fruit flies", "--filter", "b-a"]])
def test_rows_keep_their_numbers_when_others_are_hidden(tiny_bert_dir, args):
    """One numbering everywhere: a row is labelled with its input position (a word with its index
    among the input's words, special tokens included), 0-based, whatever --hide-special or
    --filter leaves out; the JSON's rows (words.rows) are those numbers."""
    doc = json.loads(run("matrix", "time flies like an arrow", "--transformer", str(tiny_bert_dir), "--head", "0",
                         "--json", *args).stdout)
    numbers = doc["words"]["rows"] if "--words" in args else doc["rows"]
    tokens = doc["words"]["tokens"] if "--words" in args else doc["tokens"]
    assert numbers[0] > 0  # [CLS] (0) is never shown here: the first row keeps a later number
    text = run("matrix", "time flies like an arrow", "--transformer", str(tiny_bert_dir), "--head", "0", *args,
               env={"COLUMNS": "200"}).stdout
    labels = [re.match(r"^(\d+) (?:[AB] )?(\S+)", line) for line in text.splitlines()]
    drawn = [(int(m.group(1)), m.group(2)) for m in labels if m]
    assert drawn == list(zip(numbers, tokens))


@pytest.mark.parametrize("fixture", ["minilm_dir", "tiny_gpt2_dir"])
def test_explain_recomputes_the_cell_from_q_and_k(request, fixture):
    path = request.getfixturevalue(fixture)
    doc = matrix_json(path, SENTENCE, "--layer", "1", "--head", "0", "--explain", "3", "2", "--backend", "numpy")
    ex = doc["explanation"]
    text = json.dumps(ex)
    assert "MISMATCH" not in text and "matches the matrix" in text
    row = np.array(doc["weights"][3])  # (S,): the recomputed weight inside its printed row, whose largest sizes it
    row[2] = ex["weight"]
    f32_close(row, doc["weights"][3], 2, f32_size(path)[1], per_element=True,  # layer 1: depth 2
              printed=5e-6 * np.abs(row), what="the explained weight")
    names = [s["name"] for s in ex["steps"]]
    assert names[:5] == ["q_I", "k_J", "q . k", "scale", "score"]
    every = matrix_json(path, SENTENCE, "--layer", "1", "--explain", "3", "2", "--backend", "numpy")["explanation"]
    assert [h["head"] for h in every["heads"]] == list(range(len(every["heads"])))
    assert "MISMATCH" not in json.dumps(every)
    if fixture == "tiny_gpt2_dir":  # a key after the query is masked in a decoder
        masked = matrix_json(path, SENTENCE, "--layer", "0", "--head", "0", "--explain", "1", "3")["explanation"]
        assert masked["masked"] and masked["weight"] == 0.0


BAD = [
    (["--variant", "dot"], "--variant"),
    (["--proj", "random"], "--proj"),
    (["--positions", "none"], "--positions"),
    (["--d-k", "4"], "--d-k"),
    (["--context", "x y"], "--pair"),
    (["--causal"], "--causal"),
    (["--model", "x"], "--model"),
    (["--show", "output"], "--show output"),  # scores and norms: tests/attention/test_value_norms.py
    (["--filter", "a-b"], "--pair"),
    (["--words", "--explain", "1", "1"], "--words"),
    (["--layer", "99"], "out of range"),
    (["--head", "99"], "out of range"),
    (["--layer", "-1"], "0-based"),
    (["--rollout", "--head", "0"], "--head"),
    (["--rollout", "--explain", "1", "1"], "--rollout"),
    (["--model-view", "--head", "1"], "--model-view"),
    (["--model-view", "--layers", "0-9"], "layers 0..1"),
    (["--model-view", "--layers", "x"], "A-B"),
    (["--layers", "0-1"], "--model-view"),
    (["--explain", "1", "1", "--backend", "torch"], "--backend numpy"),
    (["--explain", "99", "1", "--backend", "numpy"], "outside"),
    (["--rows", "50:60"], "--rows starts at 50"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_exit_2_with_one_line(tiny_bert_dir, args, needle):
    result = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error:")


@pytest.mark.parametrize("args", [["--pair", "x"], ["--words"], ["--hide-special"], ["--rollout"], ["--filter", "a-a"],
                                  ["--backend", "numpy"], ["--truncate"], ["--model-view"]])
def test_transformer_options_need_transformer(args):
    result = run("matrix", SENTENCE, *args)
    assert result.exit_code == 2 and "needs --transformer" in result.stderr


def test_missing_and_non_model_directories(tmp_path):
    result = run("matrix", SENTENCE, "--transformer", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "no such model" in result.stderr
    result = run("matrix", SENTENCE, "--transformer", str(tmp_path))
    assert result.exit_code == 2 and "config.json" in result.stderr


def test_too_long_says_the_limit_and_truncate_cuts(tiny_bert_dir):
    long = " ".join(["time flies like an arrow"] * 20)
    result = run("matrix", long, "--transformer", str(tiny_bert_dir))
    assert result.exit_code == 2 and "--truncate" in result.stderr and "40" in result.stderr
    doc = matrix_json(tiny_bert_dir, long, "--truncate")
    assert doc["truncated"] is True and len(doc["tokens"]) == 40
    # the cut is said on stderr, the view or --json on stdout; a text that fits is not cut and not said to be
    for extra in ([], ["--json"]):
        result = run("matrix", long, "--transformer", str(tiny_bert_dir), "--truncate", *extra)
        assert result.exit_code == 0 and "cut the input to the model's limit of 40 tokens" in result.stderr
        assert "cut the input" not in result.stdout
    result = run("matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--truncate")
    assert result.exit_code == 0 and "cut the input" not in result.stderr


LONG, LONG_B = " ".join(["time flies like an arrow"] * 20), " ".join(["time flies like an apple"] * 20)


@pytest.mark.parametrize("args", [
    ("qk", LONG), ("ablate", LONG, "--target", " time"), ("dla", LONG, "--target", " time"),
    ("patch", LONG, LONG_B, "--target", " time"), ("attribute", LONG, LONG_B, "--target", " time"),
    ("circuit", LONG, LONG_B, "--target", " time"), ("attribute", "--pairs", "PAIRS"),
])
def test_too_long_names_only_options_the_command_has(tiny_gpt2_dir, tmp_path, args):
    """A command without --truncate says "shorten it" and no more (it once said "pass --truncate")."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"clean": LONG, "corrupt": LONG_B, "target": " time"}) + "\n")
    result = run(*[str(pairs) if a == "PAIRS" else a for a in args], "--transformer", str(tiny_gpt2_dir))
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and said.endswith("more than the model's limit of 40: shorten it"), said
    assert "--truncate" not in said


def _views(path, pair_ok=True):
    views = [["--layer", "1", "--head", "0"], ["--layer", "0"], ["--words", "--hide-special"], ["--rollout"],
             ["--layer", "1", "--head", "2", "--explain", "2", "1", "--backend", "numpy"], ["--model-view"],
             ["--model-view", "--layers", "1-1", "--hide-special"]]
    if pair_ok:
        views += [["--pair", PAIR, "--layer", "1"], ["--pair", PAIR, "--filter", "a-b", "--words"]]
    return views


@pytest.mark.parametrize("columns", [40, 120])
@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_gpt2_dir"])
def test_views_render_and_fit(request, fixture, columns):
    path = request.getfixturevalue(fixture)
    for args in _views(path, pair_ok=fixture != "tiny_gpt2_dir"):
        result = run("matrix", SENTENCE, "--transformer", str(path), *args, env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, (args, result.stderr)
        lines = result.stdout.splitlines()
        assert lines and all(len(line) <= columns for line in lines), (args, [l for l in lines if len(l) > columns])
        if "--model-view" not in args:
            assert re.search(r"\d\.\d\d", result.stdout), args
    view = run("matrix", SENTENCE, "--transformer", str(path), "--pair" if fixture != "tiny_gpt2_dir" else "--layer",
               PAIR if fixture != "tiny_gpt2_dir" else "1", env={"COLUMNS": str(columns)})
    if fixture != "tiny_gpt2_dir":
        assert "A = tokens 1-" in view.stdout and "B time" not in view.stdout and " B " in view.stdout


def test_model_view_json_and_classes(tiny_bert_dir):
    att, _ = reference(tiny_bert_dir, SENTENCE)
    doc = matrix_json(tiny_bert_dir, SENTENCE, "--model-view")
    a = np.array(doc["attentions"]).reshape(att.shape)
    f32_close(a, att, *f32_size(tiny_bert_dir), per_element=True)
    assert len(doc["classes"]) == att.shape[0] and all("label" in c for layer in doc["classes"] for c in layer)


def test_svg_and_html_exports_load_nothing_from_the_network(tiny_bert_dir, tmp_path):
    svg, html = tmp_path / "m.svg", tmp_path / "m.html"
    result = run("matrix", SENTENCE, "--pair", PAIR, "--transformer", str(tiny_bert_dir), "--layer", "1", "--head", "2",
                 "--svg", str(svg), "--html", str(html))
    assert result.exit_code == 0, result.stderr
    assert svg.read_text().startswith("<svg") and "flies" in svg.read_text()
    page = html.read_text()
    assert "arrow" in page and "ban" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the HTML must not load anything"
    assert "@import" not in page


# --- attn heads --transformer -------------------------------------------------------------------


@pytest.fixture(scope="session")
def head_gpt2_dir(tmp_path_factory):
    needed("transformers")
    from _head_fixtures import build_head_gpt2

    return build_head_gpt2(tmp_path_factory.mktemp("head-gpt2") / "gpt2")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_heads_set_by_hand_are_classified(head_gpt2_dir, backend):
    result = run("heads", "--transformer", str(head_gpt2_dir), "--file", str(head_gpt2_dir / "sentences.txt"),
                 "--backend", backend, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    labels = {(h["layer"], h["head"]): h["label"] for h in doc["heads"]}
    assert labels[(0, 0)] == "previous_token"
    assert labels[(0, 1)] == "first_token"
    assert labels[(1, 2)] == "induction"
    assert all(labels[k] == "broad" for k in labels if k not in ((0, 0), (0, 1), (1, 2)))
    by = {(h["layer"], h["head"]): h for h in doc["heads"]}
    assert by[(0, 0)]["previous_token"] > 0.99 and by[(0, 1)]["first_token"] > 0.99 and by[(1, 2)]["induction"] > 0.9
    for key in ("model", "layers", "heads_per_layer", "sentences", "queries", "window", "uniform", "thresholds", "heads"):
        assert key in doc  # the shape of attn heads' JSON
    assert doc["backend"] == backend and doc["sentences"] == 4 and doc["uniform"]["entropy"] == pytest.approx(1.0)
    assert doc["heads"][0]["next_token"] is None and doc["heads"][0]["separator"] is None  # a decoder has neither


def test_heads_exclude_first_drops_the_first_token_score(head_gpt2_dir):
    result = run("heads", "--transformer", str(head_gpt2_dir), "--file", str(head_gpt2_dir / "sentences.txt"),
                 "--exclude-first", "--json")
    doc = json.loads(result.stdout)
    assert doc["exclude_first"] is True and all(h["first_token"] is None for h in doc["heads"])
    assert {(h["layer"], h["head"]): h["label"] for h in doc["heads"]}[(0, 0)] == "previous_token"


def test_heads_on_an_encoder_score_next_token_and_separator(tiny_bert_dir, tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("time flies like an arrow\nfruit flies like a banana\n", encoding="utf-8")
    result = run("heads", "--transformer", str(tiny_bert_dir), "--file", str(f), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {"next_token", "separator"} <= set(doc["scores"]) and "induction" not in doc["scores"]
    table = run("heads", "--transformer", str(tiny_bert_dir), "--file", str(f), env={"COLUMNS": "120"})
    assert table.exit_code == 0 and "sep" in table.stdout and "next" in table.stdout


@pytest.mark.parametrize("args,needle", [(["--exclude-first"], "needs --transformer"),
                                         (["--backend", "numpy"], "needs --transformer"),
                                         (["--transformer", "x", "--model", "y"], "--model")])
def test_heads_bad_options(args, needle):
    result = run("heads", *args)
    assert result.exit_code == 2 and needle in result.stderr


def test_heads_default_sentences_come_from_brown(tiny_bert_dir):
    from conftest import skip_without_brown

    skip_without_brown()
    result = run("heads", "--transformer", str(tiny_bert_dir), "--sentences", "5", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["sentences"] == 5


def _brown_nowhere(tmp_path, monkeypatch, download):
    """nltk finds no Brown (a fresh lazy reader, an empty search path) and its downloader is ``download``."""
    import nltk
    import nltk.corpus
    from nltk.corpus.reader import CategorizedTaggedCorpusReader
    from nltk.corpus.util import LazyCorpusLoader

    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    monkeypatch.setattr(nltk.corpus, "brown", LazyCorpusLoader(
        "brown", CategorizedTaggedCorpusReader, r"c[a-z]\d\d", cat_file="cats.txt", tagset="brown", encoding="ascii"))
    monkeypatch.setattr(nltk, "download", download)


def test_heads_without_brown_fetches_it_and_scores_on_it(tiny_bert_dir, tmp_path, monkeypatch):
    """Brown missing: `attn heads --transformer` fetches it with nltk's downloader, as `attn train`
    does, says so on stderr, and scores the heads on it."""
    from conftest import skip_without_brown

    skip_without_brown()
    import nltk

    calls, real = [], list(nltk.data.path)

    def download(*args, **kwargs):  # the "download": the real corpus appears on nltk's path
        calls.append(args)
        nltk.data.path[:] = real
        return True

    _brown_nowhere(tmp_path, monkeypatch, download)
    result = run("heads", "--transformer", str(tiny_bert_dir), "--sentences", "3", "--json")
    assert result.exit_code == 0, result.stderr
    assert calls == [("brown",)] and json.loads(result.stdout)["sentences"] == 3
    assert "downloading it with nltk" in " ".join(result.stderr.split())


def test_heads_without_brown_offline_names_both_ways_out(tiny_bert_dir, tmp_path, monkeypatch):
    calls = []
    _brown_nowhere(tmp_path, monkeypatch, lambda *args, **kwargs: calls.append(args) or False)
    result = run("heads", "--transformer", str(tiny_bert_dir), "--sentences", "3")
    assert result.exit_code == 1 and calls == [("brown",)]
    flat = " ".join(result.stderr.split())
    assert "NLTK_DATA" in flat and "python -m nltk.downloader brown" in flat
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_numpy_backend_imports_neither_torch_nor_transformers(tiny_bert_dir):
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from attncli.cli.main import main\n"
        f"sys.argv = ['attn', 'matrix', {SENTENCE!r}, '--pair', {PAIR!r}, '--transformer', {str(tiny_bert_dir)!r},\n"
        "            '--layer', '1', '--head', '0', '--backend', 'numpy', '--json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "sys.stderr.write('HEAVY=' + ','.join(m for m in ('torch', 'transformers', 'gensim', 'nltk') if m in sys.modules) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr
    assert json.loads(proc.stdout)["backend"] == "numpy"


def test_the_transformer_only_options_are_listed_once_for_both_modules():
    from attncli.cli import matrix, transformer

    assert matrix._TRANSFORMER_ONLY == transformer.TRANSFORMER_ONLY
