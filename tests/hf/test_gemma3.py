"""Gemma 3 (attncli/hf/families/gemma3.py) against transformers' Gemma3ForCausalLM itself (eager
attention): a tiny random model of six layers whose every third is global (the others local, a
window of 3 tokens shorter than the texts), grouped-query attention, head_dim apart from
hidden / heads, its four norms a layer and q/k norms moved off their init so they bite; from
safetensors and from GGUF (transformers reading the same file), attentions, hidden states and
logits within float32 rounding (tests/_tolerance.py). The Llama family's shared tests run over
the fixture "gemma3" too (tests/hf/test_llama.py, test_config_drop.py, test_config_defaults.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

needed("tokenizers")
needed("safetensors")
torch = needed("torch")
transformers = needed("transformers")

from typer.testing import CliRunner  # noqa: E402

from _gguf_fixtures import write_gguf  # noqa: E402
from _llama_fixtures import build_decoder  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.families import gemma3  # noqa: E402

torch.set_num_threads(1)
runner = CliRunner()
TEXTS = ["the cat sat on the mat and the dog sat on the log", "She sells sea shells, said the paper in 2017!"]
SIX = dict(num_hidden_layers=6, num_key_value_heads=2, layer_types=None, sliding_window_pattern=3,
           rope_parameters=None, rope_theta=3000.0, rope_local_base_freq=40.0)  # layers 2 and 5 global


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base, built = tmp_path_factory.mktemp("gemma3"), {}

    def build(name: str, **changes) -> Path:  # one folder per name
        if name not in built:
            built[name] = build_decoder("gemma3", base / name, **{**SIX, **changes})
        return built[name]
    return build


def reference(path: Path, ids: list[int]):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager",
                                                              dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    return model, out


def allowed(T: int, window: int | None) -> np.ndarray:
    i, j = np.arange(T)[:, None], np.arange(T)[None]
    return (j <= i) & ((i - j < window) if window else True)


def test_six_layers_of_both_kinds_equal_transformers_attentions_hidden_states_and_logits(folders):
    path = folders("six")
    config = json.loads((path / "config.json").read_text())
    assert config["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"] * 2
    model = load(str(path), backend="numpy")
    assert model.layers == 6 and model.arch.windows == [3, 3, None, 3, 3, None]
    size = f32_size(path)
    for text in TEXTS:
        ids = model.encode(text).ids
        T = len(ids)
        assert T > 3 * 3  # the window bites
        ref, out = reference(path, ids)
        logits, att = model.logits_and_attentions(ids)  # (T, V), (L, h, T, T)
        want = np.stack([a[0].double().numpy() for a in out.attentions])
        f32_close(att, want, *size, per_element=True, what=f"attentions of {text!r}")
        for l, window in enumerate(model.arch.windows):
            assert np.all(att[l][:, ~allowed(T, window)] == 0.0)
        assert not np.allclose(att[0], att[2], atol=0.05)  # fixed: a local and a global layer differ in kind
        f32_close(logits, out.logits[0].double().numpy(), *size, what="logits")
        stream = model.residual_stream(ids)  # (L + 1, T, d): the embeddings, then each layer's output
        hs = [h[0].double().numpy() for h in out.hidden_states]  # the last one through the final norm
        f32_close(stream[:-1], np.stack(hs[:-1]), *size, what="hidden states")
        with torch.no_grad():
            normed = ref.model.norm(torch.tensor(stream[-1], dtype=torch.float32)).double().numpy()
        f32_close(normed, hs[-1], *size, what="the last hidden state")


def test_its_defaults_and_nulls_are_gemma3textconfigs_own():
    """Every default the family reads is Gemma3TextConfig's (and layer_types, None there, is made from
    the pattern of 6 as its __post_init__ makes it); a null is accepted exactly where Gemma3TextConfig
    accepts one; one RoPE base per layer kind."""
    import dataclasses

    cls = transformers.Gemma3TextConfig
    declared = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    for key, ours in gemma3.DEFAULTS.items():
        assert key in declared, key
        assert declared[key] == ours and type(declared[key]) is type(ours), key
    assert cls.default_theta == {"global": gemma3.DEFAULT_THETA["full_attention"],
                                 "local": gemma3.DEFAULT_THETA["sliding_attention"]}
    assert declared["layer_types"] is None and cls().layer_types == gemma3.layer_types({"model_type": "gemma3_text"})
    assert cls(num_hidden_layers=4, layer_types=None).layer_types == gemma3.layer_types(
        {"model_type": "gemma3_text", "num_hidden_layers": 4, "layer_types": None})
    small = dict(vocab_size=50, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=8,
                 num_key_value_heads=2)
    for key in gemma3.DEFAULTS:
        try:
            cls.from_dict({**small, key: None})
            accepted = True
        except Exception:
            accepted = False
        assert (key in gemma3.NULLABLE) == accepted, (key, accepted)
        if not accepted:
            with pytest.raises(TypeError, match=f"'{key}'"):
                gemma3.field({"model_type": "gemma3_text", key: None}, key)


def test_final_logit_softcapping_caps_the_logits_as_transformers_does(folders):
    path = folders("capped", final_logit_softcapping=0.7)
    model = load(str(path), backend="numpy")
    ids = model.encode(TEXTS[0]).ids
    logits, _ = model.logits_and_attentions(ids)
    _, out = reference(path, ids)
    f32_close(logits, out.logits[0].double().numpy(), *f32_size(path))
    assert np.abs(logits).max() < 0.7
    assert np.abs(logits).max() > 0.5  # fixed: the cap bites (the uncapped logits are larger)


def test_linear_rope_scaling_reaches_the_global_layers_only(folders):
    path = folders("scaled", rope_scaling={"rope_type": "linear", "factor": 4.0})
    model = load(str(path), backend="numpy")
    ids = model.encode(TEXTS[1]).ids
    _, att = model.logits_and_attentions(ids)
    _, out = reference(path, ids)
    f32_close(att, np.stack([a[0].double().numpy() for a in out.attentions]), *f32_size(path), per_element=True)
    np.testing.assert_allclose(model.arch.parts.inv_freq[2] * 4.0, load(str(folders("six")), backend="numpy").arch.parts.inv_freq[2])
    np.testing.assert_array_equal(model.arch.parts.inv_freq[0], load(str(folders("six")), backend="numpy").arch.parts.inv_freq[0])


def _edited(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((src / "config.json").read_text())
    config.update(changes)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("changes, words", [
    ({"query_pre_attn_scalar": 0}, "'query_pre_attn_scalar' (0"),
    ({"query_pre_attn_scalar": "big"}, "'query_pre_attn_scalar' ('big'"),
    ({"final_logit_softcapping": -1.0}, "'final_logit_softcapping' (-1.0"),
    ({"final_logit_softcapping": 30}, "'final_logit_softcapping' (30: transformers' Gemma3TextConfig needs a float"),
    ({"query_pre_attn_scalar": 256.0}, "'query_pre_attn_scalar' (256.0: transformers' Gemma3TextConfig needs an integer"),
    ({"sliding_window": 3.0}, "'sliding_window' (3.0"),
    ({"sliding_window": 0}, "'sliding_window' (0"),
    ({"sliding_window": None}, "'sliding_window' (null"),
    ({"layer_types": None, "sliding_window_pattern": 0}, "'sliding_window_pattern' (0"),
    ({"layer_types": ["sliding_attention"] * 5 + ["chunked_attention"]}, "'layer_types'"),
    ({"layer_types": ["full_attention"] * 3}, "'layer_types'"),
    ({"rope_local_base_freq": -5.0, "rope_parameters": None}, "rope_theta' (-5.0"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "factor": 2.0}}}, "rope type 'yarn'"),
    ({"rope_parameters": {"full_attention": {"rope_type": "linear", "rope_theta": 10.0}}}, "'factor' (None"),
    ({"rope_parameters": [1, 2]}, "'rope_parameters'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}, "rope_scaling": {}}, "'rope_scaling' (beside"),
    ({"hidden_activation": "relu6"}, "hidden_activation 'relu6'"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ({"num_attention_heads": 3, "num_key_value_heads": 1}, "not a multiple of num_attention_heads"),
])
def test_configs_it_cannot_run_are_refused_by_name(changes, words, folders, tmp_path):
    path = _edited(folders("six"), tmp_path / "m", **changes)
    result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.stderr.split())
    assert "the numpy backend cannot run" in text and words in text and "Traceback" not in result.output, text


@pytest.mark.parametrize("qtype, d", [("F32", 64), ("Q4_K", 256)])
def test_a_gemma3_gguf_of_both_layer_kinds_equals_transformers_reading_the_same_file(qtype, d, tmp_path):
    """Six layers: transformers reads a GGUF's layer kinds from Gemma3TextConfig's pattern (every
    sixth global; the file holds the window, not the pattern) and its local RoPE base from the
    default (10000; the file's rope.freq_base is the global one's), as attn does."""
    needed("gguf")
    write_gguf(tmp_path / "m.gguf", "gemma3", qtype, d=d, inner=d, layers=6, tied=True)
    ours = load(str(tmp_path / "m.gguf"))
    assert ours.model_type == "gemma3_text" and ours.arch.windows == [3] * 5 + [None]
    assert ours.arch.d_head == 2 * d // 4 and ours.arch.eps == pytest.approx(1e-6)
    ids = ours.encode("hello world, or hell o world").ids
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                            attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    logits, att = ours.logits_and_attentions(ids)
    size = f32_size(ref)
    f32_close(att, np.stack([a[0].numpy() for a in out.attentions]), *size, per_element=True)
    f32_close(logits, out.logits[0].numpy(), *size)
    norm = ref.model.layers[0].post_feedforward_layernorm.weight.detach().double().numpy()
    np.testing.assert_array_equal(ours.arch.w.get("layers.0.post_feedforward_layernorm.weight"), norm)  # w, not 1 + w


@pytest.mark.parametrize("argv, words", [
    (["dla", "the dog sat on the", "--target-id", "5"], "caps its logits (final_logit_softcapping 0.7)"),
])
def test_splits_of_the_stream_that_would_leave_out_the_output_norms_are_refused(argv, words, folders):
    """DLA where the logits are capped is refused by name (exit 2): no sum of parts gives a capped
    logit. attribute, qk, the contributions, DLA and circuit run: gradients go through the norms
    (tests/hf/test_backward.py), the splits freeze them (test_qk_attribution.py, test_contributions.py,
    the DLA test here), and a circuit's head writes what its run's post-attention norm makes of it
    (tests/causal/test_circuit_gemma3.py)."""
    path = str(folders("six"))
    result = runner.invoke(app, argv + ["--transformer", str(folders("capped", final_logit_softcapping=0.7))
                                        if argv[0] == "dla" else path])
    assert result.exit_code == 2, result.output
    text = " ".join(result.stderr.split())
    assert words in text and "post_attention" not in text and "Traceback" not in result.output, text
    for runs in (["attribute", "the dog sat on the", "the dog on sat the", "--target-id", "5"],
                 ["matrix", "the dog sat on the", "--show", "alti"],
                 ["qk", "the dog sat on the", "--layer", "1", "--head", "0", "--query", "4", "--key", "2"],
                 ["dla", "the dog sat on the", "--target-id", "5"],
                 ["circuit", "the dog sat on the", "the dog on sat the", "--target-id", "5"]):
        done = runner.invoke(app, runs + ["--transformer", path, "--json"])
        assert done.exit_code == 0, (runs, done.output)


def test_dla_splits_the_logit_through_the_frozen_output_norms_as_transformers_modules_give_it(folders):
    """Direct logit attribution on Gemma 3: each head's z_h W_O^h through the norm on the attention's
    output frozen at the layer's whole output o (and the final norm frozen), against the same
    formula on transformers' own float64 tensors (o_proj's input and output, the final norm's input):
    the heads' parts leave no remainder (attn_bias 0 without an attention bias) and add up to the logit."""
    from attncli.causal.dla import dla
    from attncli.causal.target import Target

    path = folders("six")
    model = load(str(path), backend="numpy")
    ids = model.encode(TEXTS[0]).ids
    i = len(ids) - 1
    res = dla(model, ids, Target(i, 7, "x", 11, "y"))
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager",
                                                            dtype=torch.float64).eval()
    seen = {}
    hooks = [layer.self_attn.o_proj.register_forward_hook(
        lambda m, args, out, l=l: seen.update({("z", l): args[0][0, i], ("o", l): out[0, i]}))
        for l, layer in enumerate(ref.model.layers)]
    hooks.append(ref.model.norm.register_forward_pre_hook(lambda m, args: seen.update(x=args[0][0, i])))
    with torch.no_grad():
        ref(torch.tensor([ids]))
        for h in hooks:
            h.remove()
        head = ref.lm_head.weight
        u = head[7] - head[11]  # (d,)
        norm = ref.model.norm
        final = (1.0 + norm.weight) / torch.sqrt(seen["x"].pow(2).mean() + norm.eps)  # (d,) the frozen final norm
        H, dh = model.heads, model.arch.d_head
        want = np.zeros((model.layers, H))
        for l, layer in enumerate(ref.model.layers):
            n = layer.post_attention_layernorm
            o = seen[("o", l)]
            frozen = (1.0 + n.weight) / torch.sqrt(o.pow(2).mean() + n.eps)  # (d,) N's linear part at o
            w_o = layer.self_attn.o_proj.weight.T.reshape(H, dh, -1)  # (h, d_head, d)
            by_head = torch.einsum("hk,hkd->hd", seen[("z", l)].reshape(H, dh), w_o)  # (h, d)
            want[l] = ((by_head * frozen * final) @ u).numpy()
    size = f32_size(path)
    f32_close(res["heads"], want, *size, scale=float(np.abs(want).max()))
    f32_close(res["attn_bias"], np.zeros(model.layers), *size, scale=float(np.abs(want).max()))
    f32_close(res["sum"], res["logit"], *size, scale=float(np.abs(res["heads"]).sum()))
    f32_close(res["per_token"].sum(axis=-1), res["heads"], *size, scale=float(np.abs(want).max()))


