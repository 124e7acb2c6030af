"""attn circuit through the command line (a tiny GPT-2): the listing, JSON, the graph's exports
(every label escaped), EAP-IG's --steps, refusals; --pairs: the circuit over the pairs' document and
the refusal of pairs whose mean metrics agree."""

from __future__ import annotations

import json

import pytest

from conftest import needed

needed("torch")
needed("transformers")

from _gradient_cli import CLEAN, CORRUPT, run  # noqa: E402


def test_the_json_document(tiny_gpt2_dir):
    code, out = run("circuit", CLEAN, CORRUPT, "--transformer", str(tiny_gpt2_dir), "--target-id", "7",
                    "--contrast-id", "5", "--json")
    assert code == 0, out
    doc = json.loads(out)
    L, h = 2, 4  # the tiny GPT-2's
    assert doc["method"] == "eap" and doc["steps"] == 1 and doc["layers"] == L
    assert doc["edges_total"] == sum(3 * h * (1 + l * (h + 1)) + 1 + l * (h + 1) + h for l in range(L)) + 1 + L * (h + 1)
    assert doc["faithfulness"] >= 0.9 and doc["faithfulness_asked"] == 0.9
    sizes = [abs(e["score"]) for e in doc["edges"]]
    assert sizes == sorted(sizes, reverse=True) and 0 < len(sizes) < doc["edges_total"]
    names = {n["name"] for n in doc["nodes"]}
    assert all(e["from"] in names and e["to"] in names and e["input"] in ("q", "k", "v", "mlp", "logits")
               for e in doc["edges"])
    restored = (doc["patched"] - doc["corrupt"]) / (doc["clean"] - doc["corrupt"])
    assert restored == pytest.approx(doc["faithfulness"], rel=1e-4)  # fixed: a ratio of 8-decimal rounded metrics


def test_the_listing_and_the_exports(tiny_gpt2_dir, tmp_path):
    svg, page, png = tmp_path / "c.svg", tmp_path / "c.html", tmp_path / "c.png"
    code, out = run("circuit", CLEAN, CORRUPT, "--transformer", str(tiny_gpt2_dir), "--target-id", "7",
                    "--steps", "3", "--faithfulness", "0.8", "--svg", str(svg), "--html", str(page), "--png", str(png))
    assert code == 0, out
    flat = " ".join(out.split())  # rich wraps the title to the terminal
    assert "circuit (EAP-IG, 3 steps)" in flat and "faithfulness" in flat and "logits" in flat
    drawing = svg.read_text()
    assert drawing.startswith("<svg") and drawing.count("<path") >= 1 and "<title>" in drawing
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "<table>" in text and "http" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_hostile_model_name_is_escaped_in_the_graph():
    from attncli.views.circuit_view import circuit_html, circuit_svg

    doc = {"title": "<script>alert(1)</script>", "notes": ["a & b"], "layers": 1,
           "nodes": [{"name": "embed", "layer": -1}, {"name": "logits", "layer": 1}],
           "edges": [{"from": "embed", "to": "logits", "input": "<b>", "score": 0.5}]}
    for text in (circuit_svg(doc), circuit_html(doc)):
        assert "<script>" not in text and "&lt;script&gt;" in text and "<b>" not in text and "a &amp; b" in text


@pytest.mark.parametrize("args, said", [
    (("--faithfulness", "1.5"), "--faithfulness 1.5"),
    (("--faithfulness", "nan"), "--faithfulness nan"),
    (("--steps", "0"), "--steps 0"),
])
def test_refusals(tiny_gpt2_dir, args, said):
    code, out = run("circuit", CLEAN, CORRUPT, "--transformer", str(tiny_gpt2_dir), "--target-id", "7", *args)
    assert code == 2 and said in out and "Traceback" not in out and len(out.strip().splitlines()) == 1, out


def test_texts_of_different_lengths_are_refused(tiny_gpt2_dir):
    code, out = run("circuit", CLEAN, "the dog", "--transformer", str(tiny_gpt2_dir), "--target-id", "7")
    assert code == 2 and "same number of tokens" in out and "Traceback" not in out


def test_an_encoder_is_refused_by_name(tiny_bert_dir):
    code, out = run("circuit", "a [MASK] b", "b [MASK] a", "--transformer", str(tiny_bert_dir), "--target-id", "5")
    assert code == 2 and ("GPT-2 and the Llama family" in out or "masked-language-model" in out)
    assert "Traceback" not in out


