"""The transformer wing against transformers itself: attentions, tokens, embeddings, logits.

The oracle is the model run by transformers (eager attention, ``output_attentions=True``) on the
same directory: in float32, as a user runs it (numpy backend within float32 rounding:
tests/_tolerance.py, each attention weight against itself), and in float64, where the numpy
backend's float64 pass must agree to 1e-10 (so what is left against float32 is torch's rounding,
not a step done differently). On all-MiniLM-L6-v2 and on tiny random BERT, RoBERTa,
DistilBERT, ELECTRA and GPT-2 models, for single sentences and (encoders) sentence pairs.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import needed

needed("tokenizers")
needed("safetensors")
torch = needed("torch")
transformers = needed("transformers")

from attncli.hf import load  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402

torch.set_num_threads(1)  # small models: one thread beats two that wait on each other (see _transformer_fixtures)

KINDS = ["bert", "roberta", "distilbert", "electra", "gpt2", "minilm"]
SINGLE = "time flies like an arrow"
PAIR = ("time flies like an arrow", "fruit flies like a banana")
OTHER = "She sells sea shells, said the paper in 2017!"
WORDS = {(SINGLE,): SINGLE.split(), PAIR: " ".join(PAIR).split(),
         (OTHER,): ["She", "sells", "sea", "shells", ",", "said", "the", "paper", "in", "2017", "!"]}


@pytest.fixture(scope="session")
def tiny_electra_dir(tmp_path_factory) -> Path:
    from _transformer_fixtures import build_electra

    return build_electra(tmp_path_factory.mktemp("tiny-electra") / "electra")


@pytest.fixture(params=KINDS)
def model_dir(request) -> Path:
    name = "minilm_dir" if request.param == "minilm" else f"tiny_{request.param}_dir"
    return request.getfixturevalue(name)


@functools.lru_cache(maxsize=None)
def ours(path: str, backend: str = "numpy"):
    return load(path, backend=backend)


@functools.lru_cache(maxsize=None)
def reference(path: str, double: bool = False):
    """(tokenizer, model) loaded by transformers itself, eager attention, float32 or float64."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    config = transformers.AutoConfig.from_pretrained(path)
    cls = transformers.AutoModelForCausalLM if config.model_type == "gpt2" else transformers.AutoModel
    model = cls.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    return tok, (model.double() if double else model)


def reference_attentions(path: str, texts: tuple[str, ...], double: bool = False, **kwargs) -> np.ndarray:
    tok, model = reference(path, double)
    enc = tok(*texts, return_tensors="pt", **kwargs)
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    assert len(out.attentions) == model.config.num_hidden_layers
    return np.stack([a[0].numpy() for a in out.attentions]).astype(np.float64)  # (L, h, T, T)


def inputs_for(model, kind: str) -> list[tuple[str, ...]]:
    return [(SINGLE,), (OTHER,)] + ([] if model.is_decoder else [PAIR])


def test_numpy_attentions_equal_transformers_every_layer_and_head(model_dir):
    path = str(model_dir)
    model = ours(path)
    assert model.backend == "numpy"
    for texts in inputs_for(model, path):
        enc = model.encode(*texts)
        got = model.attentions(enc)
        T = len(enc.ids)
        assert got.shape == (model.layers, model.heads, T, T) and got.dtype == np.float64
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-12)
        want32 = reference_attentions(path, texts)
        f32_close(got, want32, *f32_size(path), per_element=True, what=f"{path} {texts}")
        want64 = reference_attentions(path, texts, double=True)
        assert np.abs(got - want64).max() < 1e-10, texts
        assert got.max() > 0.3, "the test models' attention must be far from uniform for this check to bite"
        if model.is_decoder:
            assert np.all(np.triu(got, k=1) == 0.0)


def test_torch_backend_equals_transformers(model_dir):
    path = str(model_dir)
    model = ours(path, "torch")
    assert model.backend == "torch"
    for texts in inputs_for(model, path):
        got = model.attentions(model.encode(*texts))
        # the torch backend runs transformers' sdpa attention and recomputes the weights from the q and
        # k it captured; in float32 sdpa's hidden states differ from eager's by up to 1.4e-6
        f32_close(got, reference_attentions(path, texts), *f32_size(path), per_element=True, what=f"{path} {texts}")


def test_encoding_is_what_the_transformers_tokenizer_gives(model_dir):
    path = str(model_dir)
    tok, _ = reference(path)
    for backend in ("numpy", "torch"):
        model = ours(path, backend)
        for texts in inputs_for(model, path):
            enc = model.encode(*texts)
            want = tok(*texts, return_special_tokens_mask=True)
            assert enc.ids == want["input_ids"]
            assert enc.tokens == want.tokens()
            assert enc.special == [bool(s) for s in want["special_tokens_mask"]]
            assert enc.segments == [None if s is None else "ab"[s] for s in want.sequence_ids()]
            assert enc.type_ids == want.get("token_type_ids", [0] * len(enc.ids))
            # the same partition of the pieces into words, numbered across the pair
            theirs = [None if s is None else (s, w) for s, w in zip(want.sequence_ids(), want.word_ids())]
            first: dict = {}
            assert [None if t is None else first.setdefault(t, len(first)) for t in theirs] == enc.word_ids
            assert enc.words == WORDS[texts]


