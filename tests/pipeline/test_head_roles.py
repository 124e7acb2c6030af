"""``attn heads --transformer M --random N`` and ``--weights``: the activation scores against a
brute-force reference written here from TransformerLens' test (its diagonals: the previous token one
back, the duplicate N back, the induction stripe N - 1 back, on the model's special prefix then N
distinct random tokens twice), the hand-built heads found, and the command line: the head map with
its numbers, the JSON, the composition edges and the refusals (exit 2, one line)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

needed("safetensors", reason="the NumPy transformer path needs the pretrained extra")
needed("transformers")

from _llama_fixtures import build_decoder  # noqa: E402
from _llama_head_fixtures import build_head_llama  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.pipeline.head_roles import random_report, repeated_random  # noqa: E402
from attncli.views.head_map import edges  # noqa: E402


def run(*args, code: int = 0):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})
    assert result.exit_code == code, result.output
    return result


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return build_decoder("llama", tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory):
    return build_head_llama(tmp_path_factory.mktemp("heads"))


def reference(model, length: int, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """TransformerLens' diagonals, by loops: mean over queries of A[i, i - offset]."""
    sums = {k: np.zeros((model.layers, model.heads)) for k in ("previous_token", "duplicate_token", "induction")}
    counts = dict.fromkeys(sums, 0)
    for n in range(count):
        ids, p = repeated_random(model, length, seed + n)
        _, A = model.logits_and_attentions(ids)  # (L, h, T, T)
        T = len(ids)
        for i in range(max(p, 1), T):  # every random token that has a token before it
            sums["previous_token"] += A[:, :, i, i - 1]
            counts["previous_token"] += 1
        for i in range(p + length, T):  # the second copy: its first copy N back, the token after it N - 1 back
            sums["duplicate_token"] += A[:, :, i, i - length]
            sums["induction"] += A[:, :, i, i - length + 1]
            counts["duplicate_token"] += 1
            counts["induction"] += 1
    return {k: sums[k] / counts[k] for k in sums}


@pytest.mark.parametrize("length", [1, 2, 7])
def test_random_scores_equal_the_diagonals(llama_dir, length):
    model = load(str(llama_dir), backend="numpy")
    report = random_report(model, length=length, count=3, seed=5)
    want = reference(model, length, 3, seed=5)
    for name in ("previous_token", "duplicate_token", "induction"):
        got = np.array([[e[name] for e in report["heads"] if e["layer"] == l] for l in range(model.layers)])
        np.testing.assert_allclose(got, want[name], rtol=1e-12, atol=1e-15)  # the same float64 weights, summed


def test_random_tokens_are_distinct_and_repeated(llama_dir):
    model = load(str(llama_dir), backend="numpy")
    ids, p = repeated_random(model, 20, 0)
    half = ids[p:p + 20]
    assert ids[p + 20:] == half and len(set(half)) == 20 and not set(half) & set(model.special_ids)
    assert ids[:p] == [model.encode("a").ids[0]] and p == 1  # the tokenizer's <s>


def test_the_hand_built_heads_are_found(head_dir):
    model = load(str(head_dir), backend="numpy")
    report = random_report(model, length=12, count=2)
    top = {name: max(report["heads"], key=lambda e: e[name]) for name in ("previous_token", "duplicate_token", "induction")}
    assert {k: (e["layer"], e["head"]) for k, e in top.items()} == {
        "previous_token": (0, 1), "duplicate_token": (1, 1), "induction": (1, 0)}
    assert min(e[k] for k, e in top.items()) > 0.99


def test_weights_json_and_head_map(head_dir):
    doc = json.loads(run("heads", "--transformer", str(head_dir), "--weights", "--json").stdout)
    assert doc["source"] == "weights" and doc["norm"] == "RMSNorm" and doc["rope"] is True
    assert "unrotated" in doc["composed"] and doc["kv_heads"] == 2
    assert len(doc["heads"]) == 8 and {"copying", "ov_in", "ov_out", "qk_query", "qk_key"} <= set(doc["heads"][0])
    comp = np.asarray(doc["composition"]["K"])  # (L, h, L, h)
    assert comp.shape == (2, 4, 2, 4) and comp[0, 1, 1, 0] == comp.max()
    assert doc["edges"][0] == {"mode": "K", "from": [0, 1], "to": [1, 0], "score": comp[0, 1, 1, 0]}
    assert doc["composition_axes"] == ["writer layer", "writer head", "reader layer", "reader head"]
    text = run("heads", "--transformer", str(head_dir), "--weights", "--threshold", "0.15").output
    assert re.search(r"\b1 +L0H1 +L1H0 +K +0\.\d{3}\b", text) and "above 0.15 (1)" in text  # reader's layer, from, to, kind
    cell = f"{doc['heads'][0]['copying']:.2f}"
    assert cell in text  # the map carries its numbers


def test_the_json_keeps_every_pair_and_its_threshold(llama_dir):
    """--json: the composition scores of every pair of heads (writer layer, head, reader layer, head),
    the threshold, and the edges exactly the pairs above it (not the ten strongest the terminal gets)."""
    above = json.loads(run("heads", "--transformer", str(llama_dir), "--weights", "--threshold", "0", "--json").stdout)
    assert above["threshold"] == 0 and len(above["edges"]) > 10
    assert {(e["mode"], *e["from"], *e["to"]): e["score"] for e in above["edges"]} == {
        (m, *idx): float(np.asarray(above["composition"][m])[idx]) for m in "QKV"
        for idx in zip(*np.nonzero(np.asarray(above["composition"][m]) > 0))}


