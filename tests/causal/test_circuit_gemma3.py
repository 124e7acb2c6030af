"""attn circuit on Gemma 3, whose sublayers' outputs are normed before their residual add
(attncli/hf/methods/edges.py's docstring: a head's output is gamma (z_h W_O^h) / rms(o) with its
run's own o), against a brute-force edge-patched forward through transformers' own modules written
with torch hooks (tests/_edge_reference.py), in float64: every writer's output, the heads adding up to
the post-attention norm's output, the edge-patched logits for any edge weights, EAP's and EAP-IG's
scores as (u_clean - u_corrupt) . the reader's input gradient by torch autograd, and the circuit's
patched metric."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")
needed("safetensors")

import torch  # noqa: E402

from _edge_reference import load_reference, run  # noqa: E402
from _llama_fixtures import build_decoder  # noqa: E402

from attncli.causal.circuit import edge_scores, find_circuit, record_tape  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward import DecoderTape  # noqa: E402
from attncli.hf.methods.edges import down_index, edge_mask, edge_patched_logits, node_outputs, up_index  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog ran to the log and the cat"
TOKEN, CONTRAST = 5, 7


def _exact_final_gain(path):
    """The final norm's weights moved onto a 2^-10 grid, so that Gemma's 1 + w is exact in float32:
    attn adds the offset to the final norm's weight before widening it (1e-7 relative), which
    would hide the float64 comparison of everything else."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    tensors["model.norm.weight"] = np.round(tensors["model.norm.weight"] * 1024) / 1024
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """A tiny random Gemma 3 (a local and a global layer, q / k norms, both output norms, a logit
    cap that bites), each head its own key and value head (the reference patches per head), the
    model, its reference, the clean and corrupted ids, their tapes and records."""
    path = _exact_final_gain(build_decoder("gemma3", tmp_path_factory.mktemp("gemma3") / "g", num_key_value_heads=4,
                                           final_logit_softcapping=3.0))
    model, ref = load(str(path), backend="numpy"), load_reference(path)
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    clean, corrupt = clean[:n], corrupt[:n]
    tapes = [record_tape(model, ids) for ids in (clean, corrupt)]
    with torch.no_grad():  # the reference from attn's embeddings (its float32 sqrt(d) product is not the test's)
        records = [run(ref, ids, embed=torch.tensor(t.embed)) for ids, t in zip((clean, corrupt), tapes)]
    return model, ref, clean, corrupt, tapes, records


def _close(got, want, rel=1e-10):
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * max(1.0, np.abs(want).max()))


def test_the_heads_outputs_add_up_to_the_post_attention_norms_output(gemma):
    model, _, _, _, tapes, records = gemma
    h = model.heads
    for tape, (logits, rec) in zip(tapes, records):
        out = node_outputs(tape)  # (U, T, d)
        _close(out, rec["out"].numpy())  # every writer, as the reference hooks make it
        for l in range(model.layers):
            first = up_index(l, 0, h)
            _close(out[first:first + h].sum(axis=0), rec["attn_out"][l].numpy())  # transformers' module's output
        _close(out.sum(axis=0), tape.layers[-1]["post"])  # the stream: the embeddings plus every writer
        _close(tape.logits(len(logits) - 1), logits[-1].numpy())


def test_the_edge_patched_forward_is_the_brute_force_one(gemma):
    model, ref, clean, _, (ct, kt), (_, (_, corrupt_rec)) = gemma
    mask, h = edge_mask(model.layers, model.heads), model.heads
    U, D = mask.shape
    rng = np.random.default_rng(1)
    removed = np.ones((U, D))
    for u, v in [(up_index(0, 1, h), down_index(1, 2, "k", h)), (0, down_index(1, None, "", h)),
                 (up_index(1, 3, h), D - 1), (up_index(0, None, h), down_index(1, 0, "q", h))]:
        removed[u, v] = 0.0
    delta = torch.zeros((D,) + ct.embed.shape, dtype=torch.float64)
    pos = len(clean) - 1
    for w in (np.ones((U, D)), np.zeros((U, D)), removed, rng.uniform(0, 1, (U, D))):
        with torch.no_grad():
            want, _ = run(ref, clean, corrupt_rec, torch.tensor(np.where(mask, w, 0.0)), delta,
                          embed=torch.tensor(ct.embed))
        _close(edge_patched_logits(ct, kt, w, pos), want[pos].numpy())


@pytest.mark.parametrize("steps", [1, 3])
def test_eap_and_eap_ig_scores_are_the_shift_times_torchs_reader_gradient(gemma, steps):
    model, ref, clean, corrupt, (ct, kt), ((_, clean_rec), (_, corrupt_rec)) = gemma
    mask = edge_mask(model.layers, model.heads)
    target = Target(len(clean) - 1, TOKEN, "t", CONTRAST, "c")
    scores, _, _ = edge_scores(model, clean, corrupt, target, steps)
    grad = 0.0
    for k in range(1, steps + 1):  # each point of the path: the readers' input gradients by autograd
        delta = torch.zeros((mask.shape[1],) + ct.embed.shape, dtype=torch.float64, requires_grad=True)
        embed = torch.tensor(kt.embed + k / steps * (ct.embed - kt.embed))
        logits, _ = run(ref, clean, corrupt_rec, torch.tensor(mask, dtype=torch.float64), delta, embed=embed)
        (logits[-1, TOKEN] - logits[-1, CONTRAST]).backward()
        grad = grad + delta.grad.numpy() / steps  # (D, T, d)
    shift = (clean_rec["out"] - corrupt_rec["out"]).numpy()  # (U, T, d) u_clean - u_corrupt
    want = np.einsum("utd,vtd->uv", shift, grad)
    _close(scores, np.where(mask, want, 0.0))


def test_the_circuits_patched_metric_is_the_brute_force_ones(gemma):
    model, ref, clean, corrupt, (ct, _), (_, (_, corrupt_rec)) = gemma
    target = Target(len(clean) - 1, TOKEN, "t", CONTRAST, "c")
    res = find_circuit(model, clean, corrupt, target, faithfulness=0.8)
    assert res.faithfulness >= 0.8 and 0 < len(res.kept) < res.edge_count()
    w = np.zeros(res.mask.shape)
    for u, v in res.kept:
        w[u, v] = 1.0
    with torch.no_grad():
        logits, _ = run(ref, clean, corrupt_rec, torch.tensor(w), torch.zeros((w.shape[1],) + ct.embed.shape,
                                                                               dtype=torch.float64),
                        embed=torch.tensor(ct.embed))
    assert abs(res.patched - float(logits[-1, TOKEN] - logits[-1, CONTRAST])) <= 1e-10 * max(1.0, abs(res.patched))


def test_grouped_key_value_heads_keep_the_clean_and_corrupted_runs(tmp_path):
    """Gemma-3-270M's shape: one key-value head for every query head. No edge removed is the clean
    run, every edge the corrupted one, and the writers add up to the stream, in each run."""
    model = load(str(build_decoder("gemma3", tmp_path / "g")), backend="numpy")
    ids = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(map(len, ids))
    ct, kt = DecoderTape(model), DecoderTape(model)
    ct.forward_pair(kt, ids[0][:n], ids[1][:n])
    shape = edge_mask(model.layers, model.heads).shape
    _close(edge_patched_logits(ct, kt, np.ones(shape), n - 1), ct.logits(n - 1))
    _close(edge_patched_logits(ct, kt, np.zeros(shape), n - 1), kt.logits(n - 1))
    for tape in (ct, kt):
        _close(node_outputs(tape).sum(axis=0), tape.layers[-1]["post"])
