"""Every analysis command on the real models (issue 49 §2): SmolLM2-135M-Instruct (Q4_1) and, once
attn runs Gemma 3, Gemma-3-270M (Q4_K_M), got as a user gets them and named by their short names
(tests/_real_models.py). Each is checked against transformers' own pass on the same GGUF
(``from_pretrained(dir, gguf_file=...)``, eager attention) where one exists (token ids, attention,
logits, the logit lens, the first greedy token, the DLA logit), at float32 rounding sized by the
dequantized weights; elsewhere for invariants (rows sum to 1, JSON parses, exit 0).

Budget: one load of each model per module, the transformers reference computed once (one pass of
an 11-token text), every command run in-process on the loaded model (the loader hands it back by
name); ``python -m pytest -q -n 0 tests/real --durations=15`` measures it (CONTRIBUTING.md)."""

from __future__ import annotations

import json
import re
from functools import cached_property

import numpy as np
import pytest
from typer.testing import CliRunner

from _real_models import REAL, header_parsed_once, real_file
from _tolerance import f32_close, f32_size

from attncli.cli.main import app

CLEAN = "Mary and John went out. John gave a book to"  # 11 tokens in SmolLM2's vocabulary
CORRUPT = "Mary and John went out. Mary gave a book to"  # as many: the name swapped
TARGET, CONTRAST = " Mary", " John"
SHOWS = ["weights", "scores", "norms", "alti", "globenc", "value-zeroing"]
CONTRIBUTIONS = ("alti", "globenc", "value-zeroing")  # rows summing to 1
SITES = ["resid", "attn", "mlp", "head", "key", "query"]
# the first test of a model pays for transformers' reference (Gemma 3: its 262,144-token tokenizer,
# then the whole file dequantized): minutes of wall time on a busy machine, under a minute idle
pytestmark = pytest.mark.timeout(900)


class Real:
    """One real model: its short name, its file, attn's model loaded once and transformers' pass."""

    def __init__(self, name: str, path):
        from attncli.hf.loader import load

        self.name, self.path = name, path
        self.model = load(str(path))

    @cached_property
    def reference(self):
        """transformers' tokenizer and eager model on the same file, and its pass over CLEAN."""
        import torch
        import transformers

        folder, file = str(self.path.parent), self.path.name
        with header_parsed_once():  # three loads of the file's header, one parse
            tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)
            ref = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, attn_implementation="eager")
        ids = tok(CLEAN, return_tensors="pt").input_ids
        with torch.no_grad():
            out = ref(ids, output_attentions=True, output_hidden_states=True)
            hidden = out.hidden_states  # L + 1, the last already through the final norm
            lens = [ref.lm_head(ref.model.norm(h)) for h in hidden[:-1]] + [ref.lm_head(hidden[-1])]
        return {"tok": tok, "ids": ids[0].tolist(), "size": f32_size(ref),
                "attentions": np.stack([a[0].numpy() for a in out.attentions]),  # (L, h, T, T)
                "logits": out.logits[0].double().numpy(),  # (T, V)
                "lens": np.stack([x[0].double().numpy() for x in lens])}  # (L + 1, T, V) logits


@pytest.fixture(scope="module", params=REAL)
def real(request, tmp_path_factory) -> Real:
    return Real(request.param, real_file(request.param, tmp_path_factory.mktemp("real-home")))


@pytest.fixture
def cli(real, monkeypatch):
    """``attn ARGS... --transformer NAME`` in-process, the loaded model handed back by the loader
    for the short name (no second load); the JSON document it prints."""
    from attncli.hf import loader

    inner = loader._load

    def cached(name, *args, **kwargs):
        return real.model if name in (real.name, str(real.path)) else inner(name, *args, **kwargs)

    monkeypatch.setattr(loader, "_load", cached)

    def run(*args: str, json_out: bool = True):
        result = CliRunner().invoke(app, [*args, "--transformer", real.name] + (["--json"] if json_out else []))
        assert result.exit_code == 0, result.output[-2000:]
        return json.loads(result.stdout) if json_out else result

    return run


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_token_ids_equal_transformers(real):
    tok = real.reference["tok"]
    for text in (CLEAN, CORRUPT, "  Hello\n\nworld 12345 <repo_name>x<start_of_turn>", "ünïcødé 日本語!"):
        assert real.model.encode(text).ids == tok(text).input_ids, text
    assert len(real.model.encode(CLEAN).ids) <= 12


