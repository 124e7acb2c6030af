"""The n-gram weight of ``attn lookup --encoder`` by encoder: all-mpnet-base-v2's own (chosen on
the held-out set by bench/bench_encoder_blend.py, docs/lookup.md), every other encoder's 0.6.

The real all-mpnet-base-v2 is not needed: a tiny random MPNet saved in a directory of that name
is looked up with, and its similarities are checked against transformers' own MPNetModel (mean
pooling, then cosine) blended with the stored weight. On the real model `given name` still goes
to `last name` at every weight (its cosine already prefers it: 0.754 against 0.680 for
`first name`, docs/lookup.md), so no test claims otherwise.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import needed

from _tolerance import f32_close, f32_size
from attncli.lookup import params

KEYS = {"first name": "Ada", "last name": "Lovelace", "date of birth": "1815-12-10", "email": "ada@example.org"}


def test_the_stored_weights():
    # the held-out sweep's choice (docs/lookup.md): a change of it is a change of the docs' figures
    assert params.ENCODER_NGRAM_WEIGHTS == {"all-mpnet-base-v2": 0.15}
    assert params.NGRAM_WEIGHT == 0.6


@pytest.mark.parametrize("given, weight", [
    ("all-mpnet-base-v2", 0.15), ("sentence-transformers/all-mpnet-base-v2", 0.15),
    ("/models/all-mpnet-base-v2/", 0.15), ("All-MPNet-Base-v2", 0.15), ("C:\\models\\all-mpnet-base-v2", 0.15),
    ("all-MiniLM-L6-v2", 0.6), ("all-mpnet-base-v2-finetuned", 0.6), ("/models/all-mpnet-base-v2/other", 0.6),
])
def test_the_weight_is_found_by_the_encoders_name(given, weight):
    assert params.encoder_ngram_weight(given) == weight


@pytest.fixture(scope="module")
def tiny_mpnet_named(tmp_path_factory):
    """A tiny random MPNet in two directories: one named all-mpnet-base-v2, one not."""
    needed("transformers")
    needed("torch")
    from _llama_fixtures import build_mpnet

    base = tmp_path_factory.mktemp("named-mpnet")
    named = build_mpnet(base / "all-mpnet-base-v2")
    other = base / "some-mpnet"
    shutil.copytree(named, other)
    return named, other


def reference_similarity(model_dir, query: str, keys: list[str], lam: float) -> np.ndarray:
    """(N,) (1 - lam) * cosine + lam * ngram, the cosine of transformers' MPNetModel mean pooling."""
    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.lookup.keyindex import KeyTokens
    from attncli.vectors.tokenize import tokenize

    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    batch = tok([query] + keys, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # (n, T, D)
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    e = ((hidden * mask).sum(1) / mask.sum(1)).double().numpy()  # (n, D)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    cosine = e[1:] @ e[0]
    return (1 - lam) * cosine + lam * KeyTokens(keys).ngram_scores(tokenize(query))


def lookup(model_dir, tmp_path, *extra):
    from typer.testing import CliRunner

    from attncli.cli.main import app

    d = tmp_path / "person.json"
    d.write_text(json.dumps(KEYS), encoding="utf-8")
    result = CliRunner().invoke(app, ["lookup", "given name", "--encoder", str(model_dir), "--dict", str(d), *extra])
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("which, extra, lam", [("named", [], 0.15), ("other", [], 0.6),
                                               ("named", ["--ngram-weight", "0.6"], 0.6),
                                               ("other", ["--ngram-weight", "0"], 0.0)])
def test_the_cli_blends_with_the_encoders_weight(tiny_mpnet_named, tmp_path, which, extra, lam):
    model_dir = tiny_mpnet_named[0 if which == "named" else 1]
    doc = json.loads(lookup(model_dir, tmp_path, "--json", *extra))
    keys = list(KEYS)
    got = {e["key"]: e["similarity"] for e in doc["entries"]}
    expected = reference_similarity(model_dir, "given name", keys, lam)
    # attn's float32 pass against transformers' float32 one: cosines of unit vectors, terms of size 1
    f32_close([got[k] for k in keys], expected, *f32_size(model_dir), scale=1.0)
    explain = " ".join(lookup(model_dir, tmp_path, "--explain", *extra).split())
    assert f"similarity = {1 - lam:g} * cosine + {lam:g} * ngram" in explain


def test_the_library_default_is_the_encoders_weight_too(tiny_mpnet_named):
    from attncli.lookup.encoder import EncoderIndex, load_encoder

    named, other = tiny_mpnet_named
    assert EncoderIndex(load_encoder(str(named)), list(KEYS)).ngram_weight == 0.15
    assert EncoderIndex(load_encoder(str(other)), list(KEYS)).ngram_weight == 0.6
    assert EncoderIndex(load_encoder(str(named)), list(KEYS), ngram_weight=0.3).ngram_weight == 0.3