@pytest.mark.parametrize("key, value, words", [
    ("gemma3.attention.sliding_window", (float("nan"), "FLOAT32"), "is not a whole number"),
    ("gemma3.attention.sliding_window", (0, "UINT32"), "is outside"),
    ("gemma3.attention.key_length", (-4, "INT32"), "is outside"),
    ("gemma3.attention.key_length", ("big", "STRING"), "is not a whole number"),
])
def test_a_gemma3_gguf_with_garbled_metadata_is_damage_naming_the_key(key, value, words, tmp_path):
    """A stranger's GGUF: the keys only Gemma 3 reads are checked as every other count (gguf_check),
    damage naming the key (exit 1), never a traceback."""
    needed("gguf")
    write_gguf(tmp_path / "m.gguf", "gemma3", "F32", layers=6, tied=True, meta={key: value})
    result = runner.invoke(app, ["matrix", "hello", "--transformer", str(tmp_path / "m.gguf")])
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert "damaged" in text and key in text and words in text and "Traceback" not in result.output, text


def build_multimodal(directory: Path) -> Path:
    """A tiny random Gemma3ForConditionalGeneration (model_type gemma3): SIX's text decoder in its
    text_config, a one-layer SigLIP vision tower and the projector beside it, norms moved off their
    init as build_decoder moves them; saved with the same tokenizer."""
    from _llama_fixtures import BASE, KINDS, _seed, build_tokenizer

    tokenizer = build_tokenizer()
    _seed()
    text = transformers.Gemma3TextConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                         eos_token_id=tokenizer.eos_token_id, **{**BASE, **KINDS["gemma3"][2], **SIX})
    vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_a_multimodal_gemma3_s_text_decoder_runs_on_numpy_and_equals_transformers(tmp_path):
    """model_type gemma3 (a Gemma3Config, its decoder in text_config, its weights under
    language_model.model.*): attn's NumPy pass of the text decoder, the vision tower left unread,
    equals transformers' Gemma3ForConditionalGeneration on the same text (no image)."""
    from attncli.hf.families import registry

    path = build_multimodal(tmp_path / "mm")
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "gemma3" and "vision_config" in config
    assert registry.judge(config).numpy is None
    model = load(str(path), backend="numpy")
    assert model.layers == 6 and model.arch.windows == [3, 3, None, 3, 3, None]
    assert model.vocab_size == config["text_config"]["vocab_size"] and model.model_type == "gemma3_text"
    ref = transformers.Gemma3ForConditionalGeneration.from_pretrained(str(path), attn_implementation="eager",
                                                                     dtype=torch.float32).eval()
    size = f32_size(config["text_config"])
    for text in TEXTS:
        ids = model.encode(text).ids
        logits, att = model.logits_and_attentions(ids)  # (T, V), (L, h, T, T)
        with torch.no_grad():
            out = ref(input_ids=torch.tensor([ids]), output_attentions=True)
        f32_close(att, np.stack([a[0].double().numpy() for a in out.attentions]), *size, per_element=True,
                  what=f"attentions of {text!r}")
        f32_close(logits, out.logits[0].double().numpy(), *size, what=f"logits of {text!r}")
    config["text_config"] = []
    assert "text_config" in registry.judge(config).numpy  # garbled: transformers' path, saying why
