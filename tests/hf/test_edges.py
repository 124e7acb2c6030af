"""The component graph's edge-patched forward (attncli/hf/methods/edges.py) against brute force on a tiny
float64 GPT-2 (every parameter drawn): no edge removed is the clean run and every edge removed the
corrupted run (both through attn's own traced pass), one edge removed equals a path patch built by
hand (the reader's input recomputed from the weights, put in through the traced pass's
interventions); and DecoderTape.backward(inputs=True) keeps its other outputs and splits d resid_pre
by reader."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.hf import load
from attncli.hf.kernels import ops  # noqa: E402
from attncli.causal.circuit import record_tape  # noqa: E402
from attncli.hf.methods.edges import (down_index, down_names, edge_mask, edge_patched_logits, up_index,  # noqa: E402
                              up_names)
from attncli.model.trace import Intervention, site  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog ran to the log and the cat"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("edges")
    model = load(every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=5), backend="numpy")
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    tapes = [record_tape(model, ids) for ids in (clean[:n], corrupt[:n])]
    return model, clean[:n], corrupt[:n], tapes


def test_the_graph_is_every_writer_before_every_reader():
    L, h = 2, 3
    mask, ups, downs = edge_mask(L, h), up_names(L, h), down_names(L, h)
    assert mask.shape == (len(ups), len(downs)) == (1 + L * (h + 1), L * (3 * h + 1) + 1)
    assert ups[up_index(1, 2, h)] == "L1H2" and ups[up_index(0, None, h)] == "L0MLP"
    assert downs[down_index(1, 0, "k", h)] == "L1H0.k" and downs[down_index(0, None, "q", h)] == "L0MLP"
    assert not mask[up_index(0, 1, h), down_index(0, 2, "q", h)]  # a head does not read its own layer's heads
    assert mask[up_index(0, 1, h), down_index(0, None, "q", h)]  # the MLP does
    assert not mask[up_index(1, None, h), down_index(1, None, "q", h)] and mask[:, -1].all()
    # edges: heads read 1 + l (h + 1) writers each (3h of them), the MLP also its layer's heads, the logits all
    assert mask.sum() == sum(3 * h * (1 + l * (h + 1)) + 1 + l * (h + 1) + h for l in range(L)) + len(ups)


def test_no_edge_removed_is_the_clean_run_and_every_edge_the_corrupt_one(setup):
    model, clean, corrupt, (ct, kt) = setup
    pos = len(clean) - 1
    ones = np.ones(edge_mask(model.layers, model.heads).shape)
    for w, ids in ((ones, clean), (0 * ones, corrupt)):
        want = model.trace(list(ids), "logits")["logits"][pos]
        np.testing.assert_allclose(edge_patched_logits(ct, kt, w, pos), want, rtol=0, atol=1e-10)


def _ln(x, w, b, eps=1e-5):
    return ops.layer_norm(x, w, b, eps)


def test_one_edge_removed_is_a_path_patch_built_by_hand(setup):
    """Edge L0H1 -> L1H2's query removed: layer 1 head 2's queries read the clean stream minus L0H1's
    clean - corrupt output, its keys and values the clean run's; the rest of the model runs on."""
    model, clean, corrupt, (ct, kt) = setup
    L, h, d = model.layers, model.heads, model.arch.d
    dh, T, pos = d // h, len(clean), len(clean) - 1
    w = model.arch.w
    names = ["blocks.*.attn.z", "blocks.*.resid_pre", "blocks.*.attn.k", "blocks.*.attn.v"]
    c_tr, k_tr = model.trace(list(clean), names), model.trace(list(corrupt), names)
    w_o = np.asarray(w.get("h.0.attn.c_proj.weight"), dtype=np.float64)[dh:2 * dh]  # head 1's rows (d_head, d)
    delta = (c_tr[site(0, "attn.z")][:, 1] - k_tr[site(0, "attn.z")][:, 1]) @ w_o  # (T, d)
    a = _ln(c_tr[site(1, "resid_pre")] - delta, np.asarray(w.get("h.1.ln_1.weight")), np.asarray(w.get("h.1.ln_1.bias")))
    qkv, qkv_b = np.asarray(w.get("h.1.attn.c_attn.weight")), np.asarray(w.get("h.1.attn.c_attn.bias"))
    q = a @ qkv[:, 2 * dh:3 * dh] + qkv_b[2 * dh:3 * dh]  # head 2's query (T, d_head)
    k, v = c_tr[site(1, "attn.k")][2], c_tr[site(1, "attn.v")][2]  # (T, d_head)
    s = np.where(np.tril(np.ones((T, T), bool)), q @ k.T / np.sqrt(dh), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    z = (p / p.sum(-1, keepdims=True)) @ v  # (T, d_head)
    want = model.trace(list(clean), "logits", interventions=[Intervention(site(1, "attn.z"), "replace", head=2,
                                                                          value=z)])["logits"][pos]
    weights = np.ones(edge_mask(L, h).shape)
    weights[up_index(0, 1, h), down_index(1, 2, "q", h)] = 0.0
    got = edge_patched_logits(ct, kt, weights, pos)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert np.abs(got - ct.logits(pos)).max() > 1e-3  # the patch moved the logits


def test_edges_into_the_logits_are_the_final_norm_of_the_shifted_stream(setup):
    """The last MLP -> logits and L1H1 -> logits removed: the unembedding reads the clean stream
    minus both writers' clean - corrupt outputs (the head's from z and its rows of W_O)."""
    model, clean, corrupt, (ct, kt) = setup
    h, pos, L = model.heads, len(clean) - 1, model.layers
    dh = model.arch.d // h
    mlp_c = ct.layers[-1]["post"] - ct.layers[-1]["mid"]
    mlp_k = kt.layers[-1]["post"] - kt.layers[-1]["mid"]
    w_o = np.asarray(model.arch.w.get(f"h.{L - 1}.attn.c_proj.weight"), dtype=np.float64)[dh:2 * dh]  # (d_head, d)
    head = (ct.layers[-1]["z"][pos, 1] - kt.layers[-1]["z"][pos, 1]) @ w_o  # (d,)
    x = ct.layers[-1]["post"][pos] - (mlp_c - mlp_k)[pos] - head
    kind, fw, fb, eps = ct.final
    want = np.asarray(model.arch.unembedding(), dtype=np.float64) @ _ln(x, fw, fb, eps)
    weights = np.ones(edge_mask(L, h).shape)
    weights[up_index(L - 1, None, h), -1] = weights[up_index(L - 1, 1, h), -1] = 0.0
    np.testing.assert_allclose(edge_patched_logits(ct, kt, weights, pos), want, rtol=0, atol=1e-10)


def test_reader_gradients_split_d_resid_pre_and_leave_the_rest_equal(setup):
    model, clean, _, (ct, _) = setup
    pos, g = len(clean) - 1, np.eye(model.config["vocab_size"])[7]
    plain, full = ct.backward(pos, g), ct.backward(pos, g, inputs=True)
    for name, value in plain.items():
        assert np.array_equal(full[name], value), name
    for l in range(model.layers):
        qk = full[f"blocks.{l}.head_in.q"].sum(0) + full[f"blocks.{l}.head_in.k"].sum(0)  # (T, d)
        np.testing.assert_allclose(qk, full[f"blocks.{l}.qk_in"], rtol=0, atol=1e-12)
        after = full[f"blocks.{l}.mlp_in"] + (full[site(l + 1, "resid_pre")] if l + 1 < model.layers else full["final_in"])
        np.testing.assert_allclose(after, full[site(l, "resid_mid")], rtol=0, atol=1e-12)
        readers = qk + full[f"blocks.{l}.head_in.v"].sum(0) + full[site(l, "resid_mid")]
        np.testing.assert_allclose(readers, full[site(l, "resid_pre")], rtol=0, atol=1e-12)
