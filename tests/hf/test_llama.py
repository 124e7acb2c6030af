"""Llama-family decoders on the numpy backend against transformers itself (eager attention,
``output_attentions``), layer by layer and head by head, within float32 rounding (tests/_tolerance.py): Llama (GQA, biases,
linear and llama3 RoPE, tied and untied heads), Mistral (sliding window), Qwen2 (q/k/v biases, a
window on some layers), Gemma (sqrt(d) embeddings, (1 + w) norms, GeGLU, head_dim apart),
Phi-3 (fused qkv and gate_up, partial rotary), Qwen3 (per-head q / k norms, head_dim apart) and Gemma 3
(four norms a layer, q/k norms, a local layer with its window and RoPE base beside a global one,
query_pre_attn_scalar). Tiny random models from tests/_llama_fixtures.py.
"""

from __future__ import annotations

import functools
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

from _llama_fixtures import KINDS, build_decoder  # noqa: E402
from _probe import imported_by  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402

torch.set_num_threads(1)
runner = CliRunner()
TEXTS = ["the cat sat on the mat and the dog sat on the log", "She sells sea shells, said the paper in 2017!"]
WINDOWS = {"mistral": [3, 3], "qwen2": [None, 4], "phi3": [5, 5], "qwen3": [None, 4], "gemma3": [3, None]}


@pytest.fixture(scope="session")
def decoders(tmp_path_factory):
    base = tmp_path_factory.mktemp("llama-family")
    return functools.lru_cache(maxsize=None)(
        lambda kind, dtype="float32", shard=None: build_decoder(kind, base / f"{kind}-{dtype}-{shard}", dtype, shard))


@functools.lru_cache(maxsize=None)
def reference(path: str):
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                              dtype=torch.float32).eval()
    return tok, model


def reference_pass(path: str, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' logits (T, V) and attentions (L, h, T, T), float64."""
    _, model = reference(path)
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return out.logits[0].double().numpy(), np.stack([a[0].double().numpy() for a in out.attentions])


def allowed(T: int, window: int | None) -> np.ndarray:
    """(T, T) bool: the causal mask, and the sliding window's."""
    i, j = np.arange(T)[:, None], np.arange(T)[None]
    return (j <= i) & ((i - j < window) if window else True)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_attentions_and_logits_equal_transformers_every_layer_and_head(kind, decoders):
    path = str(decoders(kind))
    model = load(path, backend="numpy")
    assert model.backend == "numpy" and model.is_decoder and model.layers == 2 and model.heads == 4
    tok, _ = reference(path)
    for text in TEXTS:
        enc = model.encode(text)
        assert enc.tokens[0] == "<s>"  # the BOS tokenizer.json's post-processor adds, as transformers does
        if kind != "qwen2":  # transformers 5 tokenizes a qwen2 with Qwen2Tokenizer's own pre-tokenizer (digits
            assert enc.ids == tok(text)["input_ids"]  # one by one), not this fixture's tokenizer.json
        got = model.attentions(enc)  # (L, h, T, T)
        T = len(enc.ids)
        assert got.shape == (2, 4, T, T) and got.dtype == np.float64
        want_logits, want = reference_pass(path, enc.ids)
        f32_close(got, want, *f32_size(path), per_element=True, what=f"{kind} {text!r}")
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-12)
        for l, window in enumerate(WINDOWS.get(kind, [None, None])):
            assert np.all(got[l][:, ~allowed(T, window)] == 0.0)  # exactly 0 outside the causal window
        seen = np.stack([allowed(T, w) & ~np.eye(T, dtype=bool) for w in WINDOWS.get(kind, [None, None])])
        off = got.swapaxes(0, 1)[:, seen]  # (h, the keys a query may see besides itself)
        assert ((off > 0.02) & (off < 0.98)).mean() > 0.3, "attention must be neither uniform nor one-hot to bite"
        logits, _ = model.logits_and_attentions(enc.ids)
        assert logits.shape == want_logits.shape
        f32_close(logits, want_logits, *f32_size(path), what=f"{kind} logits")


