"""``attn lookup --encoder``: sentence-encoder similarity (mean pooling, then cosine).

The embeddings are checked against mean pooling computed from transformers' own model (and
against sentence-transformers' where it is installed); the CLI keeps its table, JSON and
--explain; a model that is not an encoder, or none at all, is a one-line error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from _lookup_fixtures import transformers_poolings
from _tolerance import f32_close, f32_size
from attncli.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
TEXTS = ["colour", "top speed", "Phone-Number", "The price of a car, in US dollars (before taxes).", "café naïve 日本"]


def transformers_mean_pooling(model_dir: Path, texts: list[str]) -> np.ndarray:
    """(n, d) the reference: transformers' BertModel (eager) + the mask-weighted mean of the last
    hidden state, as sentence-transformers' Pooling module computes it."""
    torch = needed("torch")
    transformers = needed("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # (n, T, d)
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (n, T, 1)
    return ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).double().numpy()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from attncli.lookup.encoder import load_encoder

    return load_encoder(str(minilm_dir))


def test_embeddings_equal_transformers_mean_pooling(minilm, minilm_dir):
    from attncli.lookup.encoder import EncoderIndex, unit

    expected = transformers_mean_pooling(minilm_dir, TEXTS)
    # float32 on both sides: rounding at the model's depth and widest reduction, scaled by the values'
    # own largest magnitude (a unit vector's elements, not 1: tests/_tolerance.py)
    size = f32_size(minilm_dir)
    f32_close(minilm.embed(TEXTS), expected, *size, what="embeddings")
    index = EncoderIndex(minilm, TEXTS, ngram_weight=0.0)
    f32_close(index.key_matrix, unit(expected), *size, what="keys")  # 1.2e-7 measured
    _, q = index.query_vector("colour")
    f32_close(q, unit(expected[:1])[0], *size, what="query")


def test_embeddings_equal_sentence_transformers(minilm, minilm_dir):
    st = needed("sentence_transformers")
    reference = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(TEXTS, convert_to_numpy=True)
    from attncli.lookup.encoder import unit

    # all-MiniLM-L6-v2's pipeline ends with Normalize: compare unit vectors
    f32_close(unit(minilm.embed(TEXTS)), unit(reference), *f32_size(minilm_dir))  # 2e-7 measured


def test_similarity_is_cosine_blended_with_ngrams(minilm, minilm_dir):
    from attncli.lookup.encoder import EncoderIndex, unit
    from attncli.lookup.keyindex import KeyIndex
    from attncli.vectors.model import load_vectors

    keys = ["brand", "model", "color"]
    index = EncoderIndex(minilm, keys, ngram_weight=0.6)
    tokens, cosine, ngram, similarity = index.score("colour")
    # the index embeds its keys in one call and each query alone: the same two calls here, the same numbers
    keys_e, query_e = unit(minilm.embed(keys)), unit(minilm.embed(["colour"]))[0]
    np.testing.assert_allclose(cosine, np.clip(keys_e @ query_e, -1, 1), rtol=0, atol=1e-12)
    # the four texts in one call agree to float32 rounding, not to the last bit: embed runs in float32 and
    # a text's numbers depend on its batch (BLAS takes another kernel for a product of under 4 rows, a
    # padded text another length); 7.8e-8 measured, and 4e-8 before the batch's one flat product with a
    # two-word key (a batch of equal lengths, each its own product, had hidden it)
    e = unit(minilm.embed(keys + ["colour"]))
    f32_close(cosine, e[:3] @ e[3], *f32_size(minilm_dir), scale=1.0)  # cosines of unit vectors: terms of size 1
    np.testing.assert_allclose(ngram, KeyIndex(load_vectors(), keys).ngram_scores(["colour"]))
    np.testing.assert_allclose(similarity, 0.4 * cosine + 0.6 * ngram)
    assert keys[int(np.argmax(similarity))] == "color"