def test_embed_is_mean_pooling_of_transformers_hidden_states(model_dir):
    path = str(model_dir)
    texts = [SINGLE, OTHER, "a", PAIR[1] + " " + OTHER]
    tok, model = reference(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc, output_hidden_states=True).hidden_states[-1]  # (n, T, d)
    mask = enc["attention_mask"][..., None].float()
    want = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    for backend in ("numpy", "torch"):
        got = ours(path, backend).embed(texts)
        assert got.shape == want.shape
        f32_close(got, want, *f32_size(path), what=f"{backend} embeddings")
    assert ours(path).embed([]).shape == (0, want.shape[1])


def test_minilm_sentence_embeddings_rank_like_sentence_transformers(minilm_dir):
    """all-MiniLM-L6-v2's pooled, normalised embeddings put paraphrases close (its whole purpose)."""
    vecs = ours(str(minilm_dir)).embed(["a man is playing a guitar", "someone plays the guitar",
                                        "the stock market fell sharply today"])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    assert vecs[0] @ vecs[1] > 0.6 > 0.2 > vecs[0] @ vecs[2]


def test_gpt2_logits_and_attentions_equal_the_lm_head_model(tiny_gpt2_dir):
    path = str(tiny_gpt2_dir)
    tok, model = reference(path)
    ids = tok(OTHER)["input_ids"]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    want_logits = out.logits[0].numpy()
    want_att = np.stack([a[0].numpy() for a in out.attentions])
    for backend in ("numpy", "torch"):
        logits, att = ours(path, backend).logits_and_attentions(ids)
        assert logits.shape == (len(ids), model.config.vocab_size)
        f32_close(logits, want_logits, *f32_size(path), what=f"{backend} logits")
        f32_close(att, want_att, *f32_size(path), per_element=True, what=f"{backend} attentions")
    m = ours(path)
    assert m.decode(ids) == OTHER and m.token_strings(ids) == tok.convert_ids_to_tokens(ids)
    assert int(np.argmax(logits[-1])) == int(np.argmax(want_logits[-1]))


