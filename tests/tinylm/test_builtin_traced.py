"""The built-in LM as a model like the others (attncli/tinylm/traced.py): a ``Model``, its traced
pass against ``TrainedAttention``'s own forward pass and the torch model of the papers
(tests/tinylm/test_tinylm_reference.py), and ablate/patch on it against passes made by hand: a
zeroed head is the same model with that head's columns of W_O zeroed; a patched embedding row is
the plain pass over the mixed embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed
from _attention_fixtures import SENTENCES, make_random_attention, widest
from _tolerance import f32_close
from attncli.causal import grids
from attncli.causal.target import resolve
from attncli.errors import BadInput
from attncli.model import Model, has
from attncli.model.trace import Intervention, site
from attncli.tinylm import model as trained
from attncli.tinylm.traced import BuiltinLM

LAYERS, HEADS = 2, 4


@pytest.fixture
def lm():
    make_random_attention("rand", layers=LAYERS, heads=HEADS)
    return BuiltinLM(trained.load_trained("rand"))


def close(a, b, scale=None):
    """Equal within float32 rounding (tests/_tolerance.py) through every layer and the unembedding, at the
    size of the numbers (or ``scale``)."""
    f32_close(a, b, LAYERS + 1, widest(trained.load_trained("rand").config), scale=scale)


def test_the_builtin_lm_is_a_model_whose_trace_is_its_forward_pass(lm):
    assert isinstance(lm, Model)
    assert {"trace", "resume", "rerun", "unembed", "output_weight", "lens"} <= lm.can and not has(lm, "batch")
    tokens = SENTENCES[4].split()
    enc = lm.encode(" ".join(tokens))
    assert enc.tokens == tokens and lm.token_strings(enc.ids) == tokens
    tr = lm.trace(enc, ["logits", "blocks.*.attn.pattern", "blocks.*.resid_post", "embed"])
    close(tr["logits"], lm.att.logits(tokens))
    for l, layer in enumerate(lm.att.trace(tokens)):
        close(tr[site(l, "attn.pattern")], layer.weights)
    close(np.stack([tr["embed"]] + [tr[site(l, "resid_post")] for l in range(LAYERS)]), lm.att.residual_stream(tokens))
    parts = lm.trace(enc, ["blocks.*.resid_pre", "blocks.*.attn.z", "blocks.*.attn.out", "blocks.*.resid_mid",
                           "blocks.*.mlp.out", "blocks.*.resid_post"])
    for l in range(LAYERS):  # the stream's sums, and attn.out = z W_O + b_O
        close(parts[site(l, "resid_pre")] + parts[site(l, "attn.out")], parts[site(l, "resid_mid")])
        close(parts[site(l, "resid_mid")] + parts[site(l, "mlp.out")], parts[site(l, "resid_post")])
        z = parts[site(l, "attn.z")].reshape(len(tokens), -1)  # (T, h d_k)
        close(z @ lm.output_weight(l) + lm.att.w[f"blocks.{l}.attn.out_proj.bias"], parts[site(l, "attn.out")])
    rows = lm.trace(enc, "blocks.1.attn.pattern", rows=[2, 5])[site(1, "attn.pattern")]
    close(rows, tr[site(1, "attn.pattern")][:, [2, 5]])


def test_the_trace_equals_the_papers_torch_model(lm):
    needed("torch")
    from test_tinylm_reference import reference_forward, stored

    config, weights, vectors = stored("rand")
    tokens = SENTENCES[4].split()
    ref_w, ref_logits, _, ref_stream = reference_forward(config, weights, vectors, tokens, everything=True)
    tr = lm.trace(tokens_ids(lm, tokens), ["logits", "blocks.*.attn.pattern"])
    close(tr["logits"], ref_logits)
    for l in range(LAYERS):
        close(tr[site(l, "attn.pattern")], ref_w[l])


def tokens_ids(lm, tokens):
    return lm.encode(" ".join(tokens)).ids


def zeroed_head(lm, layer, head):
    """The same LM with head ``head`` of ``layer`` cut off: its d_k columns of W_O zeroed."""
    w = dict(lm.att.w)
    name = f"blocks.{layer}.attn.out_proj.weight"
    w[name] = w[name].copy()
    d_k = lm.att.d_k
    w[name][:, head * d_k:(head + 1) * d_k] = 0
    return trained.TrainedAttention(lm.att.model, lm.att.directory, lm.att.config, w, lm.att.vectors)


def test_ablation_on_the_builtin_lm_is_the_pass_with_a_zeroed_head(lm):
    tokens = SENTENCES[4].split()
    ids = tokens_ids(lm, tokens)
    target = resolve(lm, ids, target=lm.words[3])
    clean = target.metric(lm.att.logits(tokens)[target.position])
    grid = grids.ablate(lm, ids, target)
    want = np.array([[target.metric(zeroed_head(lm, l, h).logits(tokens)[target.position]) - clean
                      for h in range(HEADS)] for l in range(LAYERS)])
    close(grid.values, want, scale=max(1.0, float(np.abs(want).max())))
    assert np.abs(want).max() > 1e-4  # the heads matter: the check can fail
    tr = lm.trace(ids, "logits", interventions=[Intervention(site(1, "attn.z"), head=2)])
    close(tr["logits"], zeroed_head(lm, 1, 2).logits(tokens))


def test_patching_the_embeddings_is_the_pass_over_mixed_embeddings(lm):
    clean_tokens = "the cat sat on the mat".split()
    corrupt_tokens = "the dog sat on the rug".split()
    clean, corrupt = tokens_ids(lm, clean_tokens), tokens_ids(lm, corrupt_tokens)
    target = resolve(lm, clean, target=lm.words[5], contrast=lm.words[6])
    grid = grids.patch(lm, clean, corrupt, target, where="resid")
    e_clean, e_bad = (lm.att.embed(t) for t in (clean_tokens, corrupt_tokens))  # (T, d)
    m_clean = target.metric(lm.att.logits(e_clean)[-1])
    m_bad = target.metric(lm.att.logits(e_bad)[-1])
    size = max(float(np.abs(lm.att.logits(e)[-1]).max()) for e in (e_clean, e_bad))  # the logits differenced
    for x in range(len(clean)):
        mixed = e_bad.copy()
        mixed[x] = e_clean[x]
        want = (target.metric(lm.att.logits(mixed)[-1]) - m_bad) / (m_clean - m_bad)
        # (m - m_bad) / (m_clean - m_bad): the two differences' float32 rounding at the logits' size, over the gap
        close(grid.values[0, x], want, scale=2 * size * (1 + abs(want)) / abs(m_clean - m_bad))


def test_the_builtin_lm_refuses_what_it_lacks_with_the_one_sentence(lm):
    with pytest.raises(BadInput, match="needs .* built-in LM"):
        lm.trace_batch([])


@pytest.mark.parametrize("contrast", [None, 6])
def test_dla_on_the_builtin_lm_adds_up_to_its_own_logit(lm, contrast):
    """The parts (the output head's bias one of them) sum to the logit of TrainedAttention.logits,
    a pass that knows nothing of the parts; each head's per-token parts sum to the head's."""
    from attncli.causal.dla import dla

    tokens = SENTENCES[4].split()
    ids = tokens_ids(lm, tokens)
    target = resolve(lm, ids, target=lm.words[3], contrast=None if contrast is None else lm.words[contrast])
    res = dla(lm, ids, target)
    logits = lm.att.logits(tokens)[target.position].astype(np.float64)
    want = logits[target.token] - (0 if contrast is None else logits[target.contrast])
    size = float(np.abs(logits).max())  # the logits (of which ``want`` is one, or a difference of two)
    close(res["sum"], want, scale=size)
    close(res["logit"], want, scale=size)
    assert res["head_bias"] != 0
    close(res["per_token"].sum(axis=-1), res["heads"])


def test_attn_ablate_and_patch_run_on_the_builtin_lm_without_transformer(lm, monkeypatch):
    """No --transformer: the built-in LM (the default word-vector model's, here ATTN_MODEL's), its
    grid the zeroed-head passes'; attribute still needs a checkpoint."""
    import json

    from typer.testing import CliRunner

    from attncli.cli.main import app

    monkeypatch.setenv("ATTN_MODEL", "rand")
    tokens = SENTENCES[4].split()
    word = lm.words[3]
    r = CliRunner().invoke(app, ["ablate", " ".join(tokens), "--target", word, "--json"])
    assert r.exit_code == 0, r.output
    ids = tokens_ids(lm, tokens)
    target = resolve(lm, ids, target=word)
    clean = target.metric(lm.att.logits(tokens)[target.position])
    want = [[target.metric(zeroed_head(lm, l, h).logits(tokens)[target.position]) - clean for h in range(HEADS)]
            for l in range(LAYERS)]
    close(np.array(json.loads(r.stdout)["grid"]), np.array(want))
    r = CliRunner().invoke(app, ["patch", "the cat sat", "the dog sat", "--target", word, "--json"])
    assert r.exit_code == 0 and np.array(json.loads(r.stdout)["grid"]).shape == (LAYERS, 3), r.output
    r = CliRunner().invoke(app, ["ablate", "the cat sat", "--target", word, "--backend", "torch"])
    assert r.exit_code == 2 and "places a --transformer model" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["ablate", "the cat sat", "--target", "zzzz"])
    assert r.exit_code == 2 and "not one of the" in r.output
    r = CliRunner().invoke(app, ["attribute", "the cat sat", "the dog sat", "--target", word])
    assert r.exit_code == 2 and "give the model with --transformer" in r.output
