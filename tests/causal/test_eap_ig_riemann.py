"""EAP-IG (attncli/causal/circuit.py's edge_scores, steps N) against an independent Riemann sum:
torch autograd through a GPT-2 written here from transformers' own weights, in which every reader
(each head's query, key and value input, each MLP's, the unembedding's) reads the residual stream
plus a zero tensor of its own, so d metric / d that tensor is the reader's input gradient. The
promised formula (the module docstring):

    score(u -> v) = (u_clean - u_corrupt) . (1/N) sum_{k=1..N} g_v(e_corrupt + (k/N)(e_clean - e_corrupt))

is checked at N = 1 (EAP: the clean end alone), 2, 3 and 7, and at both ends of the path: the sum
takes the clean end (k = N) and leaves the corrupted end (k = 0) out, so it is neither the left sum
nor the trapezoid; each for a logit difference and for log p. float64 against float64."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")
needed("tokenizers")

from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.causal.circuit import edge_scores  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.edges import down_names, edge_mask, up_names  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog ran to the log and the cat"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("eap_ig")
    path = every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=5)
    hf = transformers.GPT2LMHeadModel.from_pretrained(path).double().eval()
    return load(path, backend="numpy"), hf


def _pair(model):
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    return clean[:n], corrupt[:n]


def reference_pass(hf, embed, target: Target):
    """(metric, writers (U, T, d), reader gradients (D, T, d)) of the GPT-2 ``hf`` on the input
    embeddings ``embed`` (T, d), by torch autograd, writers and readers in hf/methods/edges.py's order."""
    cfg, sd = hf.config, dict(hf.named_parameters())
    L, h, d = cfg.n_layer, cfg.n_head, cfg.n_embd
    dh, T = d // h, embed.shape[0]
    readers = {name: torch.zeros(T, d, dtype=torch.float64, requires_grad=True) for name in down_names(L, h)}
    writers = [embed]
    ln = lambda v, p: torch.nn.functional.layer_norm(v, (d,), sd[p + ".weight"], sd[p + ".bias"],  # noqa: E731
                                                     eps=cfg.layer_norm_epsilon)
    act = transformers.activations.ACT2FN[cfg.activation_function]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = embed
    for l in range(L):
        p = f"transformer.h.{l}."
        W, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]  # (d, 3d): q | k | v columns (Conv1D)
        Wo = sd[p + "attn.c_proj.weight"]  # (d, d)
        heads = []
        for x_ in range(h):
            cols = [slice(c * d + x_ * dh, c * d + (x_ + 1) * dh) for c in range(3)]
            q, k, v = (ln(x + readers[f"L{l}H{x_}.{c}"], p + "ln_1") @ W[:, s] + b[s] for c, s in zip("qkv", cols))
            a = torch.softmax((q @ k.T / dh ** 0.5).masked_fill(~causal, float("-inf")), dim=-1)  # (T, T)
            heads.append(a @ v @ Wo[x_ * dh:(x_ + 1) * dh])  # (T, d) the head's output
        mid = x + sum(heads) + sd[p + "attn.c_proj.bias"]
        m = act(ln(mid + readers[f"L{l}MLP"], p + "ln_2") @ sd[p + "mlp.c_fc.weight"] + sd[p + "mlp.c_fc.bias"])
        mlp = m @ sd[p + "mlp.c_proj.weight"] + sd[p + "mlp.c_proj.bias"]
        writers += [*heads, mlp]
        x = mid + mlp
    logits = ln(x + readers["logits"], "transformer.ln_f")[target.position] @ sd["transformer.wte.weight"].T  # (V,)
    metric = (logits[target.token] - logits[target.contrast] if target.contrast is not None
              else torch.log_softmax(logits, -1)[target.token])
    metric.backward()
    grads = torch.stack([readers[name].grad for name in down_names(L, h)])
    return float(metric.detach()), torch.stack(writers).detach().numpy(), grads.numpy()


def embeddings(hf, ids):
    """(T, d) GPT-2's input embeddings: token plus position."""
    with torch.no_grad():
        return hf.transformer.wte.weight[ids] + hf.transformer.wpe.weight[: len(ids)]


def riemann(hf, clean_ids, corrupt_ids, target, alphas):
    """(U, D) (u_clean - u_corrupt) . the mean of the reader gradients at the points ``alphas`` of the path."""
    e_clean, e_corrupt = embeddings(hf, clean_ids), embeddings(hf, corrupt_ids)
    _, w_clean, _ = reference_pass(hf, e_clean, target)
    _, w_corrupt, _ = reference_pass(hf, e_corrupt, target)
    mean = np.mean([reference_pass(hf, e_corrupt + a * (e_clean - e_corrupt), target)[2] for a in alphas], axis=0)
    delta = w_clean - w_corrupt  # (U, T, d)
    return np.einsum("utd,vtd->uv", delta, mean)


@pytest.mark.parametrize("contrast", [5, None], ids=["logit-diff", "log-p"])
@pytest.mark.parametrize("steps", [1, 2, 3, 7])
def test_eap_ig_is_the_right_riemann_sum_of_autograd_gradients(models, steps, contrast):
    model, hf = models
    clean_ids, corrupt_ids = _pair(model)
    target = Target(len(clean_ids) - 1, 7, "t", contrast, None if contrast is None else "c")
    scores = edge_scores(model, clean_ids, corrupt_ids, target, steps=steps)[0]
    mask = edge_mask(model.layers, model.heads)
    assert scores.shape == (len(up_names(model.layers, model.heads)), len(down_names(model.layers, model.heads)))
    right = np.where(mask, riemann(hf, clean_ids, corrupt_ids, target, [k / steps for k in range(1, steps + 1)]), 0.0)
    scale = np.abs(right).max()
    assert scale > 1e-3
    np.testing.assert_allclose(scores, right, rtol=0, atol=1e-9 * scale)  # float64 against float64
    # both ends: the clean end is in the sum, the corrupted end is not (nor is it the trapezoid)
    left = np.where(mask, riemann(hf, clean_ids, corrupt_ids, target, [k / steps for k in range(steps)]), 0.0)
    trapezoid = (left + right) / 2
    for other in (left, trapezoid):
        assert np.abs(scores - other).max() > 1e-4 * scale


def test_the_reference_itself_sums_to_the_metric_s_change_at_many_steps(models):
    """The reference is what it says: with many steps the embeddings' row, summed over every reader
    (the stream carries the embeddings to each one), is metric(clean) - metric(corrupt): integrated
    gradients' completeness on the input, the only thing that differs between the two runs."""
    model, hf = models
    clean_ids, corrupt_ids = _pair(model)
    target = Target(len(clean_ids) - 1, 7, "t", 5, "c")
    m_clean = reference_pass(hf, embeddings(hf, clean_ids), target)[0]
    m_corrupt = reference_pass(hf, embeddings(hf, corrupt_ids), target)[0]
    n = 64  # the midpoint rule: error O(1/n^2)
    ig = riemann(hf, clean_ids, corrupt_ids, target, [(k + 0.5) / n for k in range(n)])
    assert ig[0].sum() == pytest.approx(m_clean - m_corrupt, rel=2e-3)  # fixed: a 64-point midpoint rule's error
    assert abs(m_clean - m_corrupt) > 1e-2