@pytest.mark.parametrize("kind", ["llama", "gemma", "mistral", "qwen3", "gemma3"])
def test_qk_reproduce_the_attentions_and_share_key_value_heads(kind, decoders):
    path = str(decoders(kind))
    model = load(path, backend="numpy")
    enc = model.encode(TEXTS[0])
    att = model.attentions(enc)
    T = len(enc.ids)
    group = model.heads // model.config["num_key_value_heads"]
    for layer in range(model.layers):
        q, k = model.qk(enc, layer)  # (h, T, d_head)
        assert q.shape[0] == model.heads and q.shape[2] == model.config.get("head_dim", 8)
        for head in range(model.heads):
            np.testing.assert_array_equal(k[head], k[head - head % group])  # one key per group of query heads
        scores = np.where(allowed(T, WINDOWS.get(kind, [None, None])[layer]), q @ k.swapaxes(1, 2) * model.scale(layer),
                          -np.inf)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(e / e.sum(-1, keepdims=True), att[layer], atol=1e-9)


@pytest.mark.parametrize("kind", ["llama", "mistral", "phi3", "qwen3", "gemma3"])
def test_cached_steps_equal_one_full_pass_and_transformers(kind, decoders):
    path = str(decoders(kind))
    model = load(path, backend="numpy")
    ids = model.encode(TEXTS[0]).ids
    cache = model.new_cache()
    for n in range(3, len(ids) + 1):  # one token at a time after a 3-token prompt
        logits, att = model.logits_and_attentions(ids[:n], cache=cache)
    full_logits, full = model.logits_and_attentions(ids)
    f32_close(att, full, *f32_size(path), per_element=True)  # the float32 pass, rows in another order
    f32_close(logits, full_logits, *f32_size(path))
    want_logits, want = reference_pass(path, ids)
    f32_close(att, want, *f32_size(path), per_element=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_checkpoints_read_as_transformers_reads_them(dtype, decoders):
    path = str(decoders("llama", dtype))
    header = json.loads(Path(path, "model.safetensors").read_bytes()[8:][:20000].split(b"}}", 1)[0] + b"}}")
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16" if dtype == "bfloat16" else "F16"}
    model = load(path, backend="numpy")
    enc = model.encode(TEXTS[0])
    _, want = reference_pass(path, enc.ids)  # transformers widens the same weights to float32
    f32_close(model.attentions(enc), want, *f32_size(path), per_element=True)


def _with_config(src: Path, dst: Path, **changes) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        shutil.copy(f, dst / f.name)  # copies: attn reads no symlinked file
    config = json.loads((src / "config.json").read_text())
    config.update(changes)
    (dst / "config.json").unlink()
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("changes, words", [
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}}, "rope type 'yarn'"),
    ({"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope type 'dynamic'"),
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
    ({"hidden_act": "relu6"}, "hidden_act 'relu6'"),
])
def test_configs_it_cannot_run_are_refused_by_name(changes, words, decoders, tmp_path):
    path = _with_config(decoders("llama"), tmp_path / "m", **changes)
    with pytest.raises(BadInput, match="the numpy backend cannot run"):
        load(str(path), backend="numpy")
    result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.stderr.split()) and "Traceback" not in result.output


@pytest.mark.parametrize("changes, words", [
    ({"rope_parameters": {"rope_type": "default", "rope_theta": float("nan")}}, "NaN is not a JSON number"),
    ({"num_attention_heads": -4}, "num_attention_heads: -4 is outside"),
])
def test_damaged_configs_are_damage_before_any_backend_reads_them(changes, words, decoders, tmp_path):
    """A NaN (not JSON) or a negative count is a damaged config.json: config_check refuses it
    (exit 1, "damaged model: config.json: ...") before either backend looks at the family."""
    path = _with_config(decoders("llama"), tmp_path / "m", **changes)
    result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert "damaged model: config.json" in text and words in text and "Traceback" not in result.output


