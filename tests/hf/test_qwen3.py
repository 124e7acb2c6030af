"""Qwen3 (attncli/hf/families/qwen3.py): Llama's pass with a per-head RMSNorm on q and k before RoPE,
its own head_dim, biases with attention_bias, sliding windows per layer_types. Against transformers'
Qwen3 (eager) on a tiny random model (tests/_llama_fixtures.py, "qwen3": q_norm and k_norm drawn,
head_dim 12 apart from 32 / 4, a window of 4 on layer 1): every hidden state within float32 rounding
(the attentions and logits: tests/hf/test_llama.py's family tests, parametrized over qwen3; the
gradients: tests/hf/test_backward.py against torch autograd in float64); the description the methods
read (q_norm, k_norm), its defaults against Qwen3Config's own, its windows against Qwen3Config's
layer_types, and the circuit's edge-patched pass through the q / k norms.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")
torch = needed("torch")
transformers = needed("transformers")

from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.causal.circuit import record_tape  # noqa: E402
from attncli.hf.methods.backward import DecoderTape  # noqa: E402
from attncli.hf.checks.config_defaults import DERIVED  # noqa: E402
from attncli.hf.methods.edges import edge_mask, edge_patched_logits  # noqa: E402
from attncli.hf.families import qwen3, registry  # noqa: E402

torch.set_num_threads(1)
TEXT = "the cat sat on the mat and the dog sat on the log"
CORRUPT = "the dog ran to the log and the cat ran to the mat"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_decoder("qwen3", tmp_path_factory.mktemp("qwen3") / "qwen3")


@functools.lru_cache(maxsize=None)
def reference(path: str):
    return transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                             dtype=torch.float32).eval()


def test_the_registry_runs_it_as_its_own_family(built):
    model = load(str(built), backend="numpy")
    assert model.backend == "numpy" and isinstance(model.arch, qwen3.Qwen3)
    verdict = registry.judge(model.config)
    assert verdict.family.module is qwen3 and verdict.numpy is None and verdict.neither is None
    assert "qwen3" in registry.NUMPY_MODEL_TYPES and "qwen3" in registry.DECODER_FAMILIES


def test_every_hidden_state_equals_transformers(built):
    """The residual stream after every layer and the final norm's output, within float32 rounding."""
    model = load(str(built), backend="numpy")
    ids = model.encode(TEXT).ids
    tr = model.trace(ids, ["embed", "blocks.*.resid_post", "final_norm"])
    with torch.no_grad():
        hs = reference(str(built))(torch.tensor([ids]), output_hidden_states=True).hidden_states  # L + 1
    assert len(hs) == model.layers + 1
    ours = [tr["embed"]] + [tr[f"blocks.{l}.resid_post"] for l in range(model.layers - 1)] + [tr["final_norm"]]
    for l, (got, want) in enumerate(zip(ours, hs)):  # transformers' last is through the final norm already
        f32_close(got, want[0].double().numpy(), *f32_size(built), what=f"hidden state {l}")


def test_the_description_names_the_q_and_k_norms(built):
    model = load(str(built), backend="numpy")
    parts = model.arch.parts
    assert parts.qk_norm == "rms" and parts.position == "rotary" and parts.place == "pre" and parts.norm_offset == 0
    assert parts.roles["q_norm"].at(1) == "layers.1.self_attn.q_norm" and parts.roles["k_norm"].shape == (12,)
    assert parts.d_head == 12 and parts.kv_heads == 2 and parts.windows == (None, 4)
    assert all(parts.roles[n].bias for n in "qkvo") and not parts.roles["down"].bias  # attention_bias: q, k, v, o
    assert qwen3.expected(model.config)["layers.0.self_attn.k_norm.weight"] == (12,)


def test_its_pass_reads_the_q_and_k_norms(built, tmp_path):
    """The norms bite: their weights set to 1 change the attentions (and the pass with them
    equals transformers' with them: test_llama.py's family test)."""
    from safetensors.numpy import load_file, save_file
    import shutil

    dst = tmp_path / "plain"
    shutil.copytree(built, dst)
    tensors = load_file(str(built / "model.safetensors"))
    for name in tensors:
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            tensors[name] = np.ones_like(tensors[name])
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    enc_ids = load(str(built), backend="numpy").encode(TEXT)
    drawn = load(str(built), backend="numpy").attentions(enc_ids)
    plain = load(str(dst), backend="numpy").attentions(enc_ids)
    assert np.abs(drawn - plain).max() > 1e-2


