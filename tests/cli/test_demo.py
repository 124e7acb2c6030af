"""``attn demo`` against the seed's example recomputed with torch, and ``attn scale``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.cli.main import app

torch = needed("torch")


def run(*args):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.stderr
    return result


def seed_example_in_torch():
    """The seed's recipe, step by step: its own random draws, then torch for the maths."""
    np.random.seed(42)
    w_q = np.random.randint(3, size=(3, 3))
    w_k = np.random.randint(3, size=(3, 3))
    w_v = np.random.randint(3, size=(3, 3))
    words = torch.tensor([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.float64)
    Q, K, V = (words @ torch.tensor(w, dtype=torch.float64) for w in (w_q, w_k, w_v))
    weights = torch.softmax(Q @ K.T / K.shape[1] ** 0.5, dim=1)
    return {"W_Q": w_q, "W_K": w_k, "W_V": w_v, "Q": Q, "K": K, "V": V, "weights": weights, "output": weights @ V}


def test_demo_json_matches_the_seed_recipe():
    doc = json.loads(run("demo", "--json").stdout)
    ref = seed_example_in_torch()
    for name in ("W_Q", "W_K", "W_V"):
        assert doc[name] == ref[name].tolist()
    for name in ("Q", "K", "V", "weights", "output"):
        np.testing.assert_allclose(np.array(doc[name]), ref[name].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.array(doc["scores"]), (ref["Q"] @ ref["K"].T).numpy())
    assert doc["d_k"] == 3 and doc["seed"] == 42


def test_demo_output_first_row_by_hand():
    # word_1 = [1,0,0]: its weights are softmax over [q1.k_j / sqrt(3)], the output their mix of V
    doc = json.loads(run("demo", "--json").stdout)
    q1 = np.array(doc["Q"][0], float)
    scores = np.array([q1 @ np.array(k, float) for k in doc["K"]]) / np.sqrt(3)
    e = np.exp(scores - scores.max())
    w = e / e.sum()
    assert np.allclose(w, doc["weights"][0]) and np.allclose(w @ np.array(doc["V"], float), doc["output"][0])


def test_demo_does_not_disturb_the_global_numpy_random_state():
    np.random.seed(7)
    before = np.random.random()
    np.random.seed(7)
    run("demo", "--json")
    assert np.random.random() == before


def test_demo_terminal_view_walks_through_the_steps():
    out = run("demo").stdout
    for step in ("W_Q", "W_K", "W_V", "Q K^T", "sqrt", "softmax", "output = weights V"):
        assert step in out
    # a golden: it guards the printed view against drift; paired with the JSON's output[0][0], which
    # test_demo_output_first_row_by_hand recomputes by hand from Q, K and V
    assert "0.98522025" in out  # output[0][0] with 8 decimals
    assert f"{json.loads(run('demo', '--json').stdout)['output'][0][0]:.8f}" in out


def test_scale_panels_show_saturation():
    doc = json.loads(run("scale", "--json").stdout)
    raw, times, scaled = (np.array(doc[k]) for k in ("softmax_raw", "softmax_times_factor", "softmax_scaled"))
    scores = np.array(doc["scores"])
    for p, s in ((raw, scores), (times, scores * 100), (scaled, scores / np.sqrt(3))):
        e = np.exp(s - s.max(axis=1, keepdims=True))
        np.testing.assert_allclose(p, e / e.sum(axis=1, keepdims=True), rtol=1e-12)
    # x 100: all the weight sits on the top score(s): one-hot, or split evenly between tied maxima
    for p, s in zip(times, scores):
        top = s == s.max()
        np.testing.assert_allclose(p[top], 1 / top.sum(), atol=1e-12)
        assert np.all(p[~top] < 1e-40)
    ent = doc["entropy_bits"]
    assert all(s >= r - 1e-12 >= t - 1e-12 for s, r, t in zip(ent["scaled"], ent["raw"], ent["times_factor"]))


def test_scale_sweep_saturates_without_the_scale():
    rows = json.loads(run("scale", "--json").stdout)["sweep"]["rows"]
    raw_max = [r["max_weight_raw"] for r in rows]
    assert raw_max == sorted(raw_max) and raw_max[-1] > 0.9
    assert rows[-1]["gradient_raw"] < rows[0]["gradient_raw"] / 3
    scaled_max = [r["max_weight_scaled"] for r in rows]
    assert max(scaled_max) - min(scaled_max) < 0.1
    for r in rows:
        assert r["score_std"] == pytest.approx(np.sqrt(r["d_k"]), rel=0.15)


def test_scale_terminal_view_and_bad_factor():
    out = run("scale").stdout
    assert "softmax(scores x 100)" in out and "sqrt" in out
    result = CliRunner().invoke(app, ["scale", "--factor", "0"])
    assert result.exit_code == 2 and "--factor" in result.stderr


def test_variants_text_and_json_agree():
    doc = json.loads(run("variants", "--json").stdout)
    text = run("variants").stdout
    for v in doc["variants"]:
        assert v["formula"].split()[0] in text and v["source"].split()[0] in text


def test_entropy_bits_of_a_batch_of_distributions():
    """entropy_bits takes (..., S) distributions: each row's -sum p log2 p (0 log 0 = 0), by hand."""
    from attncli.attention.example import entropy_bits

    p = np.array([[[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]],
                  [[1.0, 0.0, 0.0], [0.125, 0.375, 0.5]]])  # (2, 2, 3)
    want = [[1.0, 1.5], [0.0, -(0.125 * math.log2(0.125) + 0.375 * math.log2(0.375) + 0.5 * math.log2(0.5))]]
    np.testing.assert_allclose(entropy_bits(p), want, rtol=1e-15, atol=0)


def test_scale_sweep_max_weight_is_the_mean_of_each_rows_largest_weight():
    """attn scale's sweep: max_weight_raw is the mean over trials of a row's largest softmax weight;
    the rows redrawn here from the documented seed, the softmax by torch."""
    from attncli.attention.example import scale_experiment

    torch = needed("torch")
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((6, 1, 4)), rng.standard_normal((6, 5, 4))
    raw = torch.tensor((q @ k.transpose(0, 2, 1))[:, 0, :])  # (trials, S)
    want = float(torch.softmax(raw, dim=-1).max(dim=-1).values.mean())
    row = scale_experiment(seed=2, keys=5, trials=6, dims=(4,))["sweep"]["rows"][0]
    assert row["max_weight_raw"] == pytest.approx(want, rel=1e-12)
