"""The peer check of attribution patching: TransformerLens 4 (a TransformerBridge over the same
transformers GPT-2, in float64), driven as Neel Nanda's attribution-patching demo drives it
(run_with_cache, backward hooks on the corrupted run), gives attn's plain AtP grid
(attncli/causal/attribution.py, ``attn attribute --no-qk-fix``) cell for cell, for every site: the
residual stream into each layer, the attention and MLP outputs, each head's z, each head's key and
query. Float64 on both sides, to 1e-9 (and on a Llama with grouped-query attention, whose pass
attn runs in float32, within float32 rounding). Skipped with the reason where transformer_lens is
missing; under CI, which installs it, a failure.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
needed("transformers")
needed("transformer_lens", "transformer_lens is not installed: pip install transformer-lens (TransformerLens 4)")

from _causal_peer import LENS_SITES, boot_lens, lens_atp  # noqa: E402
from _tolerance import f32_close  # noqa: E402
from _transformer_fixtures import build_gpt2, every_parameter_drawn  # noqa: E402

from attncli.causal.attribution import attribute  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.hf import load  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat and the dog", "the dog sat on the mat and the cat"
TARGET = 7


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    d = tmp_path_factory.mktemp("atp-peer")
    path = every_parameter_drawn(build_gpt2(d / "base"), d / "gpt2", seed=3)
    model = load(path, backend="numpy")
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    assert len(clean) == len(corrupt)
    lens = lens_atp(boot_lens(path, dtype=torch.float64), clean, corrupt, TARGET)
    return model, clean, corrupt, lens


@pytest.mark.parametrize("where", list(LENS_SITES))
def test_transformer_lens_attribution_patching_equals_attns(both, where):
    model, clean, corrupt, lens = both
    ours = attribute(model, clean, corrupt, Target(len(clean) - 1, TARGET, "t"), where=where, qk_fix=False)
    assert abs(ours.clean - lens["clean"]) < 1e-9 and abs(ours.corrupt - lens["corrupt"]) < 1e-9
    assert abs(ours.clean - ours.corrupt) > 1e-2  # the texts differ in the metric
    assert ours.values.shape == lens[where].shape
    assert np.abs(lens[where]).max() > 1e-3  # the grid moves: agreement means something
    np.testing.assert_allclose(ours.values, lens[where], rtol=0, atol=1e-9)


@pytest.mark.parametrize("where", ["resid", "attn", "mlp", "head"])
def test_on_a_llama_with_grouped_query_attention_too(tmp_path_factory, where):
    """The Llama family (RoPE, grouped-query attention, RMSNorm, a gated MLP): attn runs its AtP on
    the float32 tape (the family's pass is float32), TransformerLens in float64: equal within float32
    rounding (tests/_tolerance.py: a forward and a backward, 2L + 1 layers, and the cell's own sum)."""
    from _llama_fixtures import build_decoder

    path = build_decoder("llama", tmp_path_factory.mktemp("atp-llama") / "llama")
    model = load(str(path), backend="numpy")
    assert model.kv_heads < model.heads
    clean, corrupt = model.encode(CLEAN).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    lens = lens_atp(boot_lens(path, dtype=torch.float64), clean[:n], corrupt[:n], TARGET)
    ours = attribute(model, clean[:n], corrupt[:n], Target(n - 1, TARGET, "t"), where=where, qk_fix=False)
    assert np.abs(lens[where]).max() > 1e-3
    f32_close(ours.values, lens[where], depth=2 * model.layers + 1, length=n * model.arch.d,
              what=f"{where} AtP, attn float32 against TransformerLens float64")