def test_a_bert_with_its_mlm_head_is_refused_for_its_post_ln_stream(tmp_path):
    from _trace_reference import build_mlm

    path = str(build_mlm("bert", tmp_path / "bert"))
    code, out = run("circuit", "the cat [MASK] .", "the dog [MASK] .", "--transformer", path, "--target-id", "5")
    out = " ".join(out.split())
    assert code == 2 and "pre-norm decoders" in out and "attn attribute" in out and "Traceback" not in out


def _pairs_file(path, model_dir, rows):
    """A --pairs file of (clean, corrupt) texts, every pair's target and contrast two of the tiny GPT-2's tokens."""
    from attncli.hf import load

    target, contrast = load(str(model_dir), backend="numpy").token_strings([7, 5])
    path.write_text("".join(json.dumps({"clean": c, "corrupt": k, "target": target, "contrast": contrast}) + "\n"
                            for c, k in rows), encoding="utf-8")
    return str(path)


def test_the_pairs_circuit_document(tiny_gpt2_dir, tmp_path):
    """attn circuit --pairs: the circuit over the pairs under attn circuit's keys, its edges the head of
    the ranking by mean |score| (``top``), its faithfulness the document's own metrics' fraction, its
    checks the edge-patched passes (search steps x pairs, the steps a binary search's at most)."""
    import math

    rows = [(CLEAN, CORRUPT), (CORRUPT, CLEAN), ("the mat sat on the cat and the dog", CLEAN)]
    path = _pairs_file(tmp_path / "pairs.jsonl", tiny_gpt2_dir, rows)
    code, out = run("circuit", "--pairs", path, "--transformer", str(tiny_gpt2_dir), "--faithfulness", "0.8", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["pairs"] == 3 and doc["faithfulness_asked"] == 0.8 and doc["faithfulness"] >= 0.8
    assert doc["faithfulness"] == pytest.approx((doc["patched"] - doc["corrupt"]) / (doc["clean"] - doc["corrupt"]),
                                                rel=1e-12)
    key = lambda e: (e["from"], e["to"], e["input"])  # noqa: E731
    n = len(doc["edges"])
    head = min(n, len(doc["top"]))  # top: the 20 strongest
    assert 0 < n < doc["edges_total"] and [key(e) for e in doc["edges"][:head]] == [key(e) for e in doc["top"][:head]]
    sizes = [abs(e["mean"]) for e in doc["edges"]]
    assert sizes == sorted(sizes, reverse=True)  # strongest first
    assert doc["checks"] == doc["search_steps"] * 3
    assert doc["search_steps"] <= math.ceil(math.log2(doc["edges_total"] + 1))  # a binary search's at most


def test_pairs_whose_mean_metrics_agree_are_refused_in_one_line(tiny_gpt2_dir, tmp_path):
    path = _pairs_file(tmp_path / "same.jsonl", tiny_gpt2_dir, [(CLEAN, CLEAN), (CORRUPT, CORRUPT)])
    code, out = run("circuit", "--pairs", path, "--transformer", str(tiny_gpt2_dir), "--json")
    assert code == 2 and "mean clean and corrupted metrics are equal" in out and "Traceback" not in out, out


@pytest.mark.parametrize("width", [60, 120])
def test_the_title_wraps_to_the_terminal_not_to_the_table_and_no_line_ends_in_spaces(width):
    """A circuit's table is narrow (five short columns): its title is a line of its own, wrapped to
    the terminal, where a table title was wrapped to the table's 40 columns and padded with spaces."""
    from rich.console import Console

    from attncli.views.circuit_view import circuit_renderables

    title = "induction-llama · circuit (EAP-IG, 5 steps) · 5 of 110 edges · logit('Ġan') - logit('Ġon') at position 12"
    doc = {"title": title, "notes": ["a note"], "layers": 1,
           "nodes": [{"name": "embed", "layer": -1}, {"name": "logits", "layer": 1}],
           "edges": [{"from": "embed", "to": "logits", "input": "v", "score": 0.5}]}
    console = Console(width=width, color_system=None, record=True)
    with console.capture() as captured:
        for part in circuit_renderables(doc, width):
            console.print(part)
    lines = captured.get().splitlines()
    title_lines = lines[:len(lines) - 3]  # then the header, the edge and the note
    assert " ".join(title_lines) == title
    assert max(len(line) for line in title_lines) > 45 and all(len(line) <= width for line in title_lines)
    assert not any(line.endswith(" ") for line in title_lines)
