"""Every model class implements the written model interface (attncli/model/interface.py): it is a
``Model`` (the runtime-checkable Protocol), its ``can`` is what it is, ``why_not`` says why for
each capability it lacks, the methods behind its capabilities work (checked against one another:
a resumed pass against the whole pass, the batched rerun against the trace, the unembedding and the
final norm's parts against the logits), and a method behind a missing capability refuses with the
one sentence of ``refusal``."""

from __future__ import annotations

import functools
import shlex

import numpy as np
import pytest

from conftest import needed
from _llama_fixtures import build_decoder
from _trace_reference import build_mlm
from _attention_fixtures import widest
from _tolerance import f32_close, f32_size
from attncli.errors import BadInput
from attncli.hf import load
from attncli.model import CAPABILITIES, Model, has, refusal, require
from attncli.io.textio import texts_of
from attncli.model.trace import Intervention, site

TEXT = "the cat sat on the mat"
NUMPY_PASS = {"progress", "explain", "precision"}  # attn's NumPy pass: reports its layers, keeps q and k, float32/64
DECODER = {"trace", "resume", "batch", "rerun", "unembed", "dla", "output_weight", "lens", "cache", "grad", "qk"}


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_bert_dir, tiny_gpt2_dir):
    base = tmp_path_factory.mktemp("iface")

    @functools.lru_cache(maxsize=None)
    def get(kind: str, backend: str = "numpy"):
        if kind == "builtin":
            from _attention_fixtures import make_random_attention
            from attncli.tinylm.traced import load_builtin

            make_random_attention("rand", layers=2, heads=4)
            return load_builtin("rand")
        if kind == "gpt2":
            path = tiny_gpt2_dir
        elif kind == "bert":  # no MLM head
            path = tiny_bert_dir
        elif kind == "bert-mlm":
            path = build_mlm("bert", base / kind)
        elif kind == "t5":
            from _seq2seq_fixtures import build_t5

            path = build_t5(base / kind)
        else:
            path = build_decoder(kind, base / kind)
        return load(str(path), backend=backend)
    return get


CASES = [  # kind, backend, capabilities it must have, capabilities it must lack
    ("gpt2", "numpy", DECODER | NUMPY_PASS, {"mlm", "stacks", "pairs"}),
    ("llama", "numpy", DECODER | NUMPY_PASS, {"mlm", "stacks", "pairs"}),
    ("bert", "numpy", {"trace", "resume", "batch", "rerun", "output_weight", "qk", "pairs", *NUMPY_PASS},
     {"unembed", "dla", "mlm", "next_token", "lens", "cache", "stacks", "grad"}),
    ("bert-mlm", "numpy", {"trace", "resume", "batch", "rerun", "unembed", "mlm", "next_token", "output_weight", "grad",
                          *NUMPY_PASS},
     {"dla", "lens", "cache", "stacks"}),
    ("gpt2", "torch", {"trace", "resume", "qk", "next_token", "grad"},
     {"batch", "rerun", "unembed", "dla", "output_weight", "lens", "cache", "mlm", "stacks", *NUMPY_PASS}),
    ("bert-mlm", "torch", {"trace", "resume", "mlm", "next_token"}, {"rerun", "dla", "unembed", "lens", *NUMPY_PASS}),
    ("builtin", "builtin", {"trace", "resume", "rerun", "unembed", "dla", "output_weight", "lens", "next_token",
                          "progress"}, {"batch", "mlm", "stacks", "cache", "explain", "precision"}),
    ("t5", "torch", {"stacks"}, {"trace", "resume", "batch", "rerun", "unembed", "dla", "qk", "mlm", "next_token",
                         *NUMPY_PASS}),
]


def _closeness(model, h: np.ndarray):
    """A check that two paths through ``model`` agree: to float64 rounding (1e-12 relative) where attn's NumPy
    pass runs in float64, else (the built-in LM, a float32 Llama, the torch backend) to float32 rounding at
    the model's depth and widest reduction (tests/_tolerance.py)."""
    if model.backend == "numpy" and h.dtype == np.float64:
        def close(got, want, scale=None):
            scale = float(np.abs(want).max()) if scale is None else scale
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, scale))
        return close
    size = (model.layers, widest(model.att.config)) if hasattr(model, "att") else f32_size(model)
    return lambda got, want, scale=None: f32_close(got, want, *size, scale=scale)