def test_cli_json_table_and_explain(minilm_dir):
    result = runner.invoke(app, ["lookup", "colour", "--encoder", str(minilm_dir), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["best"]["value"] == "black" and doc["model"] == str(minilm_dir)
    assert abs(sum(e["weight"] for e in doc["entries"]) - 1) < 1e-9
    table = runner.invoke(app, ["lookup", "speed", "--encoder", str(minilm_dir), "--explain",
                                "--dict", str(REPO / "data" / "car_specs.json")])
    assert table.exit_code == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "answer: 260" in text and "soft value" in text
    assert f"encoder '{minilm_dir}'" in text and "pooling: mean" in text and "'[CLS]', 'speed', '[SEP]'" in text
    batch = runner.invoke(app, ["lookup", "--queries", "-", "--encoder", str(minilm_dir), "--json"], input="colour\nhue\nmaker\n")
    assert batch.exit_code == 0, batch.stderr
    assert [json.loads(line)["best"]["key"] for line in batch.stdout.splitlines()] == ["color", "color", "brand"]


@pytest.mark.parametrize("name, measured", [("lookup_eval.json", 96), ("lookup_eval_heldout.json", 101)])
def test_eval_set_accuracy(minilm, name, measured):
    """The figures docs/lookup.md reports for the encoder with the default n-gram weight: 96 of the
    104 cases of the project's set, 101 of the 111 of the held-out one."""
    from attncli.lookup.encoder import EncoderIndex

    spec = json.loads((REPO / "tests" / name).read_text(encoding="utf-8"))
    indexes = {name: EncoderIndex(minilm, keys) for name, keys in spec["dictionaries"].items()}
    hits = sum(
        indexes[c["dict"]].keys[int(np.argmax(indexes[c["dict"]].score(c["query"])[3]))] == c["expected"]
        for c in spec["cases"]
    )
    # exactly the reported figure (issue 24: a floor set at the measurement checked nothing more than
    # this, and let docs/lookup.md go stale when the figure moved): a change updates the doc
    assert hits == measured, f"{hits} of {len(spec['cases'])}: update docs/lookup.md's figure if this is right"


def test_not_an_encoder_or_missing(tmp_path, tiny_gpt2_dir, minilm_dir):
    cases = [
        (["--encoder", str(tmp_path / "nowhere")], "nowhere"),
        (["--encoder", str(tmp_path)], "config.json"),
        (["--encoder", str(tiny_gpt2_dir)], "is a decoder (gpt2), not an encoder"),
        (["--encoder", str(minilm_dir), "--model", "default"], "give one"),
        (["--encoder", str(minilm_dir), "--ngram-weight", "2"], "--ngram-weight must be between 0 and 1"),
    ]
    for args, phrase in cases:
        result = runner.invoke(app, ["lookup", "colour", *args])
        message = " ".join(result.stderr.split())
        # compared without whitespace: rich wraps a long temporary path wherever the width ends
        found = "".join(phrase.split()) in "".join(message.split())
        assert result.exit_code in (1, 2) and found, (args, result.exit_code, message)
        # one message, however rich wraps it (the path's length decides how many lines it takes)
        assert "Traceback" not in result.output and result.stderr.count("error:") == 1


def test_a_plain_bert_is_accepted_with_a_warning(tiny_bert_dir):
    result = runner.invoke(app, ["lookup", "colour", "--encoder", str(tiny_bert_dir), "--json"])
    assert result.exit_code == 0, result.stderr
    assert "no sentence-transformers files" in " ".join(result.stderr.split())


def test_encoder_path_imports_no_torch(minilm_dir, attn_home):
    """The numpy backend runs MiniLM: neither torch nor transformers is imported; and a lookup
    without --encoder loads none of the transformer wing."""
    code = (
        "import sys\n"
        "from attncli.cli.main import main\n"
        "sys.argv = ['attn', 'lookup', 'colour', '--json'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'gensim', 'tokenizers', 'attncli.hf') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    env = dict(os.environ, ATTN_HOME=str(attn_home))
    with_encoder = subprocess.run([sys.executable, "-c", code, "--encoder", str(minilm_dir)],
                                  capture_output=True, text=True, env=env, timeout=120)
    assert with_encoder.returncode == 0, with_encoder.stderr
    assert json.loads(with_encoder.stdout)["best"]["value"] == "black"
    assert "HEAVY ['attncli.hf', 'tokenizers']" in with_encoder.stderr
    without = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert without.returncode == 0, without.stderr
    assert "HEAVY []" in without.stderr


def with_pooling(tmp_path: Path, model_dir: Path, flags: dict) -> Path:
    """A copy of ``model_dir`` with sentence-transformers' modules.json and a Pooling config."""
    import shutil

    out = tmp_path / "st-model"
    shutil.copytree(model_dir, out)
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (out / "1_Pooling").mkdir()
    modes = ["cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
    d = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    config = {"word_embedding_dimension": d} | {f"pooling_mode_{m}": m in flags for m in modes}
    (out / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize("flags, modes", [
    (["cls_token"], ("cls",)),
    (["max_tokens"], ("max",)),
    (["mean_sqrt_len_tokens"], ("mean_sqrt_len",)),
    (["mean_tokens", "cls_token"], ("cls", "mean")),  # concatenated in sentence-transformers' order
])
def test_the_models_own_pooling_is_used(tmp_path, tiny_bert_dir, flags, modes):
    from attncli.lookup.encoder import EncoderIndex, load_encoder, unit

    model_dir = with_pooling(tmp_path, tiny_bert_dir, flags)
    texts = ["colour", "top speed", "The price of a car, in US dollars (before taxes)."]
    reference = transformers_poolings(model_dir, texts)
    expected = np.concatenate([reference[m] for m in modes], axis=1)  # (n, d * P)
    index = EncoderIndex(load_encoder(str(model_dir)), texts, ngram_weight=0.0)
    assert index.pooling == modes
    f32_close(index.key_matrix, unit(expected), *f32_size(model_dir))
    _, q = index.query_vector(texts[1])
    f32_close(q, unit(expected[1:2])[0], *f32_size(model_dir))
    try:  # and sentence-transformers' own Pooling module, where it is installed
        from sentence_transformers import SentenceTransformer
    except ImportError:
        pass
    else:
        theirs = SentenceTransformer(str(model_dir), device="cpu").encode(texts, convert_to_numpy=True)
        f32_close(index.key_matrix, unit(theirs.astype(np.float64)), *f32_size(model_dir))
    explained = runner.invoke(app, ["lookup", "colour", "--encoder", str(model_dir), "--explain"])
    assert explained.exit_code == 0, explained.stderr
    assert f"(pooling: {'+'.join(modes)})" in " ".join(explained.stdout.split())


def test_a_pooling_attn_lacks_falls_back_to_mean_with_a_warning(tmp_path, tiny_bert_dir):
    from attncli.lookup.encoder import EncoderIndex, load_encoder

    model_dir = with_pooling(tmp_path, tiny_bert_dir, ["weightedmean_tokens"])
    result = runner.invoke(app, ["lookup", "colour", "--encoder", str(model_dir), "--json"])
    assert result.exit_code == 0, result.stderr
    assert "weightedmean pooling, which attn does not have" in " ".join(result.stderr.split())
    assert EncoderIndex(load_encoder(str(model_dir)), ["color"]).pooling == ("mean",)


def test_pool_refuses_an_unknown_mode():
    from attncli.errors import BadInput
    from attncli.hf.backends.pretrained_base import pool

    hidden, mask = np.ones((1, 2, 3)), np.array([[True, False]])
    assert pool(hidden, mask, "max").shape == (1, 3)  # one mode given as a string is one mode
    with pytest.raises(BadInput, match="pooling must be one or more of"):
        pool(hidden, mask, ("median",))
