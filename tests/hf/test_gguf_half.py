"""A bfloat16 / float16 safetensors checkpoint stays mapped in its own dtype: a pass widens one
layer at a time, and keeps at most one layer's float32 tensors (weights.py's _kept), with the
same numbers as before (a widened tensor is the same whether kept or widened again)."""

from __future__ import annotations

import numpy as np
import pytest

from _llama_fixtures import build_decoder
from conftest import needed


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_checkpoint_keeps_one_layer_widened(tmp_path, dtype):
    needed("torch")
    needed("transformers")
    from attncli.hf.loader import load

    build_decoder("llama", tmp_path, dtype=dtype)
    model = load(str(tmp_path), backend="numpy")
    w = model.arch.w.weights if hasattr(model.arch.w, "weights") else model.arch.w
    enc = model.encode("the cat sat on the mat")
    first = model.attentions(enc)
    layer, widened = w._widened
    assert layer is not None and widened, "a half-precision pass widens its layers"
    assert {key.split(".")[1] for key, _ in widened} == {str(model.layers - 1)}  # "layers.N.": the last only
    assert all(t.ndim < 2 for t in w._cache.values())  # no widened matrix kept outside the layer
    np.testing.assert_array_equal(model.attentions(enc), first)  # widened again: the same numbers