def _check_methods(model) -> None:
    """Each capability's methods, against the model's own traced pass."""
    enc = model.encode(TEXT)
    ids = list(enc.ids)
    T, last = len(ids), len(ids) - 1
    piece = model.pieces(" cat")[0]
    assert model.vocab_id(model.token_strings([piece])[0]) == (piece if piece < model.vocab_size else None)
    assert model.vocab_id("no such entry \u2603\u2603") is None
    assert model.token_texts(ids) == texts_of(enc)  # each id's text, as the encoding's (what the views draw)
    if not has(model, "trace"):
        return
    keep = ["blocks.*.resid_pre", "blocks.*.attn.z", "blocks.*.attn.out", f"blocks.{model.layers - 1}.resid_post",
            "final_norm"] + (["logits"] if has(model, "next_token") else [])
    tr = model.trace(ids, keep)
    h = tr["final_norm"]  # (T, d)
    close = _closeness(model, h)  # two paths through the same model
    if has(model, "resume"):
        layer = model.layers - 1
        again = model.trace(ids, "final_norm", start=(layer, tr[site(layer, "resid_pre")]))
        close(again["final_norm"], h)
    if has(model, "batch"):
        (one,) = model.trace_batch([enc], "final_norm")
        close(one["final_norm"], h)
    if has(model, "rerun"):  # no intervention, and head 0 of layer 0 zeroed, against the trace
        zeroed = [Intervention(site(0, "attn.z"), head=0)]
        rows = model.rerun(ids, 0, tr[site(0, "resid_pre")], [[], zeroed], last)  # (2, d)
        close(rows[0], h[last])
        want = model.trace(ids, "final_norm", interventions=zeroed)["final_norm"][last]
        close(rows[1], want)
        assert not np.allclose(rows[1], rows[0])
    if has(model, "unembed"):
        close(model.unembed(h), tr["logits"])
    if has(model, "dla"):
        kind, w, b, eps = model.final_norm_parts()
        x = tr[site(model.layers - 1, "resid_post")].astype(np.float64)  # (T, d)
        if kind == "layer":
            x = x - x.mean(-1, keepdims=True)
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w + (0 if b is None else b)
        close(y, h)
        logits = tr["logits"]
        bias = model.unembedding_bias()  # (V,) or None
        close(h @ model.unembedding().T + (0 if bias is None else bias), logits)
    if has(model, "output_weight"):  # attn.out = sum_h z_h W_O^h + b_O: the same b_O at every position
        w_o = model.output_weight(0).astype(np.float64)  # (h d_head, d)
        z = tr[site(0, "attn.z")].astype(np.float64).reshape(T, -1)  # (T, h d_head)
        bias = tr[site(0, "attn.out")] - z @ w_o  # (T, d)
        close(bias, np.broadcast_to(bias[0], bias.shape), scale=float(np.abs(tr[site(0, "attn.out")]).max()))  # at attn.out's size


@pytest.mark.parametrize("kind, backend, yes, no", CASES, ids=[f"{k}-{b}" for k, b, *_ in CASES])
def test_every_model_is_a_model_and_its_capabilities_work(models, kind, backend, yes, no):
    if backend == "torch" or kind == "t5":
        needed("torch")
        needed("transformers")
    model = models(kind, backend)
    assert isinstance(model, Model)
    assert model.can <= set(CAPABILITIES)
    assert yes <= model.can, yes - model.can
    assert not (no & model.can), no & model.can
    for cap in CAPABILITIES:  # a reason exactly for what it lacks
        assert (model.why_not(cap) == "") == (cap in model.can), cap
    assert model.backend == backend and model.layers > 0 and model.heads % model.kv_heads == 0
    _check_methods(model)


@pytest.mark.parametrize("kind, backend, cap, call", [
    ("gpt2", "torch", "dla", lambda m: m.unembedding()),
    ("gpt2", "torch", "rerun", lambda m: m.rerun([1, 2], 0, np.zeros((2, 4)), [[]], 1)),
    ("bert", "numpy", "dla", lambda m: m.final_norm_parts()),
    ("bert", "numpy", "unembed", lambda m: m.unembed(np.zeros(4))),
    ("t5", "torch", "batch", lambda m: m.trace_batch([])),
])
def test_a_missing_capability_refuses_with_the_one_sentence(models, kind, backend, cap, call):
    if backend == "torch":
        needed("torch")
    model = models(kind, backend)
    assert not has(model, cap)
    with pytest.raises(BadInput) as info:
        call(model)
    message = str(info.value)
    assert CAPABILITIES[cap] in message and model.why_not(cap) in message and f"'{model.name}'" in message
    with pytest.raises(BadInput, match="needs"):
        require(model, cap, "this")
    assert refusal(model, cap, "this").startswith(f"this needs {CAPABILITIES[cap]}: model ")


def test_has_refuses_an_unknown_capability(models):
    with pytest.raises(KeyError, match="no capability 'flying'"):
        has(models("gpt2"), "flying")


def test_the_cli_and_explore_refuse_dla_on_torch_with_the_same_sentence(models, tiny_gpt2_dir):
    """attn dla --backend torch and explore's D: the one sentence, built by the model interface."""
    needed("torch")
    from typer.testing import CliRunner

    from attncli.cli.main import app
    from attncli.explore.causal_view import refusal as explore_refusal

    model = models("gpt2", "torch")
    sentence = explore_refusal(model, "dla")
    assert sentence == refusal(model, "dla", "direct logit attribution")
    r = CliRunner().invoke(app, shlex.split(f"dla '{TEXT}' --transformer {tiny_gpt2_dir} --target-id 3 --backend torch"),
                           env={"COLUMNS": "1000"})
    assert r.exit_code == 2
    assert sentence.replace(f"'{model.name}'", "") in " ".join(r.output.split()).replace(f"'{tiny_gpt2_dir}'", "")


@pytest.mark.parametrize("kind, backend", sorted({(kind, backend) for kind, backend, _, _ in CASES}))
def test_progress_is_had_by_the_trace_that_reports_its_layers(models, kind, backend):
    """``progress`` (a bar that advances per layer) is had exactly by the models whose trace takes an
    ``on_layer`` callback: callers read the capability, not the trace's signature."""
    import inspect

    model = models(kind, backend)
    takes = has(model, "trace") and "on_layer" in inspect.signature(model.trace).parameters
    assert has(model, "progress") == takes
