"""Gradients on the torch backend (attncli/hf/backends/torch_grad.py: autograd through transformers' own modules
under hooks) equal the NumPy tape's (attncli/hf/methods/backward.py, float64, itself checked against torch
autograd in test_backward.py), site by site, on GPT-2 and the Llama family."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _trace_reference import d_log_p  # noqa: E402

from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.methods.backward import gradients as numpy_gradients  # noqa: E402
from attncli.hf.backends.torch_grad import gradients  # noqa: E402

EPS32 = 2.0 ** -23
TEXT = "the cat sat on the mat and the dog sat"


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2", "phi3"])
def test_torch_gradients_equal_the_numpy_tapes(tiny_gpt2_dir, tmp_path, kind):
    path = tiny_gpt2_dir if kind == "gpt2" else build_decoder(kind, tmp_path / kind)
    torch_model, numpy_model = load(str(path), backend="torch"), load(str(path), backend="numpy")
    ids = numpy_model.encode(TEXT).ids
    position = len(ids) - 1
    ours, logits = gradients(torch_model, ids, position, d_log_p(5))
    want, want_logits = numpy_gradients(numpy_model, ids, position, d_log_p(5))
    layers = numpy_model.layers
    # torch runs in float32: each value carries float32 rounding through 2 (layers + 1) products and
    # norms forward and as many backward; bound it relative to the largest value of the site
    rel = 64 * EPS32 * (layers + 1)
    np.testing.assert_allclose(logits, want_logits, rtol=0, atol=rel * max(1.0, np.abs(want_logits).max()))
    names = ["embed"] + [f"blocks.{l}.{s}" for l in range(layers) for s in ("resid_pre", "attn.z", "attn.out", "mlp.out")]
    for name in names:
        scale = max(1e-3, np.abs(want[name]).max())
        np.testing.assert_allclose(ours[name], want[name], rtol=0, atol=rel * scale, err_msg=name)


def test_an_encoder_is_refused(tiny_bert_dir):
    model = load(str(tiny_bert_dir), backend="torch")
    with pytest.raises(BadInput, match="pre-norm decoders"):
        gradients(model, [1, 2, 3], 2, lambda x: x)
