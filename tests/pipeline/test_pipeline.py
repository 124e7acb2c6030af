"""One request, one compute: ``attncli.pipeline``.

The CLI (``attn matrix --transformer``), explore (``attn explore --transformer``) and the Python
API build the same ViewRequest and get the same document from the one compute; the result speaks
the result protocol (Jupyter's _repr_svg_ / _repr_html_, export). Encoder-decoders: ``attn heads
--stack`` scores the decoder and cross heads, checked against transformers' own attention by
hand, and the interactive page takes the decoder and cross stacks (cross: T x S, not square).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from _tolerance import TINY32, f32_close, f32_size
from attncli.cli.main import app
from attncli.explore.state import ExploreState
from attncli.pipeline import ViewRequest, compute

SENTENCE = "time flies like an arrow"
SOURCE, TARGET = "time flies like an arrow", "fruit flies like a banana"


def run(*args):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def cli_json(*args) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def page_data(text: str) -> dict:
    return json.loads(re.search(r'id="attn-data">(.*?)</script>', text, re.S).group(1))


# --- one compute behind every surface ------------------------------------------------------------

@pytest.fixture
def selects(monkeypatch):
    """How many views the one compute built (attncli.pipeline.compute_view._select is its only builder)."""
    import attncli.pipeline.compute_view as pc

    calls = []
    real = pc._select

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(pc, "_select", counted)
    return calls


@pytest.mark.parametrize("change", [{"layer": 1, "head": 2}, {"scores": True}, {"norms": True, "layer": 0},
                                    {"words": True, "hide_special": True}])
def test_cli_explore_and_api_give_one_document_for_one_request(tiny_bert_dir, selects, change):
    """explore's state makes a request; its command line, run by the CLI, and the request computed
    through the Python API give the document explore exports, byte for byte."""
    from attncli.explore.checkpoint_state import compute as explore_compute
    from attncli.explore.checkpoint_state import export_text

    state = replace(ExploreState(SENTENCE, transformer=str(tiny_bert_dir), backend="numpy", cursor=(1, 2)), **change)
    res = explore_compute(state, {})
    explored = export_text(res, state, ".json")
    command = shlex.split(state.command_line(explain=res.explainable() is None))
    assert command[:2] == ["attn", "matrix"]
    by_cli = run(*command[1:], "--json")
    assert by_cli.exit_code == 0, by_cli.stderr
    request = state.view_request()
    request = replace(request, cursor=False, explain=res.input_cell(state.cursor) if res.explainable() is None else None)
    by_api = compute(request).json_text()
    assert explored == by_cli.stdout == by_api
    assert len(selects) == 3  # one view each, all three from attncli.pipeline.compute_view
    doc = json.loads(by_api)
    assert doc["show"] == ("scores" if change.get("scores") else "norms" if change.get("norms") else "weights")
    if change.get("scores"):  # q.k x scale before the softmax: not a distribution
        assert not np.allclose(np.array(doc["weights"], dtype=float).sum(axis=1), 1.0)


def test_the_request_is_the_command_line_and_the_result_says_it(tiny_gpt2_dir):
    request = ViewRequest(SENTENCE, transformer=str(tiny_gpt2_dir), layer=1, show="scores", backend="numpy")
    res = compute(request)
    assert res.command_line() == request.command_line()
    args = shlex.split(res.command_line())
    assert args[args.index("--show") + 1] == "scores" and args[args.index("--layer") + 1] == "1"
    assert res.kind == "pretrained" and res.document()["layer"] == 1
    assert compute(replace(request, show="weights", model_view=True, layer=None)).kind == "model_view"


def test_a_view_result_displays_in_jupyter_and_exports(tiny_bert_dir, tmp_path):
    """_repr_svg_ / _repr_html_ draw the heatmaps; export writes the --json document, the drawing
    and, for html, the interactive page attn matrix --html writes."""
    request = ViewRequest(SENTENCE, transformer=str(tiny_bert_dir), layer=0, head=1)
    res = compute(request)
    svg, html = res._repr_svg_(), res._repr_html_().replace("&#160;", " ")
    assert svg.lstrip().startswith("<svg") and "time" in svg and "layer&#160;0&#160;head&#160;1" in svg
    assert "time" in html and "layer 0 head 1" in html and "<svg" not in html
    res.export("json", tmp_path / "v.json")
    assert json.loads((tmp_path / "v.json").read_text()) == cli_json(
        "matrix", SENTENCE, "--transformer", str(tiny_bert_dir), "--layer", "0", "--head", "1")
    res.export("svg", tmp_path / "v.svg")
    assert "layer&#160;0&#160;head&#160;1" in (tmp_path / "v.svg").read_text()
    res.export("html", tmp_path / "v.html")
    data = page_data((tmp_path / "v.html").read_text())
    assert data["start"]["layer"] == 0 and data["start"]["head"] == 1 and data["square"] is True


# --- explore's key for --show scores -------------------------------------------------------------

def test_explore_s_cycles_weights_scores_norms_as_attn_matrix_show(tiny_gpt2_dir):
    needed("textual")
    from test_explore import drive, press

    seen = {}

    async def script(app, pilot):
        await press(app, pilot, "s")
        seen["scores"] = (app.message, app.state.scores, app.state.norms, app.result.meta["show"],
                          app.result.view.weights.copy(), app.state.command_line(explain=False))
        await press(app, pilot, "s")
        seen["norms"] = (app.state.scores, app.state.norms, app.result.meta["show"])
        await press(app, pilot, "S", "S")
        seen["weights"] = (app.state.scores, app.state.norms, app.result.meta["show"])

    drive(script, ExploreState(SENTENCE, transformer=str(tiny_gpt2_dir), backend="numpy"), size=(160, 50))
    message, scores, norms, show, weights, command = seen["scores"]
    assert message == "" and scores and not norms and show == "scores"
    assert "--show scores" in command
    doc = cli_json(*shlex.split(command)[1:])
    drawn = np.array([[np.nan if w is None else w for w in row] for row in doc["weights"]], dtype=float)
    np.testing.assert_allclose(np.where(np.isfinite(weights), weights, np.nan), drawn, atol=1e-6, rtol=1e-5,  # fixed: the JSON's 6 significant digits (5e-6 relative) of the same float64 pass
                               equal_nan=True)
    assert seen["norms"] == (False, True, "norms")
    assert seen["weights"] == (False, False, "weights")


# --- encoder-decoders: every stack is a field ------------------------------------------------------

@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    needed("torch")
    needed("transformers")
    from _seq2seq_fixtures import BUILDERS

    return {kind: BUILDERS[kind](tmp_path_factory.mktemp(f"pipe-{kind}") / kind) for kind in ("t5", "bart")}


@pytest.fixture(scope="module")
def bart_reference(seq2seq):
    """transformers' own attention of (SOURCE, labels of TARGET), and the target's special rows."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    path = seq2seq["bart"]
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(path), attn_implementation="eager").eval()
    src = tok(SOURCE, return_tensors="pt")
    labels = tok(text_target=TARGET, return_special_tokens_mask=True)
    with torch.no_grad():
        out = model(**src, labels=torch.tensor([labels["input_ids"]]), output_attentions=True)
    as_np = lambda ts: np.stack([a[0].double().numpy() for a in ts])  # noqa: E731 - (L, h, R, C)
    special_rows = np.array([True] + labels["special_tokens_mask"][:-1], dtype=bool)  # shifted right
    return dict(decoder=as_np(out.decoder_attentions), cross=as_np(out.cross_attentions), special_rows=special_rows,
                source_special=np.array(tok(SOURCE, return_special_tokens_mask=True)["special_tokens_mask"], bool))