@pytest.mark.parametrize("kind", ["bert", "gpt2", "minilm"])
def test_qk_gives_back_every_head_through_the_scaled_softmax(kind, request):
    path = str(request.getfixturevalue("minilm_dir" if kind == "minilm" else f"tiny_{kind}_dir"))
    model = ours(path)
    enc = model.encode(*((SINGLE,) if model.is_decoder else PAIR))
    att = model.attentions(enc)
    T = len(enc.ids)
    for layer in range(model.layers):
        q, k = model.qk(enc, layer)
        assert q.shape == k.shape == (model.heads, T, att.shape[-1] and model.hidden_size // model.heads)
        scores = q @ k.transpose(0, 2, 1) * model.scale(layer)  # (h, T, T)
        if model.is_decoder:
            scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(e / e.sum(-1, keepdims=True), att[layer], atol=1e-12)


def test_truncated_input_still_equals_transformers(tiny_bert_dir):
    path = str(tiny_bert_dir)
    model = ours(path)
    long = " ".join([SINGLE] * 12)
    enc = model.encode(long, PAIR[1], truncate=True)
    assert enc.truncated and len(enc.ids) == model.max_positions == 40
    want = reference_attentions(path, (long, PAIR[1]), truncation="longest_first", max_length=40)
    f32_close(model.attentions(enc), want, *f32_size(path), per_element=True)
    assert ours(path, "torch").encode(long, PAIR[1], truncate=True) == enc


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoints(dtype, tiny_bert_dir, tmp_path):
    """float16 / bfloat16 safetensors: read, widened, and equal to transformers loading the same file."""
    import shutil

    target = tmp_path / dtype
    shutil.copytree(tiny_bert_dir, target)
    model = transformers.AutoModel.from_pretrained(tiny_bert_dir).to(getattr(torch, dtype))
    model.save_pretrained(target)
    got = load(str(target), backend="numpy")
    assert got.arch.w._dtype_of("embeddings.word_embeddings.weight") == {"float16": "F16", "bfloat16": "BF16"}[dtype]
    want = reference_attentions(str(target), PAIR)
    f32_close(got.attentions(got.encode(*PAIR)), want, *f32_size(target), per_element=True)
    f32_close(got.embed([SINGLE]), ours(str(target), "torch").embed([SINGLE]), *f32_size(target))


def test_prefixed_checkpoint_names(tiny_bert_dir, tmp_path):
    """A head model's checkpoint ("bert.encoder...") reads like the bare model's."""
    import shutil

    from safetensors.numpy import load_file, save_file

    target = tmp_path / "prefixed"
    shutil.copytree(tiny_bert_dir, target)
    tensors = load_file(str(tiny_bert_dir / "model.safetensors"))
    save_file({"bert." + k: v for k, v in tensors.items()} | {"cls.predictions.bias": np.zeros(3, np.float32)},
              str(target / "model.safetensors"), metadata={"format": "pt"})
    got = load(str(target), backend="numpy")
    assert got.arch.w.prefix == "bert."
    enc = got.encode(*PAIR)
    np.testing.assert_array_equal(got.attentions(enc), ours(str(tiny_bert_dir)).attentions(enc))


def test_the_numpy_path_imports_neither_torch_nor_transformers(tiny_bert_dir, tiny_gpt2_dir, minilm_dir):
    code = textwrap.dedent(f"""
        import sys
        from attncli.hf import load
        for path in ({str(tiny_bert_dir)!r}, {str(minilm_dir)!r}):
            m = load(path)
            assert m.backend == "numpy"
            m.attentions(m.encode("time flies like an arrow", "fruit flies like a banana"))
            m.qk(m.encode("time flies"), 0)
            m.embed(["time flies", "like an arrow"])
        g = load({str(tiny_gpt2_dir)!r})
        g.logits_and_attentions(g.encode("time flies").ids)
        print(sorted(n for n in sys.modules if n.split(".")[0] in ("torch", "transformers")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", ["roberta", "gpt2"])
def test_embed_batches_and_padding_change_nothing(kind, request):
    """Many texts of mixed lengths (several padded batches) embed as each text alone does."""
    model = ours(str(request.getfixturevalue(f"tiny_{kind}_dir")))
    words = (SINGLE + " " + OTHER).split()
    texts = [" ".join(words[: 1 + (i * 7) % len(words)]) for i in range(45)]
    together = model.embed(texts)
    alone = np.stack([model.embed([t])[0] for t in texts])
    f32_close(together, alone, *f32_size(model))  # float32: only the rounding differs


def test_gpt2_key_value_cache_equals_the_full_recompute(tiny_gpt2_dir):
    """Token by token through the cache (and after the sequence changes): the same logits and
    attentions as running the whole sequence again."""
    model = ours(str(tiny_gpt2_dir))
    ids = model.encode(OTHER + " " + SINGLE).ids
    cache = model.new_cache()
    for T in [1, 2, 3, 7, 8, len(ids)]:
        logits, att = model.logits_and_attentions(ids[:T], cache=cache)
        want_logits, want_att = model.logits_and_attentions(ids[:T])
        assert len(cache) == T and att.shape == want_att.shape == (model.layers, model.heads, T, T)
        np.testing.assert_allclose(logits, want_logits, atol=1e-12, rtol=0)  # 1.1e-14 measured (was 1e-9)
        np.testing.assert_allclose(att, want_att, atol=1e-12, rtol=0)
    changed = ids[:5] + [ids[0]] + ids[6:9]  # diverges at position 5: only the first 5 are kept
    np.testing.assert_allclose(model.logits_and_attentions(changed, cache=cache)[1],
                               model.logits_and_attentions(changed)[1], atol=1e-12)
    assert len(cache) == len(changed)
    np.testing.assert_allclose(model.logits_and_attentions(ids[:3], cache=cache)[0],
                               model.logits_and_attentions(ids[:3])[0], atol=1e-12)  # 5.1e-15 measured
    assert ours(str(tiny_gpt2_dir), "torch").new_cache() is None


@pytest.mark.parametrize("model_type,architecture", [("xlm-roberta", "XLMRobertaModel"), ("camembert", "CamembertModel")])
def test_roberta_relatives_run_the_roberta_path(model_type, architecture, tiny_roberta_dir, tmp_path):
    """XLM-R and CamemBERT are RoBERTa under another name: same weights, positions from padding_idx + 1."""
    import json
    import shutil

    target = tmp_path / model_type
    shutil.copytree(tiny_roberta_dir, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps(config | {"model_type": model_type, "architectures": [architecture]}))
    model = load(str(target))
    assert model.backend == "numpy" and model.max_positions == 40
    assert type(reference(str(target))[1]).__name__ == architecture
    got = model.attentions(model.encode(*PAIR))
    assert np.abs(got - reference_attentions(str(target), PAIR, double=True)).max() < 1e-10


def test_distilbert_with_sinusoidal_positions(tiny_distilbert_dir, tmp_path):
    """sinusoidal_pos_embds: the sines are stored in position_embeddings, read like learned ones."""
    import shutil

    target = tmp_path / "sinusoidal"
    shutil.copytree(tiny_distilbert_dir, target)
    config = transformers.DistilBertConfig.from_pretrained(tiny_distilbert_dir)
    config.sinusoidal_pos_embds = True
    torch.manual_seed(1)
    transformers.DistilBertModel(config).eval().save_pretrained(target)
    model = load(str(target))
    table = model.arch.w.get("embeddings.position_embeddings.weight")
    f32_close(table[3, :2], [np.sin(3.0), np.cos(3.0)])  # transformers' float32 table
    got = model.attentions(model.encode(OTHER))
    assert np.abs(got - reference_attentions(str(target), (OTHER,), double=True)).max() < 1e-10