def test_attention_and_logits_equal_transformers(real):
    ref = real.reference
    logits, _ = real.model.logits_and_attentions(ref["ids"])
    f32_close(real.model.attentions(real.model.encode(CLEAN)), ref["attentions"], *ref["size"], per_element=True,
              what="attention")
    f32_close(logits, ref["logits"], *ref["size"], what="logits")


def test_matrix_every_show(real, cli):
    ref = real.reference
    for show in SHOWS:
        doc = cli("matrix", CLEAN, "--show", show)
        weights = np.array(doc["weights"], dtype=float)  # (T, T); scores: NaN above the diagonal (masked)
        assert np.isfinite(weights[np.tril_indices(len(weights))]).all(), show
        if show == "weights":
            f32_close(np.array(doc["head_weights"]), ref["attentions"][-1], *ref["size"], per_element=True,
                      printed=5e-7, what="the last layer's heads")
        elif show in CONTRIBUTIONS:
            np.testing.assert_allclose(weights.sum(-1), 1, atol=1e-5)  # fixed: rows of 6-decimal numbers, T of them
        elif show == "norms":
            assert (weights >= 0).all()


def test_lens_equals_transformers_hidden_states(real, cli):
    ref = real.reference
    doc = cli("lens", CLEAN, "-k", "3")
    probs = softmax(ref["lens"])  # (L + 1, T, V)
    for l, row in enumerate(doc["lens"]):
        for t, cell in enumerate(row):
            f32_close([c["prob"] for c in cell], np.sort(probs[l, t])[::-1][:3], *ref["size"], per_element=True,
                      printed=5e-7, what=f"lens layer {l} position {t}")


IOI = "When Mary and John went to the store, John gave a drink to"  # 14 tokens in SmolLM2's vocabulary


def test_lens_reads_at_80_120_and_200_columns(real, cli):
    """The lens of a 30-layer (18: Gemma 3) model over 14 tokens, drawn at three widths: every line
    within the width, each cell a token a reader can read (no cell only an ellipsis), as many layers
    as fit and the rule stated; at 120 columns each position's prediction after the last layer is
    there whole (the IOI answer, " Mary", at the last position)."""
    from rich.console import Console

    from attncli.io.textio import token_label
    from attncli.views.lens import MIN_TOKEN, lens_renderables

    doc = cli("lens", IOI)
    T, L = len(doc["tokens"]), doc["layers"]
    for columns, at_least in ((80, 5), (120, 7), (200, 10)):
        console = Console(width=columns, record=True, color_system=None)
        for part in lens_renderables(doc, columns):
            console.print(part)
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= columns, columns
        header = next(line.split() for line in lines if line.strip().startswith("position"))
        shown = [int(name[1:]) for name in header[1:]]
        assert shown[0] == 0 and shown[-1] == L and len(shown) >= min(at_least, L + 1), (columns, header)
        assert len(shown) == L + 1 or f"layers L0, L{shown[1]}" in " ".join(lines), columns  # the rule stated
        rows = [next(line for line in lines if line.startswith(f" {t} ")) for t in range(T)]
        for line in rows:
            words = line.split()
            assert not any(w.startswith("…") for w in words), (columns, line)  # no cell cut to nothing
            assert len(re.findall(r"\b[01]\.\d\d\b", line)) == len(shown), (columns, line)  # each probability whole
        if columns == 120:
            for t, line in enumerate(rows):
                last = token_label(doc["lens"][L][t][0]["text"])
                if len(last) <= MIN_TOKEN + 1:
                    cell = rf"\s{re.escape(last)} +{doc['lens'][L][t][0]['prob']:.2f}\s*$"  # the last column
                    assert re.search(cell, line), (t, last, line)
            assert doc["lens"][L][T - 1][0]["text"] == " Mary" and "␣Mary" in rows[-1]


def test_generate_takes_transformers_greedy_token(real, cli):
    doc = cli("generate", CLEAN, "-n", "2", "--greedy", "--ignore-eos")
    assert doc["steps"][0]["id"] == int(np.argmax(real.reference["logits"][-1]))
    f32_close(doc["steps"][0]["prob"], softmax(real.reference["logits"][-1]).max(), *real.reference["size"],
              per_element=True, printed=5e-7, what="the first token's probability")


