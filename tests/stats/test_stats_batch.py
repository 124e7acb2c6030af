"""``attn stats`` reads texts in padded batches on the NumPy path: texts of similar length run
together (at most --batch-size a pass), and the statistics equal one pass per text; the float32
pass (the default) stays within its stated tolerance of the float64 one, and shards of the two
never merge. The exact comparisons with a plain per-text count are in test_stats.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _stats_helpers import assert_docs_equal, cli, corpus_lines, said, write_corpus
from _tolerance import f32_close
from _transformer_fixtures import SIZES
from conftest import needed

needed("tokenizers")
needed("safetensors")
DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])  # the tiny models' rounding


@pytest.mark.parametrize("kind", ["tiny_bert_dir", "tiny_gpt2_dir"])
def test_batches_equal_one_text_at_a_time(request, kind, tmp_path):
    path = request.getfixturevalue(kind)
    corpus = write_corpus(tmp_path / "c.txt", 21, seed=5)
    alone = cli(["stats", corpus, "--transformer", path, "--precision", "float64", "--batch-size", 1, "--json"])
    for size in (4, 256):
        batched = cli(["stats", corpus, "--transformer", path, "--precision", "float64", "--batch-size", size, "--json"])
        assert_docs_equal(batched, alone, tol=1e-12)


def test_texts_of_similar_length_run_together(tiny_gpt2_dir):
    """Sorted by length, at most batch_size a pass; every text's patterns come back under its own index."""
    from attncli.stats.chunk_work import each_pattern
    from attncli.hf import load

    model = load(str(tiny_gpt2_dir), backend="numpy")
    encs = [model.encode(t) for t in corpus_lines(11, seed=2)]
    passes = []
    real = model.trace_batch

    def spy(batch, keep, **kw):
        passes.append([len(e.ids) for e in batch])
        return real(batch, keep, **kw)

    model.trace_batch = spy
    got = dict(each_pattern(model, encs, batch_size=3, precision="float64"))
    assert sorted(got) == list(range(11)) and all(len(p) <= 3 for p in passes) and len(passes) == 4
    flat = [n for p in passes for n in p]
    assert flat == sorted(flat)  # batches of neighbours in length: little padding
    for i, enc in enumerate(encs):
        np.testing.assert_allclose(got[i], model.attentions(enc), rtol=0, atol=1e-12)


def test_float32_is_the_default_and_within_its_tolerance_of_float64(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 16, seed=1)
    fast = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--json"])
    exact = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--precision", "float64", "--json"])
    assert fast["settings"]["precision"] == "float32" and exact["settings"]["precision"] == "float64"
    gap = 0.0
    for name, stat in exact["stats"].items():
        assert fast["stats"][name]["count"] == stat["count"], name
        # float32 rounding of the tiny GPT-2's pass (tests/_tolerance.py), at the statistic's own size
        f32_close(fast["stats"][name]["mean"], stat["mean"], depth=DEPTH, length=WIDTH, what=name)
        gap = max(gap, np.abs(np.asarray(fast["stats"][name]["mean"]) - np.asarray(stat["mean"])).max())
    assert gap > 0  # another pass, not the float64 one under another name
    for name, heads in exact["top"].items():  # the top scores (near ties may swap examples)
        for x, y in zip(heads, fast["top"][name]):
            f32_close([e["score"] for e in y["examples"]], [e["score"] for e in x["examples"]], depth=DEPTH,
                      length=WIDTH, what=f"{name} top scores")


def test_shards_of_another_precision_do_not_merge(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 6)
    a, b = tmp_path / "a", tmp_path / "b"
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", a])
    cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", b, "--precision", "float64"])
    assert json.loads(next(b.iterdir()).read_text())["settings"]["precision"] == "float64"
    r = cli(["stats", "merge", a, b, "--json"], code=2)
    assert said(r, "other settings")
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", a, "--precision", "float64"], code=2)
    assert said(r, "holds shards of another run")


def test_bad_batch_size_and_precision_are_exit_2(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 3)
    for args, message in ((["--batch-size", 0], "--batch-size must be between 1 and 256"),
                          (["--batch-size", 257], "--batch-size must be between 1 and 256"),
                          (["--precision", "float16"], "--precision must be float32 or float64")):
        r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, *args], code=2)
        assert said(r, message), r.stderr


def test_precision_with_transformers_is_refused(tiny_gpt2_dir, tmp_path):
    needed("torch")
    needed("transformers")
    corpus = write_corpus(tmp_path / "c.txt", 3)
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--backend", "torch", "--precision", "float64"], code=2)
    assert said(r, "--precision chooses attn's NumPy pass")
