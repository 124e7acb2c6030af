"""The peer check: TransformerLens 4 (a TransformerBridge over the same transformers model) gives the
same head-ablation grid as attn's torch trace, attn's NumPy grid (``attn ablate``'s core,
attncli.causal.grids.ablate, batched) and plain transformers forward pre-hooks, to 1e-5, on a
tiny random GPT-2 (and a Llama with grouped-query attention). Skipped with the reason where
transformer_lens is missing; under CI, which installs it, a failure.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")
needed("transformer_lens", "transformer_lens is not installed: pip install transformer-lens (TransformerLens 4)")

from _causal_peer import boot_lens, hook_grid, lens_grid, numpy_grid, trace_grid  # noqa: E402
from _llama_fixtures import build_decoder  # noqa: E402
from attncli.hf import load  # noqa: E402

torch.set_num_threads(1)
TEXT = "the cat sat on the mat and the dog sat on the"


@pytest.fixture(scope="module")
def grids(tiny_gpt2_dir):
    model = load(str(tiny_gpt2_dir), backend="torch")
    ids = model.encode(TEXT).ids
    target = model.encode(" mat").ids[-1]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_gpt2_dir), attn_implementation="eager").eval()
    return {"attn": trace_grid(model, ids, target), "attn-whole": trace_grid(model, ids, target, resume=False),
            "lens": lens_grid(boot_lens(tiny_gpt2_dir), ids, target), "hooks": hook_grid(hf, ids, target),
            "numpy": numpy_grid(load(str(tiny_gpt2_dir), backend="numpy"), ids, target)}


def test_the_grid_moves(grids):
    """Some heads move log p(target) by much more than the tolerance, so agreement means something."""
    assert grids["hooks"].shape == (2, 4)
    assert np.abs(grids["hooks"]).max() > 0.05
    assert len(np.unique(np.round(grids["hooks"], 4))) > 4


@pytest.mark.parametrize("way", ["attn", "attn-whole", "lens", "numpy"])
def test_transformer_lens_attn_and_plain_hooks_give_one_grid(grids, way):
    np.testing.assert_allclose(grids[way], grids["hooks"], atol=1e-5, rtol=0)


def test_a_llama_with_grouped_query_attention_agrees_too(tmp_path):
    path = build_decoder("llama", tmp_path / "llama")
    model = load(str(path), backend="torch")
    ids = model.encode(TEXT).ids
    target = ids[3]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    want = hook_grid(hf, ids, target)
    assert np.abs(want).max() > 0.01
    np.testing.assert_allclose(trace_grid(model, ids, target), want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(lens_grid(boot_lens(path), ids, target), want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(numpy_grid(load(str(path), backend="numpy"), ids, target), want, atol=1e-5, rtol=0)
