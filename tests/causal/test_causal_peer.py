"""The peer check: TransformerLens 4 (a TransformerBridge over the same transformers model) gives the
same head-ablation grid as attn's torch trace, attn's NumPy grid (``attn ablate``'s core,
attncli.causal.grids.ablate, batched) and plain transformers forward pre-hooks, within float32 rounding (tests/_tolerance.py), on a
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
from _tolerance import f32_close  # noqa: E402
from _transformer_fixtures import SIZES  # noqa: E402
from attncli.hf import load  # noqa: E402

torch.set_num_threads(1)
# the tiny models' float32 rounding (tests/_tolerance.py): their layers and their widest reduction
DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])
TEXT = "the cat sat on the mat and the dog sat on the"


@pytest.fixture(scope="module")
def grids(tiny_gpt2_dir):
    model = load(str(tiny_gpt2_dir), backend="torch")
    ids = model.encode(TEXT).ids
    target = model.encode(" mat").ids[-1]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_gpt2_dir), attn_implementation="eager").eval()
    return {"attn": trace_grid(model, ids, target), "attn-whole": trace_grid(model, ids, target, resume=False),
            "lens": lens_grid(boot_lens(tiny_gpt2_dir), ids, target), "hooks": hook_grid(hf, ids, target),
            "numpy": numpy_grid(load(str(tiny_gpt2_dir), backend="numpy"), ids, target),
            "scale": logit_scale(model, ids)}


def logit_scale(model, ids) -> float:
    """The size of the logits a grid entry (a change in log p) is computed from: its float32 scale."""
    logits = model.trace(ids, "logits")["logits"]  # (T, vocab)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)  # (T,)
    return float(max(np.abs(logits).max(), np.abs(lse).max()))


def test_the_grid_moves(grids):
    """Some heads move log p(target) by much more than the tolerance, so agreement means something."""
    assert grids["hooks"].shape == (2, 4)
    assert np.abs(grids["hooks"]).max() > 0.05
    assert len(np.unique(np.round(grids["hooks"], 4))) > 4


@pytest.mark.parametrize("way", ["attn", "attn-whole", "lens", "numpy"])
def test_transformer_lens_attn_and_plain_hooks_give_one_grid(grids, way):
    f32_close(grids[way], grids["hooks"], depth=DEPTH, length=WIDTH, scale=grids["scale"])


def test_a_llama_with_grouped_query_attention_agrees_too(tmp_path):
    path = build_decoder("llama", tmp_path / "llama")
    model = load(str(path), backend="torch")
    ids = model.encode(TEXT).ids
    target = ids[3]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    want = hook_grid(hf, ids, target)
    assert np.abs(want).max() > 0.01
    scale = logit_scale(model, ids)
    f32_close(trace_grid(model, ids, target), want, depth=DEPTH, length=WIDTH, scale=scale)
    f32_close(lens_grid(boot_lens(path), ids, target), want, depth=DEPTH, length=WIDTH, scale=scale)
    f32_close(numpy_grid(load(str(path), backend="numpy"), ids, target), want, depth=DEPTH, length=WIDTH, scale=scale)