@pytest.mark.parametrize("stack", ["decoder", "cross"])
def test_heads_stack_scores_the_decoder_and_cross_heads_by_hand(seq2seq, bart_reference, tmp_path, stack):
    lines = tmp_path / "pairs.txt"
    lines.write_text(f"{SOURCE}\t{TARGET}\n", encoding="utf-8")
    result = run("heads", "--transformer", str(seq2seq["bart"]), "--file", str(lines), "--stack", stack, "--json")
    assert result.exit_code == 0, result.stderr
    assert f"these are the {stack} stack's heads" in " ".join(result.stderr.split())
    doc = json.loads(result.stdout)
    ref = bart_reference[stack]  # (L, h, T, T) or (L, h, T, S)
    assert doc["stack"] == stack and doc["layers"] == ref.shape[0] and doc["heads_per_layer"] == 2  # BART: 2 decoder heads
    assert doc["causal"] is (stack == "decoder")
    rows = ~bart_reference["special_rows"]
    if stack == "decoder":
        rows &= np.arange(len(rows)) >= 1  # a causal row needs two visible keys
    # attn's pass against transformers' float32 one, through both stacks: means and sums of weights, each weight
    # p moving by f32_atol(1) times M = 2 max(1, log(p_max / p)) p (tests/_tolerance.py's per_element), so the
    # mean or sum of the weights at the mean or sum of their M
    depth, length = f32_size(seq2seq["bart"])
    for entry in doc["heads"]:
        A = ref[entry["layer"], entry["head"]]
        M = 2 * np.maximum(1, np.log(A.max(-1, keepdims=True) / np.maximum(A, TINY32))) * np.maximum(A, TINY32)
        f32_close(entry["first_token"], A[rows, 0].mean(), depth, length, scale=M[rows, 0].mean())
        if stack == "cross":  # the source's </s>: a separator key; the diagonal: "self"
            seps = bart_reference["source_special"].copy()
            seps[0] = False
            f32_close(entry["separator"], A[rows][:, seps].sum(axis=1).mean(), depth, length,
                      scale=M[rows][:, seps].sum(axis=1).mean())
            diag = np.array([A[i, i] if i < A.shape[1] else 0.0 for i in np.flatnonzero(rows)])
            at = np.array([M[i, i] if i < A.shape[1] else 0.0 for i in np.flatnonzero(rows)])
            f32_close(entry["self"], diag.mean(), depth, length, scale=at.mean())


