"""Hostile stats shards: whatever a shard file holds, ``attn stats merge`` names it and fails (exit 1)
unless asked to skip it (--skip-damaged: named, skipped and counted), and a resumed run computes its
texts again (docs/stats.md), never an internal error. The damage:
numbers out of a double's range (1e999), NaN and Infinity, JSON nested 100,000 deep, and a valid
checksum over fields that lie (layers that are not its sums', or another shape of the same model,
counts that are text, a digest that is a list, a huge top_k)."""

from __future__ import annotations

import json

import pytest

from _stats_helpers import assert_docs_equal, cli, said, write_corpus
from conftest import needed

needed("tokenizers")
needed("safetensors")

DAMAGED = "shard-000000000005-000000000010.json"


def _resealed(change):
    """A damage that keeps the checksum valid: ``change(doc)`` then the checksum computed again."""
    def damage(text: str) -> str:
        from attncli.stats.shards import checksum as _checksum

        doc = json.loads(text)
        change(doc)
        doc["checksum"] = _checksum(doc)
        return json.dumps(doc)
    return damage


def _set(path: str, value):
    def change(doc):
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        node[last] = value
    return change


def _one_layer(doc):  # a shard self-consistent for a model of one layer fewer: the same fingerprint
    doc["model"]["layers"] -= 1
    doc["sums"] = {k: v[:-1] for k, v in doc["sums"].items()}
    doc["top"] = {k: v[:-1] for k, v in doc["top"].items()}


DAMAGES = {
    "1e999": lambda t: t.replace('"sums": {"sink": [[', '"sums": {"sink": [[1e999, ', 1),
    "NaN": lambda t: t.replace('"sums": {"sink": [[', '"sums": {"sink": [[NaN, ', 1),
    "-Infinity": lambda t: t.replace('"scored": ', '"scored": -Infinity, "x": ', 1),
    "nested 100,000 deep": lambda t: '{"format": "attn-stats-shard", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "layers not its sums'": _resealed(_set("model.layers", 3)),
    "layers 10**12": _resealed(_set("model.layers", 10**12)),
    "another shape of the model": _resealed(_one_layer),
    "tokens as text": _resealed(_set("tokens", "5")),
    "digest a list": _resealed(_set("texts_sha256", ["a"])),
    "top_k 10**9": _resealed(_set("settings.top_k", 10**9)),
    "a huge text index": _resealed(lambda d: d["top"]["sink"][0][0][0].__setitem__(1, 10**30)),
    "model a list": _resealed(_set("model", [1, 2])),
}


@pytest.fixture(scope="module")
def shards(tiny_gpt2_dir, tmp_path_factory):
    """A corpus of 10 texts in two shards, and the merge of the first one alone."""
    tmp = tmp_path_factory.mktemp("shards")
    corpus = write_corpus(tmp / "c.txt", 10)
    out = tmp / "out"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 5])
    first = tmp / "first"
    first.mkdir()
    (first / "shard-000000000000-000000000005.json").write_bytes((out / "shard-000000000000-000000000005.json").read_bytes())
    return corpus, out, cli(["stats", "merge", first, "--json"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_shard_fails_a_merge_unless_skipped_and_is_computed_again_by_a_resume(damage, shards, tiny_gpt2_dir,
                                                                                         tmp_path):
    corpus, good, first_only = shards
    out = tmp_path / "out"
    out.mkdir()
    for p in good.iterdir():
        (out / p.name).write_bytes(p.read_bytes())
    (out / DAMAGED).write_text(DAMAGES[damage]((good / DAMAGED).read_text()))
    r = cli(["stats", "merge", out], code=1)  # the merge would cover fewer texts than the shards hold
    assert said(r, DAMAGED) and said(r, "damaged") and said(r, "--skip-damaged") and "internal error" not in r.stderr
    assert r.stdout == ""
    r = cli(["stats", "merge", out, "--skip-damaged"])
    assert said(r, DAMAGED) and said(r, "skipping") and "internal error" not in r.stderr
    merged = cli(["stats", "merge", out, "--json", "--skip-damaged"])
    assert_docs_equal(merged, first_only)
    assert merged["damaged_skipped"] == 1 and first_only["damaged_skipped"] == 0 and DAMAGED in merged["skipped"][0]
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", out, "--shard-texts", 5, "--json"])
    assert doc["computed"] == 1 and doc["texts"] == 10
