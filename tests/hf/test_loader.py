"""Loading pretrained models: backends chosen, hub ids from the cache, and every bad input a clear error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import needed
from _tolerance import f32_close, f32_size

from attncli.errors import BadInput, RuntimeFailure
from attncli.hf import load
from attncli.hf.formats import source

needed("tokenizers")
needed("safetensors")


def copy_model(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    return dst


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env})


def test_auto_picks_numpy_when_it_can_and_torch_otherwise(tiny_bert_dir, tmp_path):
    needed("transformers")
    assert load(str(tiny_bert_dir)).backend == "numpy"
    no_fast = copy_model(tiny_bert_dir, tmp_path / "slow-files-only", drop=("tokenizer.json",))
    model = load(str(no_fast))  # vocab.txt only: transformers builds the tokenizer
    assert model.backend == "torch"
    enc = model.encode("time flies like an arrow", "fruit flies like a banana")
    numpy_model = load(str(tiny_bert_dir), backend="numpy")
    assert enc.tokens == numpy_model.encode(enc.text, enc.pair).tokens
    f32_close(model.attentions(enc), numpy_model.attentions(enc), *f32_size(tiny_bert_dir), per_element=True)  # torch float32
    with pytest.raises(BadInput, match="no tokenizer.json.*--backend torch"):
        load(str(no_fast), backend="numpy")


def test_numpy_backend_on_an_unsupported_architecture_names_why(tmp_path):
    d = tmp_path / "xlnet"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "xlnet", "num_hidden_layers": 1}))
    (d / "model.safetensors").write_bytes(b"")
    with pytest.raises(BadInput, match="model_type 'xlnet' is not one it runs"):
        load(str(d), backend="numpy")
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "position_embedding_type": "relative_key",
                                               "hidden_size": 8, "num_attention_heads": 2}))
    (d / "tokenizer.json").write_text("{}")
    with pytest.raises(BadInput, match="relative_key"):
        load(str(d), backend="numpy")


@pytest.mark.parametrize("given,message", [
    ("", "no model given"),
    ("./no/such/dir", "no such model or directory"),
    ("/definitely/not/here", "no such model or directory"),
    ("not a hub id!", "no such model or directory"),
])
def test_no_such_model(given, message):
    with pytest.raises(BadInput, match=message):
        load(given)


def test_a_directory_that_is_not_a_model(tmp_path, tiny_bert_dir):
    with pytest.raises(BadInput, match="no config.json"):
        load(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 3}))
    with pytest.raises(BadInput, match="no weights"):
        load(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(BadInput, match="no model_type"):
        load(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RuntimeFailure, match="damaged model: config.json: it is not valid JSON"):
        load(str(tmp_path))
    with pytest.raises(BadInput, match="is a file"):
        load(str(tiny_bert_dir / "config.json"))
    with pytest.raises(BadInput, match="unknown backend 'jax'"):
        load(str(tiny_bert_dir), backend="jax")


def test_damaged_weights_are_a_runtime_failure(tiny_bert_dir, tmp_path):
    d = copy_model(tiny_bert_dir, tmp_path / "damaged")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeFailure, match="cannot read"):
        load(str(d), backend="numpy")


def test_text_longer_than_the_model_states_the_limit_and_offers_truncate(tiny_bert_dir, tiny_gpt2_dir):
    for path in (tiny_bert_dir, tiny_gpt2_dir):
        model = load(str(path))
        with pytest.raises(BadInput, match=r"more than the model's limit of 40.*--truncate"):
            model.encode("time flies like an arrow " * 20)
        enc = model.encode("time flies like an arrow " * 20, truncate=True)
        assert len(enc.ids) == 40 and enc.truncated
        assert not model.encode("time flies").truncated


def test_roberta_limit_counts_from_padding_idx_plus_one(tiny_roberta_dir):
    model = load(str(tiny_roberta_dir))
    assert model.config["max_position_embeddings"] == 42 and model.max_positions == 40
    enc = model.encode("time flies like an arrow " * 20, truncate=True)
    assert model.attentions(enc).shape[-1] == 40


def test_misuse_of_a_loaded_model(tiny_bert_dir, tiny_gpt2_dir):
    bert, gpt2 = load(str(tiny_bert_dir)), load(str(tiny_gpt2_dir))
    assert bert.has_pairs and not gpt2.has_pairs and gpt2.is_decoder and not bert.is_decoder
    with pytest.raises(BadInput, match="takes no sentence pairs.*decoder.*drop --pair"):
        gpt2.encode("time flies", "fruit flies")
    with pytest.raises(BadInput, match="not a decoder"):
        bert.logits_and_attentions([1, 2, 3])
    with pytest.raises(BadInput, match="layer 2 is out of range.*0..1"):
        bert.qk(bert.encode("time flies"), 2)
    with pytest.raises(BadInput, match="token ids must lie in"):
        gpt2.logits_and_attentions([10**6])
    with pytest.raises(BadInput, match="at least one token"):
        gpt2.logits_and_attentions([])
    with pytest.raises(BadInput, match="no tokens"):
        gpt2.encode("")
    with pytest.raises(BadInput, match="list of texts"):
        bert.embed("time flies")
    with pytest.raises(BadInput, match="must be a string"):
        bert.encode(None)
    with pytest.raises(BadInput, match="Encoding from encode"):
        bert.attentions([2, 3])
    for method in ("qk", "scores", "value_vectors"):  # the rest of the API both backends share, too
        with pytest.raises(BadInput, match=rf"{method}\(\) takes an Encoding from encode"):
            getattr(bert, method)([2, 3], 0)


def test_torch_backend_checks_the_attentions_came_back(tiny_bert_dir):
    needed("transformers")
    model = load(str(tiny_bert_dir), backend="torch")
    enc = model.encode("time flies")
    model.traced = False  # as a family the trace does not map: the weights come from output_attentions
    with pytest.raises(BadInput, match="--backend numpy"):
        model.qk(enc, 0)
    model.model.set_attn_implementation("sdpa")  # transformers 5.x's default: no attention weights
    with pytest.raises(RuntimeFailure, match="returned 0 tensors for its 2 layers' attentions"):
        model.attentions(enc)


def test_missing_packages_say_what_to_install(tiny_bert_dir, monkeypatch):
    real = source.missing
    monkeypatch.setattr(source, "missing", lambda *m: [x for x in m if x in ("tokenizers", "safetensors")])
    with pytest.raises(BadInput, match=r"pip install -e '\.\[pretrained\]'"):
        load(str(tiny_bert_dir), backend="numpy")
    monkeypatch.setattr(source, "missing", lambda *m: list(m))
    with pytest.raises(BadInput, match=r"pip install -e '\.\[pretrained\]'"):
        load(str(tiny_bert_dir))
    with pytest.raises(BadInput, match=r"pip install -e '\.\[transformers\]'.*torch's CPU build"):
        load(str(tiny_bert_dir), backend="torch")
    monkeypatch.setattr(source, "missing", lambda *m: [x for x in m if x in ("torch", "transformers")])
    assert load(str(tiny_bert_dir)).backend == "numpy"
    monkeypatch.setattr(source, "missing", real)


def _fake_hub_cache(cache: Path, repo: str, model_dir: Path) -> None:
    """The layout huggingface_hub's cache uses: models--org--name/{refs/main, snapshots/<sha>/...}."""
    root = cache / ("models--" + repo.replace("/", "--"))
    sha = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(model_dir, root / "snapshots" / sha)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(sha)