def test_heads_stack_reads_the_encoder_by_default_and_refuses_a_model_without_stacks(seq2seq, tiny_bert_dir, tmp_path):
    lines = tmp_path / "s.txt"
    lines.write_text(f"{SOURCE}\n", encoding="utf-8")
    enc = run("heads", "--transformer", str(seq2seq["bart"]), "--file", str(lines), "--stack", "encoder", "--json")
    assert enc.exit_code == 0 and json.loads(enc.stdout)["heads_per_layer"] == 4  # BART: 4 encoder heads
    refused = run("heads", "--transformer", str(tiny_bert_dir), "--file", str(lines), "--stack", "cross")
    assert refused.exit_code == 2 and "--stack reads an encoder-decoder" in " ".join(refused.stderr.split())
    assert run("heads", "--stack", "cross").exit_code == 2


@pytest.mark.parametrize("stack", ["decoder", "cross"])
def test_the_page_takes_the_decoder_and_the_cross_stacks(seq2seq, bart_reference, tmp_path, stack):
    page = tmp_path / f"{stack}.html"
    result = run("matrix", SOURCE, "--transformer", str(seq2seq["bart"]), "--target", TARGET, "--stack", stack,
                 "--html", str(page))
    assert result.exit_code == 0, result.stderr
    data = page_data(page.read_text(encoding="utf-8"))
    ref = bart_reference[stack]  # (L, h, T, S)
    T, S = ref.shape[-2:]
    assert data["square"] is (stack == "decoder") and data["heads"] == 2 and data["layers"] == ref.shape[0]
    assert len(data["input"]["tokens"]) == T and len(data["key_input"]["tokens"]) == S
    assert ("1|0|1" in data["views"]) is (stack == "decoder")  # no rollout across two sequences
    view = data["views"]["1|0|0"]  # layer 1, every token, no rollout
    assert len(view["tokens"]) == T and len(view["key_tokens"]) == S
    size = f32_size(seq2seq["bart"])  # against transformers' float32 pass, weights per element
    f32_close(np.array(view["weights"]), ref[1].mean(axis=0), *size, per_element=True)
    f32_close(np.array(view["head_weights"][1]), ref[1, 1], *size, per_element=True)
    if stack == "cross":
        assert T != S  # the test means something: the matrix is not square
        keys = view["words"]["key_tokens"]  # the source's words (its <s> and </s> each a word of its own)
        assert keys == ["<s>", *SOURCE.split(), "</s>"] and len(view["words"]["weights"][0]) == len(keys)


def test_the_cross_page_draws_target_rows_over_source_columns(seq2seq, tmp_path):
    """In Chromium: the cross page's heatmap is T x S with the source's words as its columns, words
    merged on both sides (each side's own groups)."""
    from _chromium import evaluate_in_page
    from test_page import CELLS, HEADERS, chromium_or_skip, fmt
    from attncli.io.textio import token_label

    chromium = chromium_or_skip()
    page = tmp_path / "cross.html"
    args = ("matrix", SOURCE, "--transformer", str(seq2seq["bart"]), "--target", TARGET, "--stack", "cross")
    assert run(*args, "--html", str(page)).exit_code == 0
    tokens = cli_json(*args, "--layer", "1", "--head", "0")
    words = cli_json(*args, "--layer", "1", "--head", "0", "--words")
    got = evaluate_in_page(chromium, page.as_uri(), [
        "document.getElementById('head').value = '0'; document.getElementById('head').dispatchEvent(new Event('change'))",
        CELLS, HEADERS, "document.getElementById('rollout').disabled",
        "document.getElementById('words').click()", CELLS, HEADERS])
    cells, headers, no_rollout, word_cells, word_headers = got[1], got[2], got[3], got[5], got[6]
    # the headers are the source tokens' texts (BART's byte-level 'Ġflies' is '␣flies'), the raw pieces in the JSON
    assert cells == [fmt(row) for row in tokens["weights"]] and headers == [token_label(t) for t in tokens["key_token_texts"]]
    assert tokens["key_token_texts"] != tokens["key_tokens"] and any(t.startswith("Ġ") for t in tokens["key_tokens"])
    assert len(cells) != len(headers) and no_rollout is True
    assert word_cells == [fmt(row) for row in words["words"]["weights"]]
    assert word_headers == words["words"]["key_tokens"] == ["<s>", *SOURCE.split(), "</s>"]