def test_weights_random_and_corpus_export(head_dir, tmp_path):
    """--svg / --html / --png (with --width) as every drawn command: --weights' SVG holds the map
    (a cell per head) and the composition graph (the edges above --threshold); --random's the map;
    the corpus scores' the terminal's table, recorded. --width without a file is refused (exit 2)."""
    import xml.etree.ElementTree as ET

    svg_ns = "{http://www.w3.org/2000/svg}"
    files = {fmt: tmp_path / f"w.{fmt}" for fmt in ("svg", "html", "png")}
    run("heads", "--transformer", str(head_dir), "--weights", "--threshold", "0.15", "--width", "100",
        *(x for fmt, p in files.items() for x in (f"--{fmt}", str(p))))
    root = ET.parse(files["svg"]).getroot()
    assert len([g for g in root.iter(f"{svg_ns}g") if g.get("class") == "cell"]) == 8
    titles = [p.find(f"{svg_ns}title").text for p in root.iter(f"{svg_ns}path")]
    assert len(titles) == 1 and titles[0].startswith("L0H1 -> L1H0 (K-composition): 0.1")  # the one edge above 0.15
    assert "top heads by copying" in files["html"].read_text() and files["png"].read_bytes()[:4] == b"\x89PNG"
    run("heads", "--transformer", str(head_dir), "--random", "6", "--sentences", "1", "--svg", str(tmp_path / "r.svg"))
    assert "induction score" in (tmp_path / "r.svg").read_text()
    (tmp_path / "s.txt").write_text("the cat sat on the mat\n", encoding="utf-8")
    run("heads", "--transformer", str(head_dir), "--file", str(tmp_path / "s.txt"), "--svg", str(tmp_path / "c.svg"))
    ET.parse(tmp_path / "c.svg")
    assert "--width lays out" in run("heads", "--transformer", str(head_dir), "--weights", "--width", "90", code=2).output


def test_edges_above_a_threshold():
    doc = {"composition": {m: np.zeros((2, 1, 2, 1)).tolist() for m in "QKV"}}
    doc["composition"]["Q"][0][0][1][0] = 0.5
    doc["composition"]["V"][0][0][1][0] = 0.2
    assert [e["mode"] for e in edges(doc, 0.1)] == ["Q", "V"]
    assert [e["mode"] for e in edges(doc, 0.3)] == ["Q"]
    assert [e["score"] for e in edges(doc, None)] == [0.5, 0.2]


def test_random_json_and_role(head_dir):
    doc = json.loads(run("heads", "--transformer", str(head_dir), "--random", "6", "--sentences", "2", "--json").stdout)
    assert doc["source"] == "random" and doc["random"] == {"length": 6, "sequences": 2, "seed": 0}
    assert doc["role"] == "induction" and doc["scores"] == ["previous_token", "duplicate_token", "induction"]
    text = run("heads", "--transformer", str(head_dir), "--random", "6", "--role", "previous_token").output
    assert "previous-token score" in text and "1.00" in text


@pytest.mark.parametrize("args, words", [
    (("--weights", "--random", "4"), "give one"),
    (("--weights", "--sentences", "3"), "drop --sentences"),
    (("--random", "0"), "--random must be in"),
    (("--random", "5000"), "--random must be in"),
    (("--weights", "--role", "induction"), "--role 'induction'"),
    (("--random", "4", "--threshold", "0.2"), "--threshold picks"),
    (("--weights", "--threshold", "2"), "--threshold must be in"),
    (("--role", "copying"), "--role picks"),
    (("--weights", "--backend", "torch"), "drop --backend torch"),
])
def test_refusals(head_dir, args, words):
    result = run("heads", "--transformer", str(head_dir), *args, code=2)
    assert words in result.output and "Traceback" not in result.output


def test_weights_refuses_an_encoder(tiny_bert_dir):
    result = run("heads", "--transformer", str(tiny_bert_dir), "--weights", code=2)
    assert "decoder" in result.output and len(result.output.strip().splitlines()) <= 3


def test_random_longer_than_the_model_is_refused(llama_dir):
    result = run("heads", "--transformer", str(llama_dir), "--random", "40", code=2)  # 64 positions
    assert "exceed the model's 64 positions" in result.output


def test_k_in_role_finds_the_induction_head(head_dir):
    doc = json.loads(run("heads", "--transformer", str(head_dir), "--weights", "--role", "k_in", "--json").stdout)
    assert doc["role"] == "k_in" and all(e["k_in"] is None for e in doc["heads"] if e["layer"] == 0)
    best = max((e for e in doc["heads"] if e["layer"]), key=lambda e: e["k_in"])
    comp = np.asarray(doc["composition"]["K"])
    assert (best["layer"], best["head"]) == (1, 0)
    assert abs(best["k_in"] - comp[:, :, 1, 0].max()) <= 5e-7  # fixed: --json writes the composition to 6 decimals
    text = run("heads", "--transformer", str(head_dir), "--weights", "--role", "k_in").output
    assert "largest K-composition" in text and f"{best['k_in']:.2f}" in text
