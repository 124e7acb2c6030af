"""attn scale's numbers (attncli/attention/example.py) by their formulas, standing alone: until now
the softmax Jacobian's norm and the sweep's entropy and gradient columns were checked only by
docs/matrix.md's printed example (and a "falls with d_k" property). torch autograd is the
reference for the Jacobian; the sweep is redrawn from its documented seed."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

from attncli.attention.example import entropy_bits, scale_experiment, softmax_gradient_norm, worked_example


def test_the_softmax_gradient_norm_is_the_frobenius_norm_of_autograd_s_jacobian():
    torch = needed("torch")
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((3, 5, 7)) * np.array([0.1, 3.0, 30.0])[:, None, None]  # (..., S): soft to saturated
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    got = softmax_gradient_norm(p)  # (3, 5)
    for i in range(3):
        for j in range(5):
            jac = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1),
                                                     torch.tensor(scores[i, j], dtype=torch.float64))  # (S, S)
            assert got[i, j] == pytest.approx(float(torch.linalg.matrix_norm(jac)), rel=1e-12, abs=1e-300)
    assert softmax_gradient_norm(np.eye(4)).tolist() == [0.0] * 4  # a one-hot row: a flat softmax, no gradient


def test_the_sweep_is_its_formula_redrawn_from_the_seed():
    torch = needed("torch")
    keys, trials, dims = 6, 9, (4, 64)
    doc = scale_experiment(seed=7, keys=keys, trials=trials, dims=dims)
    rng = np.random.default_rng(7)
    for d, row in zip(dims, doc["sweep"]["rows"]):
        q, k = rng.standard_normal((trials, 1, d)), rng.standard_normal((trials, keys, d))
        raw = torch.tensor(np.einsum("tqd,tkd->tqk", q, k)[:, 0, :])  # (trials, S) q . k
        for name, s in (("raw", raw), ("scaled", raw / d ** 0.5)):
            p = torch.softmax(s, -1)
            ent = -(p * torch.log2(p)).sum(-1)
            jac = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (trials, S, S)
            assert row[f"entropy_{name}"] == pytest.approx(float(ent.mean()), rel=1e-12), (d, name)
            assert row[f"gradient_{name}"] == pytest.approx(float(torch.linalg.matrix_norm(jac).mean()), rel=1e-12)
            assert row[f"max_weight_{name}"] == pytest.approx(float(p.max(-1).values.mean()), rel=1e-12)
        assert row["score_std"] == pytest.approx(float(raw.std(unbiased=False)), rel=1e-12)


def test_the_three_panels_are_the_worked_example_s_softmaxes():
    ex = worked_example()
    doc = scale_experiment(factor=10.0, dims=(4,), trials=2)
    scores = np.asarray(ex["scores"], dtype=float)  # (4, 4)

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    for name, x in (("softmax_raw", scores), ("softmax_times_factor", scores * 10.0),
                    ("softmax_scaled", scores / np.sqrt(int(ex["d_k"])))):
        np.testing.assert_allclose(doc[name], softmax(x), rtol=1e-12, atol=1e-300)
        assert doc["entropy_bits"][name.removeprefix("softmax_")] == \
            pytest.approx(entropy_bits(softmax(x)).tolist(), rel=1e-12)