def test_hub_ids_resolve_from_the_cache_and_an_uncached_one_offline_says_what_to_do(tiny_bert_dir, tmp_path):
    needed("huggingface_hub")
    cache = tmp_path / "hub"
    _fake_hub_cache(cache, "attn-test/tiny-bert", tiny_bert_dir)
    code = f"""
        from attncli.hf import load
        from attncli.errors import RuntimeFailure
        m = load("attn-test/tiny-bert")
        print(m.backend, m.name, m.layers, m.encode("time flies").tokens)
        try:
            load("attn-test/not-cached")
        except RuntimeFailure as exc:
            print("RuntimeFailure:", exc)
    """
    out = run_python(code, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().splitlines()
    assert first == "numpy attn-test/tiny-bert 2 ['[CLS]', 'time', 'fl', '##ies', '[SEP]']"
    assert second.startswith("RuntimeFailure: 'attn-test/not-cached' is not a directory here, and no model by "
                             "that id is in the local Hugging Face cache; HF_HUB_OFFLINE is set")
    assert "directory written by save_pretrained" in second
    assert "Traceback" not in out.stderr


def test_importing_the_wing_loads_no_optional_package():
    """`attn matrix` without --transformer may import the wing's names; the heavy packages wait for load()."""
    out = run_python("""
        import sys
        from attncli.hf import load, Pretrained, Encoding, NUMPY_MODEL_TYPES
        heavy = ("tokenizers", "safetensors", "huggingface_hub", "torch", "transformers")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_tokenizer_that_does_not_match_the_weights(tiny_bert_dir, tiny_roberta_dir, tmp_path):
    d = copy_model(tiny_bert_dir, tmp_path / "mismatch")
    shutil.copy(tiny_roberta_dir / "tokenizer.json", d / "tokenizer.json")  # ids up to 299, BERT's table has 124
    model = load(str(d), backend="numpy")
    with pytest.raises(RuntimeFailure, match="outside the model's embedding tables"):
        model.attentions(model.encode("zebra quiz " * 3))


def test_an_encoder_decoder_is_refused_by_numpy_and_by_a_single_stack_class(tmp_path):
    """T5 runs through transformers only (attncli.hf.backends.seq2seq, tests/hf/test_seq2seq.py):
    --backend numpy names it and points to torch; TorchPretrained, which reads one stack, refuses it."""
    transformers = needed("transformers")
    from attncli.hf.formats import source
    from attncli.hf.backends.torch_backend import TorchPretrained

    d = tmp_path / "t5"
    transformers.T5Config(d_model=8, d_ff=16, num_layers=1, num_heads=2, d_kv=4, vocab_size=10).save_pretrained(d)
    (d / "model.safetensors").write_bytes(b"")
    with pytest.raises(BadInput, match=r"'t5' is an encoder-decoder.*use --backend torch"):
        load(str(d), backend="numpy")
    with pytest.raises(BadInput, match=r"model '.*' \(t5\) is an encoder-decoder: load it with attncli.hf.load"):
        TorchPretrained(str(d), d, source.read_config(d))


def test_offline_reads_hf_hub_offline(monkeypatch):
    from attncli.hf.formats.source import offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert offline() is False
    for value, want in (("1", True), (" TRUE ", True), ("yes", True), ("on", True), ("0", False), ("", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert offline() is want, value


def test_a_hub_id_resolves_to_its_cached_snapshot(tiny_bert_dir, tmp_path, monkeypatch):
    """resolve(hub id): the snapshot huggingface_hub's cache holds (models--org--name/snapshots/<sha>,
    refs/main naming it); an uncached id offline is RuntimeFailure saying HF_HUB_OFFLINE is set."""
    import shutil

    huggingface_hub = needed("huggingface_hub")
    from attncli.hf.formats.source import resolve

    root = tmp_path / "hub" / "models--attn-test--tiny-bert"
    sha = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(tiny_bert_dir, root / "snapshots" / sha)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(sha)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve("attn-test/tiny-bert").resolve() == (root / "snapshots" / sha).resolve()
    with pytest.raises(RuntimeFailure, match=r"^'attn-test/not-cached' is not a directory here, and no model by "
                                             r"that id is in the local Hugging Face cache; HF_HUB_OFFLINE is set"):
        resolve("attn-test/not-cached")


def test_a_directory_of_pickles_names_the_first_three_sorted(tmp_path):
    """check_model_dir: only pickled weights is BadInput naming at most three of them, sorted."""
    from attncli.hf.formats.source import check_model_dir

    (tmp_path / "config.json").write_text("{}")
    for name in ("e.bin", "d.pt", "c.pth", "b.ckpt", "a.bin"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(BadInput) as caught:
        check_model_dir(tmp_path)
    assert str(caught.value).startswith(f"'{tmp_path}' has only pickled weights (a.bin, b.ckpt, c.pth), which attn "
                                        "never loads (unpickling can run code)")
