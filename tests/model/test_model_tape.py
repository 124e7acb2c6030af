"""Model.tape, the "tape" capability of attncli.model's interface: attn's NumPy pass of a decoder
gives a recorder whose forward is the model's own trace; the torch backend, an encoder and the
built-in LM refuse it by name through the one refusal (attncli.model.refusal)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needed

from attncli.errors import BadInput
from attncli.model import Model, has, refusal

needed("safetensors")
needed("tokenizers")

from attncli.hf import load  # noqa: E402

TEXT = "the cat sat on the mat"


def test_a_numpy_decoder_records_its_own_forward_pass(tiny_gpt2_dir):
    model = load(str(tiny_gpt2_dir), backend="numpy")
    assert has(model, "tape") and isinstance(model, Model)
    ids = list(model.encode(TEXT).ids)
    tape = model.tape(np.float64)
    tape.forward(ids)
    last = len(ids) - 1
    want = model.trace(ids, "logits")["logits"][last]  # (V,)
    got = tape.logits(last)  # (V,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * float(np.abs(want).max()))  # both float64
    again = model.tape(np.float64, [t["W"] for t in tape.layers])  # another tape reusing its weights
    again.forward(ids)
    np.testing.assert_array_equal(again.logits(last), got)


@pytest.mark.parametrize("kind", ["torch", "bert", "builtin"])
def test_other_models_refuse_the_tape_by_name(kind, tiny_gpt2_dir, tiny_bert_dir, tmp_path, monkeypatch):
    if kind == "torch":
        needed("torch")
        model, said = load(str(tiny_gpt2_dir), backend="torch"), "torch backend"
    elif kind == "bert":
        model, said = load(str(tiny_bert_dir), backend="numpy"), "no masked-language-model head"
    else:
        from _attention_fixtures import make_random_attention
        from attncli.tinylm.traced import load_builtin

        monkeypatch.setenv("ATTN_HOME", str(tmp_path))
        make_random_attention("rand", layers=1, heads=2)
        model, said = load_builtin("rand"), "built-in LM"
    assert not has(model, "tape")
    message = refusal(model, "tape", "gradients on a recorded forward pass")
    assert said in message
    with pytest.raises(BadInput) as caught:
        model.tape(np.float64)
    assert str(caught.value) == message