def test_old_style_rope_theta_and_rope_scaling_are_read(decoders, tmp_path):
    """Configs written before transformers 5 keep rope_theta and rope_scaling at the top level."""
    src = decoders("llama3")
    params = json.loads((src / "config.json").read_text())["rope_parameters"]
    scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    path = _with_config(src, tmp_path / "m", rope_parameters=None, rope_theta=params["rope_theta"],
                        rope_scaling={**scaling, "type": scaling.pop("rope_type")})
    enc = load(str(src), backend="numpy").encode(TEXTS[0])
    np.testing.assert_array_equal(load(str(path), backend="numpy").attentions(enc),
                                  load(str(src), backend="numpy").attentions(enc))


def test_cli_views_of_a_llama_head_and_model_view(decoders):
    path = decoders("llama")
    result = runner.invoke(app, ["matrix", TEXTS[0], "--transformer", str(path), "--layer", "1", "--head", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    enc = load(str(path), backend="numpy").encode(TEXTS[0])
    _, want = reference_pass(str(path), enc.ids)
    f32_close(doc["weights"], want[1, 2], *f32_size(path), per_element=True)
    result = runner.invoke(app, ["matrix", TEXTS[0], "--transformer", str(path), "--model-view", "--json"])
    assert result.exit_code == 0, result.output


def test_generate_on_a_llama_imports_no_torch(decoders, attn_home):
    modules, out = imported_by(["generate", "the cat", "--transformer", str(decoders("qwen2")), "-n", "4", "--ignore-eos", "--json"])
    bad = [m for m in ("torch", "transformers") if m in modules]
    assert not bad, bad
    assert len(json.loads(out)["steps"]) == 4


def test_grouped_query_heads_are_named_in_the_json_and_in_attn_heads(decoders, tmp_path):
    path = decoders("llama")  # 4 query heads, 2 key-value heads
    result = runner.invoke(app, ["matrix", TEXTS[0], "--transformer", str(path), "--layer", "0", "--head", "3", "--json"])
    doc = json.loads(result.stdout)
    assert doc["heads"] == 4 and doc["kv_heads"] == 2 and doc["kv_head"] == 1
    sentences = tmp_path / "s.txt"
    sentences.write_text("\n".join(TEXTS) + "\n")
    result = runner.invoke(app, ["heads", "--transformer", str(path), "--file", str(sentences), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kv_heads"] == 2 and [h["kv_head"] for h in report["heads"][:4]] == [0, 0, 1, 1]
    result = runner.invoke(app, ["heads", "--transformer", str(path), "--file", str(sentences)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0 and " kv " in result.stdout and "4 query heads share 2" in " ".join(result.stderr.split())


def test_a_sharded_bfloat16_checkpoint_is_read_through_its_index(decoders):
    path = decoders("qwen2", "bfloat16", "20KB")
    shards = sorted(p.name for p in path.glob("*.safetensors"))
    assert len(shards) > 2 and not (path / "model.safetensors").exists()
    model = load(str(path), backend="numpy")
    enc = model.encode(TEXTS[0])
    _, want = reference_pass(str(path), enc.ids)
    f32_close(model.attentions(enc), want, *f32_size(path), per_element=True)


@pytest.mark.parametrize("shard", ["../elsewhere.safetensors", "/etc/passwd", "model.bin"])
def test_an_index_naming_a_shard_outside_the_folder_is_refused(shard, decoders, tmp_path):
    src = decoders("qwen2", "float32", "20KB")
    path = _with_config(src, tmp_path / "m")
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"][next(iter(index["weight_map"]))] = shard
    (path / "model.safetensors.index.json").unlink()
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    assert result.exit_code == 1, result.output
    assert "shards must be .safetensors files beside it" in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_chat_wraps_the_prompt_as_transformers_apply_chat_template(backend, decoders):
    path = decoders("llama")
    tok, _ = reference(str(path))
    args = ["generate", "the cat sat", "--transformer", str(path), "-n", "2", "--greedy", "--json", "--backend", backend]
    chat = json.loads(runner.invoke(app, args + ["--chat"]).stdout)
    want = tok.apply_chat_template([{"role": "user", "content": "the cat sat"}], add_generation_prompt=True,
                                   tokenize=True)["input_ids"]
    assert [m["id"] for m in chat["prompt_mapping"]["tokens"]] == want and want.count(tok.bos_token_id) == 1
    plain = json.loads(runner.invoke(app, args).stdout)  # the default: the text as given, the tokenizer's BOS first
    assert [m["id"] for m in plain["prompt_mapping"]["tokens"]] == tok("the cat sat")["input_ids"]
    assert plain["prompt_mapping"]["tokens"][0]["piece"] == "<s>"


@pytest.mark.parametrize("template, code, words", [
    (None, 2, "has no chat template"),
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", 1, "chat template fails"),
    ("{{ raise_exception('roles must alternate') }}", 2, "refuses the prompt: roles must alternate"),
])
def test_chat_templates_that_cannot_serve(template, code, words, decoders, tmp_path):
    path = _with_config(decoders("llama"), tmp_path / "m")
    (path / "chat_template.jinja").unlink()
    if template is not None:
        (path / "chat_template.jinja").write_text(template)
    result = runner.invoke(app, ["generate", "the cat", "--transformer", str(path), "-n", "2", "--chat"])
    assert result.exit_code == code, result.output
    assert words in " ".join(result.stderr.split()) and "Traceback" not in result.output


def test_device_and_dtype_on_the_transformers_path(decoders):
    path = str(decoders("llama"))
    base = ["matrix", TEXTS[0], "--transformer", path, "--layer", "1", "--json", "--backend", "torch"]
    full = json.loads(runner.invoke(app, base + ["--device", "cpu"]).stdout)
    result = runner.invoke(app, base + ["--dtype", "bfloat16", "--device", "auto"])
    assert result.exit_code == 0, result.output
    half = json.loads(result.stdout)
    gap = np.abs(np.asarray(half["head_weights"]) - np.asarray(full["head_weights"])).max()
    assert 1e-4 < gap < 0.05  # bfloat16's 8-bit mantissa shows, and no more
    _, want = reference_pass(path, load(path, backend="numpy").encode(TEXTS[0]).ids)
    f32_close(full["head_weights"], want[1], *f32_size(path), per_element=True)
    result = runner.invoke(app, ["generate", "the cat", "--transformer", path, "-n", "2", "--backend", "torch",
                                 "--dtype", "float16", "--json"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)["steps"]) >= 1, result.output


@pytest.mark.parametrize("args, words", [
    (["--dtype", "bfloat16"], "add --backend torch"),  # the numpy path runs this model
    (["--backend", "numpy", "--device", "cpu"], "add --backend torch"),
    (["--backend", "torch", "--dtype", "float64"], "unknown --dtype 'float64'"),
    (["--backend", "torch", "--device", "tpu"], "unknown --device 'tpu'"),
    (["--backend", "torch", "--device", "cuda"], "no CUDA device here"),
])
def test_device_and_dtype_refusals(args, words, decoders):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    for command in (["matrix", "a cat"], ["generate", "a cat", "-n", "2"]):
        result = runner.invoke(app, command + ["--transformer", str(decoders("llama")), *args])
        assert result.exit_code == 2, result.output
        assert words in " ".join(result.stderr.split()) and "Traceback" not in result.output


@pytest.mark.parametrize("exclude_first", [False, True])
def test_head_scores_equal_those_of_the_transformers_path(exclude_first, decoders, tmp_path):
    """attn heads on a Llama (first-token, duplicate-token, induction, ... and --exclude-first for
    attention sinks): the NumPy path's scores are the transformers path's."""
    sentences = tmp_path / "s.txt"
    sentences.write_text("\n".join(TEXTS) + "\n")
    reports = {}
    for backend in ("numpy", "torch"):
        args = ["heads", "--transformer", str(decoders("mistral")), "--file", str(sentences), "--json",
                "--backend", backend] + (["--exclude-first"] if exclude_first else [])
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        reports[backend] = json.loads(result.stdout)
    scores = reports["numpy"]["scores"]
    assert "induction" in scores and "duplicate_token" in scores and ("first_token" in scores) != exclude_first
    for ours, theirs in zip(reports["numpy"]["heads"], reports["torch"]["heads"]):
        assert ours["label"] == theirs["label"]
        for key in scores:
            f32_close(ours[key], theirs[key], *f32_size(decoders("mistral")), scale=1.0, what=key)  # means of weights


def test_gemma_legacy_gelu_is_the_tanh_approximation_as_transformers_reads_it(decoders, tmp_path):
    """Gemma's official configs say hidden_act "gelu"; transformers runs it as gelu_pytorch_tanh."""
    path = str(_with_config(decoders("gemma"), tmp_path / "m", hidden_act="gelu"))
    model = load(path, backend="numpy")
    enc = model.encode(TEXTS[0])
    logits, att = model.logits_and_attentions(enc.ids)
    want_logits, want = reference_pass(path, enc.ids)
    f32_close(att, want, *f32_size(path), per_element=True)
    f32_close(logits, want_logits, *f32_size(path))


@pytest.mark.parametrize("changes", [
    {"num_attention_heads": 2, "num_key_value_heads": 2},  # q_proj holds 4 heads
    {"hidden_size": 64, "head_dim": 16},  # every tensor is 32 wide
    {"intermediate_size": 40},  # the MLP's are 37
    {"head_dim": 4},
])
def test_a_checkpoint_that_does_not_match_its_config_is_a_clear_failure(changes, decoders, tmp_path):
    path = _with_config(decoders("llama"), tmp_path / "m", **changes)
    for command in (["matrix", "a cat"], ["generate", "a cat", "-n", "2"]):
        result = runner.invoke(app, command + ["--transformer", str(path), "--backend", "numpy"])
        assert result.exit_code == 1, result.output
        message = " ".join(result.stderr.split())
        # refused at load by the names-and-shapes check every NumPy family shares (check_weight_names)
        assert "damaged model" in message and "config.json implies" in message, message
        assert "internal error" not in message, message


def test_an_unused_or_missing_tensor_is_named(decoders, tmp_path):
    """A tensor the Llama pass would not read (transformers would drop it with a log line) or one it
    needs that is absent: exit 1 naming it, before any output; --allow-missing-weights warns."""
    from safetensors.numpy import load_file, save_file

    for what, edit in (("unused", lambda t: t.update({"model.layers.0.self_attn.extra.weight": np.ones((2, 2), np.float32)})),
                       ("missing", lambda t: t.pop("model.layers.0.mlp.up_proj.weight"))):
        path = _with_config(decoders("llama"), tmp_path / what)
        tensors = load_file(str(path / "model.safetensors"))
        edit(tensors)
        (path / "model.safetensors").unlink()
        save_file(tensors, str(path / "model.safetensors"))
        result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
        assert result.exit_code == 1, result.output
        name = "layers.0.self_attn.extra.weight" if what == "unused" else "layers.0.mlp.up_proj.weight"
        assert name in " ".join(result.stderr.split()) and result.stdout == "", result.output
    result = runner.invoke(app, ["matrix", "a cat", "--transformer", str(tmp_path / "unused"), "--backend", "numpy",
                                 "--allow-missing-weights"])
    assert result.exit_code == 0 and "extra.weight" in result.stderr, result.output


@pytest.mark.parametrize("kind", ["gemma", "llama3", "qwen2", "gemma3"])
def test_a_stored_lm_head_of_a_tied_model_is_read_as_transformers_reads_it(kind, decoders, tmp_path):
    """A tied config (Gemma ties by default) whose checkpoint still holds an lm_head.weight of
    other values: transformers 5 keeps the stored head and does not tie (it warns); attn's logits
    must be transformers'. (attn read embed_tokens here before: its logits differed.)"""
    from safetensors.numpy import load_file, save_file

    src = decoders(kind)
    dst = tmp_path / kind
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    assert "lm_head.weight" not in tensors  # saved tied
    embed = tensors["model.embed_tokens.weight"]
    tensors["lm_head.weight"] = np.random.default_rng(0).standard_normal(embed.shape).astype(embed.dtype)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    model = load(str(dst), backend="numpy")
    ids = model.encode(TEXTS[0]).ids
    logits, _ = model.logits_and_attentions(ids)
    want, _ = reference_pass(str(dst), ids)
    reference_head = reference(str(dst))[1].lm_head.weight.detach().double().numpy()
    np.testing.assert_array_equal(reference_head, tensors["lm_head.weight"])  # transformers kept it, to the bit
    f32_close(logits, want, *f32_size(dst))


@pytest.mark.parametrize("kind, block", [("llama", None), ("gemma", None), ("qwen2", None), ("qwen3", None),
                                         ("gemma3", None), ("llama", 64)],
                         ids=["llama", "gemma", "qwen2", "qwen3", "gemma3", "llama-row-blocks"])
def test_the_logit_lens_equals_transformers_hidden_states(kind, block, decoders, monkeypatch):
    """`attn lens` on a Llama-family decoder (issue 22: every decoder the NumPy path gains):
    transformers' own output_hidden_states through its final norm and lm_head (the last hidden
    state already normed), softmaxed, within float32 rounding; the top token of each cell is the argmax.
    ``block``: llama.ROW_BLOCK_BYTES lowered so that the final norm runs by blocks of rows, as it does
    on a model of real size (SmolLM2's lens once ended in a broadcast error there: issue 49)."""
    if block is not None:
        from attncli.hf.families import llama

        monkeypatch.setattr(llama, "ROW_BLOCK_BYTES", block)
    path = str(decoders(kind))
    tok, model = reference(path)
    result = CliRunner().invoke(app, ["lens", TEXTS[0], "--transformer", path, "-k", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    ids = tok(TEXTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        hs = out.hidden_states  # L + 1, the last through the final norm already
        logits = [model.lm_head(model.model.norm(h)) for h in hs[:-1]] + [model.lm_head(hs[-1])]
    x = np.stack([h[0].double().numpy() for h in logits])  # (L + 1, T, V)
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert doc["layers"] == len(hs) - 1 and len(doc["tokens"]) == ids.shape[1]
    for l in range(len(hs)):
        for t in range(ids.shape[1]):
            cell = doc["lens"][l][t]
            f32_close([c["prob"] for c in cell], np.sort(probs[l, t])[::-1][:3], *f32_size(path), per_element=True,
                      printed=5e-7)  # the JSON's probabilities have 6 decimals
            assert cell[0]["id"] == int(np.argmax(probs[l, t]))
    assert not np.allclose(probs[0], probs[-1], atol=1e-3)  # fixed: the layers really differ, by more than 1e-3 (not a rounding bound)


def test_the_logit_lens_hands_the_final_norm_one_text_of_rows(decoders):
    """The logit lens's rows (n, d) (attn lens on SmolLM2: 279 x 576) reach the final norm as the
    (B, T, d) it takes, one text of them (lens_logits): handed (n, d), the norm split them into blocks
    by columns (an internal error). Each row normed and unembedded as in a (1, n, d) text."""
    model = load(str(decoders("llama")), backend="numpy")
    x = np.random.default_rng(0).standard_normal((1000, model.arch.d)).astype(np.float32)  # blocks of rows here
    arch = model.arch32
    np.testing.assert_array_equal(model.lens_logits(x), arch.logits(arch.final(x[None]))[0])
    assert model.lens_logits(x.reshape(10, 100, -1)).shape == (10, 100, model.config["vocab_size"])