def test_dla_logit_is_transformers_logit(real, cli):
    doc = cli("dla", CLEAN, "--target", TARGET)
    want = real.reference["logits"][-1][doc["target"]["id"]]
    f32_close(doc["logit"], want, *real.reference["size"], scale=np.abs(real.reference["logits"][-1]).max(),
              printed=5e-9, what="the target's logit")
    assert abs(doc["sum"] - doc["logit"]) <= 1e-3 * max(1.0, abs(doc["logit"]))  # fixed: the parts add up


def test_compare_heads_qk_and_exports(real, cli, tmp_path):
    doc = cli("compare", CLEAN, CORRUPT)
    assert doc
    lines = tmp_path / "texts.txt"
    lines.write_text(CLEAN + "\n" + CORRUPT + "\n")
    heads = cli("heads", "--file", str(lines))
    assert len(heads["heads"]) == real.model.layers * real.model.heads
    qk = cli("qk", CLEAN, "--layer", "1", "--head", "0")
    assert qk
    svg, html, png = tmp_path / "m.svg", tmp_path / "m.html", tmp_path / "m.png"
    cli("matrix", CLEAN, "--svg", str(svg), "--html", str(html), "--png", str(png), json_out=False)
    assert svg.read_text().startswith("<svg") and "<html" in html.read_text()[:500].lower()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_attribute_at_every_site(real, cli):
    for site in SITES:
        doc = cli("attribute", CLEAN, CORRUPT, "--target", TARGET, "--contrast", CONTRAST, "--site", site)
        assert doc, site


@pytest.mark.slow  # a grid of every head / position: 7-23 s of CPU each on SmolLM2 Q4_1 today
def test_ablate_patch_and_circuit(real, cli, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"clean": CLEAN, "corrupt": CORRUPT, "target": TARGET, "contrast": CONTRAST}) + "\n"
                     + json.dumps({"clean": "Tom and Ann sat down. Tom handed a cup to", "target": " Ann",
                                   "corrupt": "Tom and Ann sat down. Ann handed a cup to", "contrast": " Tom"}) + "\n"
                     + json.dumps({"clean": "Kate and Paul met up. Paul passed a note to", "target": " Kate",
                                   "corrupt": "Kate and Paul met up. Kate passed a note to", "contrast": " Paul"}) + "\n")
    metric = ["--target", TARGET, "--contrast", CONTRAST]
    assert cli("ablate", CLEAN, *metric)
    assert cli("patch", CLEAN, CORRUPT, *metric)
    # EAP on one pair here; EAP-IG in the tour (docs/tour.md, SmolLM2) and over the pairs below on
    # Gemma 3, whose heads' outputs are normed before the residual add (hf/methods/edges.py)
    doc = cli("circuit", CLEAN, CORRUPT, *metric, "--steps", "1")
    assert doc["faithfulness"] >= doc["faithfulness_asked"] and 0 < len(doc["edges"]) < doc["edges_total"]
    assert doc["clean"] > doc["corrupt"]  # the name the text points at is the likelier one
    steps = "2" if real.model.arch.parts.extra_norms else "1"
    doc = cli("circuit", "--pairs", str(pairs), "--steps", steps)
    assert doc["faithfulness"] >= doc["faithfulness_asked"] and doc["pairs"] == 3, doc["faithfulness"]


def test_stats_over_a_tiny_corpus(real, cli, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CLEAN + "\n" + CORRUPT + "\n")
    doc = cli("stats", "run", str(corpus), "--probe-length", "4")
    assert doc


def test_explore_draws_the_same_weights(real, monkeypatch):
    from conftest import needed

    needed("textual")
    from test_explore import drive

    from attncli.explore.state import ExploreState
    from attncli.hf import loader

    monkeypatch.setattr(loader, "_load", lambda name, *a, **k: real.model)

    async def script(app, pilot):
        assert app.message == ""
        weights = np.asarray(app.result.view.weights)
        f32_close(weights, real.reference["attentions"][-1].mean(0), *real.reference["size"], per_element=True)

    drive(script, ExploreState(CLEAN, transformer=real.name), size=(160, 50))
