"""``attn heads --transformer`` on a Llama decoder whose heads were set by hand (an attention sink,
a previous-token head, an induction head fed by it, a duplicate-token head; four random heads):
tests/_llama_head_fixtures.py says how each is built around RoPE. The labels must name exactly
those heads, on the NumPy path and on transformers' own attention, and every score is checked
against a plain recount from transformers' ``output_attentions``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from _tolerance import f32_close, f32_size
from conftest import needed

torch = needed("torch")
transformers = needed("transformers")

from typer.testing import CliRunner  # noqa: E402

from attncli.cli.main import app  # noqa: E402

DESIGNED = {(0, 0): "first_token", (0, 1): "previous_token", (1, 0): "induction", (1, 1): "duplicate_token"}
RANDOM = [(0, 2), (0, 3), (1, 2), (1, 3)]
_reports: dict = {}


@pytest.fixture(scope="module")
def head_llama_dir(tmp_path_factory):
    from _llama_head_fixtures import build_head_llama

    return build_head_llama(tmp_path_factory.mktemp("head-llama") / "llama")


def report(path, backend: str, exclude_first: bool = False) -> dict:
    key = (str(path), backend, exclude_first)
    if key not in _reports:
        import attncli.cli.common as cli_app

        cli_app._consoles.clear()
        args = ["heads", "--transformer", str(path), "--file", str(path / "sentences.txt"), "--backend", backend,
                "--json"] + (["--exclude-first"] if exclude_first else [])
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.stderr
        _reports[key] = json.loads(result.stdout)
    return _reports[key]


def by_head(doc: dict) -> dict:
    return {(h["layer"], h["head"]): h for h in doc["heads"]}


def recount(path) -> dict:
    """The four scores of every head, counted afresh from transformers' eager attention: first and
    previous token over each sentence's words (queries 1.., BOS is the query not scored); duplicate
    and induction over the sentence's ids twice in a row, at the queries that have such a key."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                              dtype=torch.float32).eval()
    sums = {k: np.zeros((2, 4)) for k in ("first_token", "previous_token", "duplicate_token", "induction")}
    counts = dict.fromkeys(sums, 0)
    for line in (path / "sentences.txt").read_text().splitlines():
        ids = tok(line)["input_ids"]
        with torch.no_grad():
            plain = np.stack([a[0].numpy() for a in model(torch.tensor([ids]), output_attentions=True).attentions])
            twice = ids * 2
            rep = np.stack([a[0].numpy() for a in model(torch.tensor([twice]), output_attentions=True).attentions])
        for i in range(1, len(ids)):
            sums["first_token"] += plain[:, :, i, 0]
            sums["previous_token"] += plain[:, :, i, i - 1]
            counts["first_token"] += 1
            counts["previous_token"] += 1
        for i in range(len(twice)):
            copies = [j for j in range(i) if twice[j] == twice[i]]
            after = [j for j in range(1, i + 1) if twice[j - 1] == twice[i]]
            for name, keys in (("duplicate_token", copies), ("induction", after)):
                if keys:
                    sums[name] += rep[:, :, i, keys].sum(axis=-1)
                    counts[name] += 1
    return {k: sums[k] / counts[k] for k in sums}


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_heads_set_by_hand_are_named_and_no_random_head_takes_their_classes(head_llama_dir, backend):
    doc = report(head_llama_dir, backend)
    heads = by_head(doc)
    assert {k: heads[k]["label"] for k in DESIGNED} == DESIGNED
    for key, pattern in DESIGNED.items():
        assert heads[key][pattern] > 0.95, (key, pattern, heads[key][pattern])
    for key in RANDOM:
        # a random head may lean on BOS (its embedding is unlike any word's) but never as the sink does,
        # and never looks one token back, at a copy, or after a copy
        assert heads[key]["label"] not in ("previous_token", "duplicate_token", "induction"), (key, heads[key])
        assert heads[key]["first_token"] < 0.9
        for pattern in ("previous_token", "duplicate_token", "induction"):
            assert heads[key][pattern] < doc["thresholds"]["pattern"], (key, pattern, heads[key][pattern])
    # each designed head is strong at its own pattern only
    for key, pattern in DESIGNED.items():
        for other in set(DESIGNED.values()) - {pattern}:
            assert heads[key][other] < 0.3, (key, other, heads[key][other])


def test_the_scores_are_transformers_own_attention_counted_again(head_llama_dir):
    expected = recount(head_llama_dir)
    for backend in ("numpy", "torch"):
        heads = by_head(report(head_llama_dir, backend))
        for name, table in expected.items():
            got = np.array([[heads[(layer, h)][name] for h in range(4)] for layer in range(2)])
            # means of float32 attention weights (attn's pass against transformers'), through both layers
            f32_close(got, table, *f32_size(head_llama_dir), what=f"{backend} {name}")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_without_the_first_token_the_sink_shows_what_else_it_does(head_llama_dir, backend):
    doc = report(head_llama_dir, backend, exclude_first=True)
    heads = by_head(doc)
    assert doc["exclude_first"] is True and all(h["first_token"] is None for h in doc["heads"])
    sink = heads[(0, 0)]
    assert sink["label"] == "self" and sink["self"] > 0.95  # the ~3e-4 of its weight left off BOS is on itself
    assert heads[(0, 1)]["label"] == "previous_token"
    assert heads[(1, 0)]["label"] == "induction" and heads[(1, 1)]["label"] == "duplicate_token"


def test_query_heads_sharing_a_key_value_head_are_said(head_llama_dir):
    doc = report(head_llama_dir, "numpy")
    assert doc["heads_per_layer"] == 4 and doc["kv_heads"] == 2
    assert [(h["layer"], h["head"], h["kv_head"]) for h in doc["heads"]] == [
        (layer, h, h // 2) for layer in range(2) for h in range(4)]
    result = CliRunner().invoke(app, ["heads", "--transformer", str(head_llama_dir), "--file",
                                      str(head_llama_dir / "sentences.txt")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert "4 query heads share 2" in result.stderr