def test_its_defaults_are_qwen3configs_own():
    """Every default the family reads is transformers' Qwen3Config's (a DERIVED one: None there)."""
    declared = {f.name: f.default for f in dataclasses.fields(transformers.Qwen3Config)
                if f.default is not dataclasses.MISSING}
    for key, ours in qwen3.DEFAULTS.items():
        assert key in declared, key
        assert declared[key] is None if ours is DERIVED else declared[key] == ours, (key, ours, declared[key])


@pytest.mark.parametrize("settings", [
    {},
    {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 2},
    {"use_sliding_window": True, "sliding_window": 7, "max_window_layers": 0},
    {"use_sliding_window": False, "sliding_window": 5, "max_window_layers": 1},
    {"use_sliding_window": True, "sliding_window": 3,
     "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]},
])
def test_windows_per_layer_are_qwen3configs(settings):
    """The window of each layer as Qwen3Config's __post_init__ makes layer_types and sliding_window."""
    config = {"model_type": "qwen3", "num_hidden_layers": 4, **settings}
    ref = transformers.Qwen3Config(num_hidden_layers=4, **settings)
    want = tuple(ref.sliding_window if kind == "sliding_attention" else None for kind in ref.layer_types)
    assert qwen3.parts(config).windows == want
    assert registry.windows(config, 4) == list(want)


def test_its_config_is_checked():
    assert qwen3.unsupported({"model_type": "qwen3", "num_hidden_layers": 2}) is None
    assert qwen3.unsupported({"model_type": "qwen3", "hidden_act": "swiglu"}) == "hidden_act 'swiglu'"
    with pytest.raises(TypeError, match="attention_bias"):
        qwen3.unsupported({"model_type": "qwen3", "attention_bias": "yes"})


def test_an_edge_patched_pass_reads_the_q_and_k_norms(built):
    """attn circuit's edge-patched forward (hf/methods/edges.py) on Qwen3: every edge kept is the clean pass,
    none the corrupted one (each head's q and k made from its own inputs, through the norms)."""
    model = load(str(built), backend="numpy")
    clean, corrupt = model.encode(TEXT).ids, model.encode(CORRUPT).ids
    n = min(len(clean), len(corrupt))
    clean, corrupt = clean[:n], corrupt[:n]
    tapes = [record_tape(model, ids) for ids in (clean, corrupt)]
    ones, pos = np.ones(edge_mask(model.layers, model.heads).shape), n - 1
    for w, ids in ((ones, clean), (0 * ones, corrupt)):
        want = model.trace(list(ids), "logits")["logits"][pos]  # the float32 pass
        f32_close(edge_patched_logits(*tapes, w, pos), want, *f32_size(built))


def test_each_heads_input_gradients_go_through_the_q_and_k_norms(built):
    """DecoderTape.backward(inputs=True) on Qwen3: each head's q and k input gradients (back through
    RoPE, the head's own RMSNorm and its rows of W_Q / W_K) add up to d resid_pre through the layer's
    queries and keys (qk_in, the layer's gradient made whole), and with the values' to d resid_pre."""
    model = load(str(built), backend="numpy")
    ids = model.encode(TEXT).ids
    tape = DecoderTape(model)
    tape.forward(ids)
    full = tape.backward(len(ids) - 1, np.eye(model.config["vocab_size"])[7], inputs=True)
    for l in range(model.layers):
        qk = full[f"blocks.{l}.head_in.q"].sum(0) + full[f"blocks.{l}.head_in.k"].sum(0)  # (T, d)
        np.testing.assert_allclose(qk, full[f"blocks.{l}.qk_in"], rtol=0, atol=1e-12 * max(1.0, np.abs(qk).max()))
        readers = qk + full[f"blocks.{l}.head_in.v"].sum(0) + full[f"blocks.{l}.resid_mid"]
        np.testing.assert_allclose(readers, full[f"blocks.{l}.resid_pre"], rtol=0, atol=1e-12)
