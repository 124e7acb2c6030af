"""The torch backend's traced pass (attncli/hf/backends/torch_trace.py) against transformers itself:
every kept site of BERT-like encoders, GPT-2 and the Llama family (GQA, sliding windows, fused
qkv, partial rotary) equals what the eager model returns (``output_attentions``,
``output_hidden_states``, logits) while the traced model runs SDPA, the kept rows made in chunks as
the whole; interventions equal the same
slice replaced by a hand-written hook; ``start`` equals the full pass. Tiny random models.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import needed

torch = needed("torch")
transformers = needed("transformers")
needed("tokenizers")

from _llama_fixtures import build_decoder  # noqa: E402
from _transformer_fixtures import BUILDERS, SIZES, build_opt  # noqa: E402
from _tolerance import f32_close  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.trace import Intervention  # noqa: E402

torch.set_num_threads(1)
# the tiny models' float32 rounding (tests/_tolerance.py): their layers and their widest reduction
DEPTH, WIDTH = SIZES["layers"], max(SIZES["hidden"], SIZES["intermediate"])
TEXT = "the cat sat on the mat and the dog sat on the log"
ENCODERS = ("bert", "roberta", "electra", "distilbert")
DECODERS = ("gpt2", "llama", "llama3", "llama-bias", "mistral", "qwen2", "gemma", "phi3")
WINDOWS = {"mistral": [3, 3], "qwen2": [None, 4], "phi3": [5, 5]}  # per layer, as _llama_fixtures builds them


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("torch-trace")

    @functools.lru_cache(maxsize=None)
    def build(kind: str):
        path = base / kind
        if kind in BUILDERS:
            return BUILDERS[kind](path)
        return build_decoder(kind, path)

    return build


@functools.lru_cache(maxsize=None)
def loaded(path):
    return load(str(path), backend="torch")


def eager(path, decoder: bool):
    auto = transformers.AutoModelForCausalLM if decoder else transformers.AutoModel
    return auto.from_pretrained(str(path), attn_implementation="eager", dtype=torch.float32).eval()


def reference(path, model, enc):
    ref = eager(path, model.is_decoder)
    inputs = model._inputs(np.asarray([enc.ids]), np.asarray([enc.type_ids]), np.ones((1, len(enc.ids)), bool))
    with torch.no_grad():
        return ref, ref(**inputs, output_attentions=True, output_hidden_states=True)


def f64(t) -> np.ndarray:
    return t.detach().double().numpy()


@pytest.mark.parametrize("kind", ENCODERS + DECODERS)
def test_every_kept_site_equals_transformers_own_outputs_under_sdpa(kind, built):
    path = built(kind)
    model = loaded(path)
    assert model.model.config._attn_implementation == "sdpa"  # the trace never needs output_attentions
    enc = model.encode(TEXT)
    trace = model.trace(enc, "*")
    _, out = reference(path, model, enc)
    L, T = model.layers, len(enc.ids)
    assert trace.backend == "torch" and trace.ids == enc.ids
    f32_close(trace["embed"], f64(out.hidden_states[0][0]), depth=DEPTH, length=WIDTH)
    for l in range(L):
        f32_close(trace[f"blocks.{l}.attn.pattern"], f64(out.attentions[l][0]), depth=DEPTH, length=WIDTH)
        f32_close(trace[f"blocks.{l}.resid_pre"], f64(out.hidden_states[l][0]), depth=DEPTH, length=WIDTH)
        if l < L - 1 or not model.is_decoder:  # a decoder's last hidden state is after its final norm
            f32_close(trace[f"blocks.{l}.resid_post"], f64(out.hidden_states[l + 1][0]), depth=DEPTH, length=WIDTH)
        q, k, v = (trace[f"blocks.{l}.attn.{s}"] for s in "qkv")
        assert q.shape == k.shape == v.shape == (model.heads, T, q.shape[-1])
        z = np.einsum("hts,hsd->thd", trace[f"blocks.{l}.attn.pattern"], v)  # (T, h, d_head)
        f32_close(trace[f"blocks.{l}.attn.z"], z, depth=DEPTH, length=WIDTH)
        scores = trace[f"blocks.{l}.attn.scores"]
        assert np.isneginf(scores).any() == model.is_decoder
        if not model.is_decoder:
            # post-LN: the stream after the attention block feeds the MLP; resid_post = LN(mid + mlp.out)
            assert trace[f"blocks.{l}.resid_mid"].shape == (T, model.hidden_size)
        else:
            f32_close(trace[f"blocks.{l}.resid_pre"] + trace[f"blocks.{l}.attn.out"],
                                       trace[f"blocks.{l}.resid_mid"], depth=DEPTH, length=WIDTH)
            f32_close(trace[f"blocks.{l}.resid_mid"] + trace[f"blocks.{l}.mlp.out"],
                                       trace[f"blocks.{l}.resid_post"], depth=DEPTH, length=WIDTH)
    f32_close(trace["final_norm"], f64(out.hidden_states[L][0]), depth=DEPTH, length=WIDTH)
    if model.is_decoder:
        f32_close(trace["logits"], f64(out.logits[0]), depth=DEPTH, length=WIDTH)
    else:
        assert "logits" not in trace


@pytest.mark.parametrize("kind", ["mistral", "qwen2", "phi3"])
def test_the_sliding_window_of_each_layer_bites_as_in_transformers(kind, built):
    model = loaded(built(kind))
    enc = model.encode(TEXT)
    trace = model.trace(enc, ["blocks.*.attn.pattern", "blocks.*.attn.scores"])
    T = len(enc.ids)
    i, j = np.arange(T)[:, None], np.arange(T)[None]
    for l, window in enumerate(WINDOWS[kind]):
        shut = (j > i) | ((i - j >= window) if window else False)
        assert (trace[f"blocks.{l}.attn.pattern"][:, shut] == 0).all()
        assert np.isneginf(trace[f"blocks.{l}.attn.scores"][:, shut]).all()
        assert (trace[f"blocks.{l}.attn.pattern"][:, ~shut] > 0).all()


def test_rows_hold_only_those_query_rows(built):
    model = loaded(built("llama"))
    enc = model.encode(TEXT)
    full = model.trace(enc, "blocks.1.attn.pattern")
    part = model.trace(enc, "blocks.1.attn.*", rows=[0, 4])
    assert part.rows == [0, 4] and part["blocks.1.attn.pattern"].shape[1] == 2
    np.testing.assert_allclose(part["blocks.1.attn.pattern"], full["blocks.1.attn.pattern"][:, [0, 4]], atol=1e-12)
    assert part["blocks.1.attn.q"].shape[1] == len(enc.ids)


@pytest.mark.parametrize("kind", ["bert", "gpt2", "llama", "mistral", "qwen2"])
def test_rows_made_in_chunks_equal_eager_output_attentions(kind, built, monkeypatch):
    """Llama (GQA: 4 query heads over 2 kv heads, RoPE), Mistral and Qwen2 (sliding windows of 3 and
    4 tokens, shorter than the text), GPT-2 and BERT, loaded under SDPA: the query rows asked for,
    recomputed from the captured q and k two rows at a time, equal eager ``output_attentions``."""
    from attncli.hf.backends import torch_rows

    path = built(kind)
    model = loaded(path)
    assert model.model.config._attn_implementation == "sdpa"
    enc = model.encode(TEXT)
    T = len(enc.ids)
    monkeypatch.setattr(torch_rows, "CHUNK_BYTES", model.heads * T * 8 * 2)
    rows = [0, 5, T - 3, T - 2, T - 1]
    trace = model.trace(enc, "blocks.*.attn.pattern", rows=rows)
    _, out = reference(path, model, enc)
    for l in range(model.layers):
        f32_close(trace[f"blocks.{l}.attn.pattern"], f64(out.attentions[l][0])[:, rows], depth=DEPTH, length=WIDTH)


def _o_proj(model, layer):
    base = model.base_model
    return base.h[layer].attn.c_proj if hasattr(base, "h") else base.layers[layer].self_attn.o_proj


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2", "phi3"])
def test_a_head_zeroed_at_z_equals_a_hand_written_hook_on_the_output_projection(kind, built):
    path = built(kind)
    model = loaded(path)
    ids = model.encode(TEXT).ids
    ref = eager(path, True)
    h, layer, head = model.heads, 1, 2
    d_head = ref.config.hidden_size // h if kind == "gpt2" else _o_proj(ref, layer).in_features // h

    def zero_head(module, args):
        x = args[0].clone()
        x[..., head * d_head:(head + 1) * d_head] = 0
        return (x,)

    handle = _o_proj(ref, layer).register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            want = f64(ref(torch.tensor([ids])).logits[0])
    finally:
        handle.remove()
    got = model.trace(ids, "logits", interventions=[Intervention(f"blocks.{layer}.attn.z", head=head)])["logits"]
    clean = model.trace(ids, "logits")["logits"]
    assert np.abs(want - clean).max() > 1e-3  # the head matters, so the test can fail
    f32_close(got, want, depth=DEPTH, length=WIDTH)


@pytest.mark.parametrize("kind", ["gpt2", "llama3", "bert"])
def test_core_interventions_remake_z_from_the_intervened_values(kind, built):
    model = loaded(built(kind))
    enc = model.encode(TEXT)
    keep = ["blocks.0.attn.*", "blocks.1.resid_post"]
    zero_v = model.trace(enc, keep, interventions=[Intervention("blocks.0.attn.v", head=1)])
    zero_z = model.trace(enc, keep, interventions=[Intervention("blocks.0.attn.z", head=1)])
    f32_close(zero_v["blocks.1.resid_post"], zero_z["blocks.1.resid_post"], depth=DEPTH, length=WIDTH)
    # a zero query makes every allowed key equally likely: z is the mean of the values it may read
    zero_q = model.trace(enc, keep, interventions=[Intervention("blocks.0.attn.q", head=3)])
    v = zero_q["blocks.0.attn.v"][3]  # (T, d_head)
    T = len(enc.ids)
    mean = np.cumsum(v, axis=0) / np.arange(1, T + 1)[:, None] if model.is_decoder else np.repeat(v.mean(0)[None], T, 0)
    f32_close(zero_q["blocks.0.attn.z"][:, 3], mean, depth=DEPTH, length=WIDTH)
    np.testing.assert_allclose(zero_q["blocks.0.attn.pattern"][3].sum(-1), 1.0, atol=1e-12)
    # the pattern replaced by itself changes nothing downstream
    clean = model.trace(enc, keep)
    same = model.trace(enc, keep, interventions=[
        Intervention("blocks.0.attn.pattern", "replace", value=clean["blocks.0.attn.pattern"])])
    f32_close(same["blocks.1.resid_post"], clean["blocks.1.resid_post"], depth=DEPTH, length=WIDTH)
    assert np.abs(zero_q["blocks.1.resid_post"] - clean["blocks.1.resid_post"]).max() > 1e-3


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_stream_interventions_land_where_the_site_is_computed(kind, built):
    model = loaded(built(kind))
    enc = model.encode(TEXT)
    T, d = len(enc.ids), model.hidden_size
    other = model.trace(model.encode("she sells sea shells by the sea shore, a quick fox"),
                        "blocks.*.resid_*")
    value = np.linspace(-1, 1, d)
    t = model.trace(enc, "blocks.*", interventions=[Intervention("blocks.0.resid_mid", "replace", position=2,
                                                                 value=value)])
    f32_close(t["blocks.0.resid_mid"][2], value, depth=DEPTH, length=WIDTH)
    clean = model.trace(enc, "blocks.*")
    f32_close(np.delete(t["blocks.0.resid_mid"], 2, 0), np.delete(clean["blocks.0.resid_mid"], 2, 0), depth=DEPTH, length=WIDTH)
    # resid_post of layer 0 replaced == resuming at layer 1 from that stream
    stream = other["blocks.0.resid_post"][:T] if other["blocks.0.resid_post"].shape[0] >= T else None
    assert stream is not None
    a = model.trace(enc, "blocks.1.*", interventions=[Intervention("blocks.0.resid_post", "replace", value=stream)])
    b = model.trace(enc, "blocks.1.*", start=(1, stream))
    for name in ("blocks.1.resid_pre", "blocks.1.attn.pattern", "blocks.1.resid_post"):
        f32_close(a[name], b[name], depth=DEPTH, length=WIDTH)
    zero = model.trace(enc, ["blocks.0.attn.out", "blocks.0.mlp.out", "blocks.1.resid_pre"],
                       interventions=[Intervention("blocks.0.attn.out"), Intervention("blocks.0.mlp.out")])
    assert not zero["blocks.0.attn.out"].any() and not zero["blocks.0.mlp.out"].any()
    if model.is_decoder:  # pre-LN: both blocks' outputs gone, the stream is the embeddings
        f32_close(zero["blocks.1.resid_pre"], clean["blocks.0.resid_pre"], depth=DEPTH, length=WIDTH)


def test_start_resumes_at_a_layer_and_skips_the_ones_before(built):
    model = loaded(built("llama"))
    ids = model.encode(TEXT).ids
    full = model.trace(ids, ["blocks.1.resid_pre", "logits"])
    calls = []
    handle = model.model.base_model.layers[0].self_attn.register_forward_hook(lambda *a: calls.append(1))
    try:
        resumed = model.trace(ids, ["logits", "blocks.0.resid_pre"], start=(1, full["blocks.1.resid_pre"]))
    finally:
        handle.remove()
    f32_close(resumed["logits"], full["logits"], depth=DEPTH, length=WIDTH)
    assert not calls and "blocks.0.resid_pre" not in resumed
    # the skipped layer's forward was replaced for the pass only: it runs again afterwards
    np.testing.assert_allclose(model.trace(ids, "logits")["logits"], full["logits"], atol=1e-12)
    with pytest.raises(BadInput, match="shape"):
        model.trace(ids, "logits", start=(1, np.zeros((3, 2))))
    for early in ("embed", "blocks.0.attn.z"):
        with pytest.raises(BadInput, match="before layer 1"):
            model.trace(ids, "logits", start=(1, full["blocks.1.resid_pre"]), interventions=[Intervention(early)])
    with pytest.raises(BadInput, match="out of range"):
        model.trace(ids, "logits", start=(2, full["blocks.1.resid_pre"]))


def test_what_the_trace_refuses(built, tmp_path):
    bert = loaded(built("bert"))
    with pytest.raises(BadInput, match="no logits"):
        bert.trace(bert.encode(TEXT), "logits")
    with pytest.raises(BadInput, match="no site"):
        bert.trace(bert.encode(TEXT), "blocks.0.attn.nope")
    with pytest.raises(BadInput, match="rows"):
        bert.trace(bert.encode(TEXT), "blocks.0.attn.pattern", rows=[99])
    gpt2 = loaded(built("gpt2"))
    with pytest.raises(BadInput, match="shape"):
        gpt2.trace([1, 2, 3], "logits", interventions=[Intervention("blocks.0.attn.z", "replace", value=np.ones(5))])
    with pytest.raises(BadInput, match="out of range"):
        gpt2.trace([1, 2, 3], "logits", interventions=[Intervention("blocks.9.attn.z")])
    opt = load(str(build_opt(built("gpt2"), tmp_path / "opt")), backend="torch")
    assert opt.model.config._attn_implementation == "eager"  # its attentions come from output_attentions
    assert opt.attentions(opt.encode(TEXT)).shape[:2] == (1, 2)
    for call in (lambda: opt.trace(opt.encode(TEXT), "*"), lambda: opt.qk(opt.encode(TEXT), 0),
                 lambda: opt.value_vectors(opt.encode(TEXT), 0)):
        with pytest.raises(BadInput, match="'opt'"):
            call()


@pytest.mark.parametrize("kind", ["bert", "distilbert", "gpt2", "qwen2", "phi3"])
def test_qk_scores_and_value_vectors_read_the_trace(kind, built):
    path = built(kind)
    model = loaded(path)
    enc = model.encode(TEXT)
    weights = model.attentions(enc)
    _, out = reference(path, model, enc)
    for l in range(model.layers):
        f32_close(weights[l], f64(out.attentions[l][0]), depth=DEPTH, length=WIDTH)
        q, k = model.qk(enc, l)
        scores = model.scores(enc, l)
        finite = np.isfinite(scores)
        np.testing.assert_allclose(scores[finite], ((q @ k.swapaxes(1, 2)) * model.scale(l))[finite], atol=1e-9)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        f32_close(e / e.sum(-1, keepdims=True), weights[l], depth=DEPTH, length=WIDTH)
        a, f = model.value_vectors(enc, l)
        trace = model.trace(enc, [f"blocks.{l}.attn.out"])
        bias = torch_bias(model, l)
        f32_close(np.einsum("hts,hsd->td", a, f) + bias, trace[f"blocks.{l}.attn.out"], depth=DEPTH, length=WIDTH)


def torch_bias(model, layer):
    from attncli.hf.backends import torch_trace

    b = getattr(torch_trace.module(model, layer, "out"), "bias", None)
    return 0.0 if b is None else f64(b)


@pytest.mark.parametrize("head", ["BertForMaskedLM", "BertForPreTraining"])
def test_an_encoder_with_its_masked_lm_head_has_logits_and_ablations(head, tmp_path):
    """A checkpoint that holds the MLM head is loaded with it (a next-sentence head beside it is not
    used, and no error): its trace has transformers' MLM logits, and a head zeroed at z equals a
    hand-written pre-hook on attention.output.dense."""
    from _transformer_fixtures import INIT, SIZES, WORDPIECE, _finish, _seed, write_vocab

    directory = tmp_path / head
    tok = transformers.BertTokenizer(str(write_vocab(directory)))
    _seed()
    config = transformers.BertConfig(vocab_size=len(WORDPIECE), hidden_size=SIZES["hidden"], num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
                                     initializer_range=INIT)
    _finish(getattr(transformers, head)(config), tok, directory)
    model = load(str(directory), backend="torch")
    assert model.has_mlm_head and model.model.config._attn_implementation == "sdpa"
    enc = model.encode(TEXT)
    # the reference runs sdpa as the traced model does: the logits are then equal to float32 rounding
    ref = transformers.BertForMaskedLM.from_pretrained(str(directory), attn_implementation="sdpa").eval()
    ids = torch.tensor([enc.ids])
    with torch.no_grad():
        want = f64(ref(ids).logits[0])
    f32_close(model.trace(enc, "logits")["logits"], want, depth=DEPTH, length=WIDTH)

    def zero_head(module, args):
        x = args[0].clone()
        x[..., 8:16] = 0  # head 1 of 4, d_head 8
        return (x,)

    handle = ref.bert.encoder.layer[0].attention.output.dense.register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            ablated = f64(ref(ids).logits[0])
    finally:
        handle.remove()
    assert np.abs(ablated - want).max() > 1e-3
    got = model.trace(enc, "logits", interventions=[Intervention("blocks.0.attn.z", head=1)])["logits"]
    f32_close(got, ablated, depth=DEPTH, length=WIDTH)
