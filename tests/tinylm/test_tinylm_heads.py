"""Head classification: pattern scores on hand-made attention, and `attn heads` on a stored model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from _attention_fixtures import SENTENCES, make_random_attention
from attncli.tinylm import heads as lm_heads, heads
from attncli.cli.main import app
from attncli.errors import BadInput

runner = CliRunner()


def causal_uniform(T: int) -> np.ndarray:
    w = np.tril(np.ones((T, T)))
    return w / w.sum(-1, keepdims=True)  # (T, T)


def patterns(T: int) -> dict[str, np.ndarray]:
    prev = np.eye(T, k=-1)
    prev[0, 0] = 1.0
    first = np.zeros((T, T))
    first[:, 0] = 1.0
    local = np.zeros((T, T))
    for i in range(T):  # evenly over the 3 keys before i (not i itself, not i-1 alone)
        keys = [j for j in range(i - 3, i) if j >= 0] or [0]
        local[i, keys] = 1.0 / len(keys)
    return {"previous_token": prev, "first_token": first, "self": np.eye(T), "broad": causal_uniform(T), "local": local}


class StubAttention:
    """Duck-typed TrainedAttention whose heads have fixed attention patterns."""

    model = "stub"
    config = {"max_len_trained": 80}

    def __init__(self, per_head: list[str]):
        self.layers, self.heads = 1, len(per_head)
        self.per_head = per_head

    def batch_weights(self, sentences):
        return [[np.stack([patterns(len(s))[p] for p in self.per_head])] for s in sentences]  # (h, T, T)


def test_row_scores_by_hand():
    w = np.array([[[1, 0, 0], [0.25, 0.75, 0], [0.5, 0.25, 0.25]]])  # (1, 3, 3)
    s = heads.row_scores(w, window=1)  # (1, 5, 2): queries 1 and 2
    prev, first, self_, local, entropy = s[0]
    np.testing.assert_allclose(prev, [0.25, 0.25])
    np.testing.assert_allclose(first, [0.25, 0.5])
    np.testing.assert_allclose(self_, [0.75, 0.25])
    np.testing.assert_allclose(local, [1.0, 0.5])  # window 1: keys i-1 and i
    h1 = -(0.25 * np.log(0.25) + 0.75 * np.log(0.75)) / np.log(2)
    h2 = -(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25)) / np.log(3)
    np.testing.assert_allclose(entropy, [h1, h2])


def test_uniform_head_scores_equal_uniform_reference():
    sents = [s.split() for s in SENTENCES]
    report = heads.score_heads(StubAttention(["broad"]), sents, window=3)
    head = report["heads"][0]
    for key in heads.SCORES:
        assert head[key] == pytest.approx(report["uniform"][key], abs=1e-12)
    assert head["label"] == "broad"


def test_each_pattern_gets_its_label():
    names = ["previous_token", "first_token", "self", "local", "broad"]
    sents = [[f"w{i}" for i in range(n)] for n in (20, 25, 30)]  # long enough for 'local' to differ from 'previous'
    report = heads.score_heads(StubAttention(names), sents)
    assert [h["label"] for h in report["heads"]] == names
    by = {h["label"]: h for h in report["heads"]}
    assert by["previous_token"]["previous_token"] == pytest.approx(1.0)
    assert by["first_token"]["first_token"] == pytest.approx(1.0)
    assert by["self"]["self"] == pytest.approx(1.0) and by["self"]["entropy"] == pytest.approx(0.0)
    assert by["local"]["local"] == pytest.approx(1.0) and by["local"]["previous_token"] < heads.PATTERN_MIN
    assert report["queries"] == 19 + 24 + 29


def test_short_sentences_only_is_bad_input():
    from attncli.errors import BadInput

    with pytest.raises(BadInput):
        heads.score_heads(StubAttention(["self"]), [["one"], []])


def test_heads_cli_json_on_stored_model(tmp_path):
    make_random_attention("rand", layers=2, heads=4)
    result = runner.invoke(app, ["heads", "--model", "rand", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["layers"] == 2 and doc["heads_per_layer"] == 4 and len(doc["heads"]) == 8
    assert doc["sentences"] == len(SENTENCES)
    for h in doc["heads"]:
        assert set(h) == {"layer", "head", "previous_token", "first_token", "self", "local", "entropy", "label"}
        assert all(0 <= h[k] <= 1 + 1e-9 for k in heads.SCORES)
        assert h["label"] == heads.label(h, doc["uniform"])
    table = runner.invoke(app, ["heads", "--model", "rand"])
    assert table.exit_code == 0 and "label" in table.stdout and "uniform" in table.stdout
    # --file scores other sentences
    f = tmp_path / "s.txt"
    f.write_text("the cat sat\n\nfruit flies like a banana\n")
    doc = json.loads(runner.invoke(app, ["heads", "--model", "rand", "--json", "--file", str(f)]).stdout)
    assert doc["sentences"] == 2 and doc["queries"] == 2 + 4


def test_heads_does_not_import_torch(attn_home):
    make_random_attention("rand", layers=1, heads=2)
    code = (
        "import sys\n"
        "from attncli.cli.main import app\n"
        "try:\n    app(['heads', '--model', 'rand', '--json'])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "bad = [m for m in ('torch', 'gensim', 'nltk') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    env = dict(os.environ, ATTN_HOME=str(attn_home))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["heads"]


def test_heads_bad_options():
    make_random_attention("rand", layers=1, heads=2)
    for args, message in [(["--window", "0"], "--window"), (["--sentences", "0"], "--sentences"),
                          (["--file", "/nonexistent/x.txt"], "--file '/nonexistent/x.txt' does not exist")]:
        result = runner.invoke(app, ["heads", "--model", "rand", *args])
        assert result.exit_code == 2 and message in result.stderr, result.output


class _Uniform:
    """Duck-typed TrainedAttention: ``layers`` x ``heads`` heads spreading each row evenly over its prefix."""

    model = "stub"

    def __init__(self, layers: int = 1, heads: int = 1, config: dict | None = None):
        self.layers, self.heads = layers, heads
        self.config = {"max_len_trained": 80} if config is None else config

    def batch_weights(self, sentences):
        def one(T):
            w = np.tril(np.ones((T, T)))
            return np.broadcast_to(w / w.sum(-1, keepdims=True), (self.heads, T, T)).astype(np.float32)  # (h, T, T)
        return [[one(len(s)) for _ in range(self.layers)] for s in sentences]


def test_the_uniform_reference_scores_each_query_over_its_own_keys():
    """Lengths 2 and 3: queries i = 1 (of 2 keys), 1 and 2 (of 2 and 3 keys)."""
    u = lm_heads.uniform_scores([2, 3, 1], window=1)  # a 1-token sentence has no query
    mean_inv = (1 / 2 + 1 / 2 + 1 / 3) / 3  # 4/9
    for key in ("previous_token", "first_token", "self"):
        assert u[key] == pytest.approx(mean_inv, abs=1e-15)
    assert u["local"] == pytest.approx((2 / 2 + 2 / 2 + 2 / 3) / 3, abs=1e-15)  # window 1: keys i-1 and i
    assert u["entropy"] == 1.0


def test_score_heads_counts_two_word_sentences_and_cuts_to_the_trained_length():
    report = lm_heads.score_heads(_Uniform(), [["a", "b"], ["c"]])
    assert report["sentences"] == 1 and report["queries"] == 1
    assert report["heads"][0]["previous_token"] == pytest.approx(0.5)  # query 1 over keys 0, 1
    report = lm_heads.score_heads(_Uniform(config={"max_len_trained": 4}), [list("abcdefghij")])
    assert report["queries"] == 3  # cut to 4 tokens
    report = lm_heads.score_heads(_Uniform(config={}), [[f"w{i}" for i in range(600)]])
    assert report["queries"] == 511  # no max_len_trained: 512 tokens
    assert report["window"] == 3  # the default window
    with pytest.raises(BadInput) as caught:
        lm_heads.score_heads(_Uniform(), [["a"], []])
    assert str(caught.value) == "no sentence of two or more words to score the heads on"


def test_score_heads_lists_every_layer_and_head_in_order():
    report = lm_heads.score_heads(_Uniform(layers=2, heads=3), [["a", "b", "c"]])
    assert [(h["layer"], h["head"]) for h in report["heads"]] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("window", [1, lm_heads.MAX_WINDOW])
def test_the_window_bounds_are_accepted(window):
    assert lm_heads.score_heads(_Uniform(), [["a", "b", "c"]], window=window)["window"] == window


@pytest.mark.parametrize("window, message", [(0, "--window must be at least 1 (got 0)"),
                                             (10_001, "--window must be in [1, 10,000] (got 10001)")])
def test_a_window_out_of_bounds_is_refused(window, message):
    with pytest.raises(BadInput) as caught:
        lm_heads.score_heads(_Uniform(), [["a", "b", "c"]], window=window)
    assert str(caught.value) == message
