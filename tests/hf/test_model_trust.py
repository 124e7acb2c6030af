"""A model directory from a stranger (issue 20): no code from it ever runs, nothing is unpickled,
no weight is silently dropped or made up, NaN is damage, every file is read through the checked
door and every config field is validated before anything is allocated.

Each test breaks a copy of a tiny random model (tests/_transformer_fixtures.py) and runs the
command a user would: exit 2 for a model attn refuses on principle, exit 1 for a damaged one, a
one-line message, never a traceback, never "internal error", nothing on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _special_files import machine_device
from conftest import needed
from _tolerance import f32_close, f32_size
from typer.testing import CliRunner

from attncli.cli.main import app

needed("transformers")
needed("safetensors")

SENTENCE = "time flies like an arrow"


def run(*args, input=None):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


def refused(result, code: int, *needles: str) -> str:
    """The run ended with ``code``, one clear message naming ``needles`` (after any progress note),
    nothing on stdout."""
    err = flat(result.stderr)
    assert result.exit_code == code, (result.exit_code, result.stdout[-500:], err)
    assert result.stdout == "", result.stdout[:300]
    assert "error: " in err and "internal error" not in err and "Traceback" not in err, err
    err = err[err.index("error: "):]
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_config(d: Path, **fields) -> Path:
    config = json.loads((d / "config.json").read_text())
    config.update(fields)
    (d / "config.json").write_text(json.dumps(config))
    return d


def edit_weights(d: Path, change) -> Path:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(d / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def matrix(d: Path, backend: str = "auto", *extra, input=None):
    return run("matrix", SENTENCE, "--transformer", d, "--backend", backend, "--json", *extra, input=input)


# -- 1. no code from a model directory, nothing unpickled ------------------------------------------------


def custom_code_model(src: Path, dst: Path, where: str) -> Path:
    """A model whose config.json (or tokenizer_config.json) maps its classes to a Python file beside
    it; the file, if ever imported, writes a marker."""
    d = copy(src, dst)
    marker = d.parent / f"{d.name}-ran"
    (d / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nfrom transformers import BertModel as Model\n"
                               "from transformers import BertConfig as Config\n")
    target = d / where
    data = json.loads(target.read_text())
    data["auto_map"] = {"AutoConfig": "evil.Config", "AutoModel": "evil.Model", "AutoTokenizer": ["evil.Model", None]}
    target.write_text(json.dumps(data))
    return d


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_a_model_that_needs_custom_code_is_refused_before_anything_is_asked(tiny_bert_dir, tmp_path, where, backend):
    d = custom_code_model(tiny_bert_dir, tmp_path / "custom", where)
    result = matrix(d, backend, input="y\ny\n")  # a 'y' on stdin must never run it
    refused(result, 2, "custom code", where, "auto_map")
    assert not (tmp_path / "custom-ran").exists()


def test_without_the_up_front_refusal_transformers_still_runs_no_code(tiny_bert_dir, tmp_path):
    """trust_remote_code=False on every transformers call is the second wall: with check_trust
    disabled, the model still fails to load (exit 1) and the Python file never runs."""
    d = custom_code_model(tiny_bert_dir, tmp_path / "custom", "config.json")
    code = ("import sys; from attncli.hf.checks import config_check; config_check.check_trust = lambda *a: None\n"
            "from attncli.cli.entry import main; sys.argv = ['attn'] + sys.argv[1:]; main()")
    proc = subprocess.run([sys.executable, "-c", code, "matrix", SENTENCE, "--transformer", str(d), "--backend", "torch",
                           "--json"], input="y\ny\n", capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr)  # transformers' own BertModel, or a refusal
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "custom code" not in proc.stdout + proc.stderr  # never asked
    assert not (tmp_path / "custom-ran").exists()


def test_a_model_type_transformers_does_not_know_is_refused(tiny_bert_dir, tmp_path):
    d = edit_config(copy(tiny_bert_dir, tmp_path / "unknown"), model_type="evilbert")
    refused(matrix(d), 2, "model_type 'evilbert'", "does not know", "never runs code")


def test_a_pickle_only_checkpoint_is_refused_with_how_to_convert_it(tiny_bert_dir, tmp_path):
    d = copy(tiny_bert_dir, tmp_path / "pickled")
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    for backend in ("auto", "torch"):
        refused(matrix(d, backend), 2, "pytorch_model.bin", "never loads", "safetensors", "save_pretrained")


# -- 2. never silently wrong ---------------------------------------------------------------------------


def add_unused(tensors):
    tensors["encoder.layer.0.attention.self.distance_embedding.weight"] = np.ones((79, 8), np.float32)


def drop_one(tensors):
    del tensors["encoder.layer.1.attention.self.key.bias"]


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_an_unused_weight_is_an_error_and_with_the_flag_a_warning(tiny_bert_dir, tmp_path, backend):
    d = edit_weights(copy(tiny_bert_dir, tmp_path / "extra"), add_unused)
    refused(matrix(d, backend), 1, "not used by the model", "distance_embedding.weight", "--allow-missing-weights")
    result = matrix(d, backend, "--allow-missing-weights")
    assert result.exit_code == 0, result.stderr
    assert "warning:" in result.stderr and "distance_embedding" in flat(result.stderr)
    json.loads(result.stdout)  # the warning stays on stderr: stdout is the JSON alone


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_a_missing_weight_is_an_error_naming_it(tiny_bert_dir, tmp_path, backend):
    d = edit_weights(copy(tiny_bert_dir, tmp_path / "missing"), drop_one)
    err = refused(matrix(d, backend), 1, "not in the checkpoint", "encoder.layer.1.attention.self.key.bias")
    if backend == "auto":  # the numpy path cannot make a weight up: it says what can
        assert "--backend torch --allow-missing-weights" in err
        refused(matrix(d, backend, "--allow-missing-weights"), 1, "not in the checkpoint")
    else:
        result = matrix(d, backend, "--allow-missing-weights")
        assert result.exit_code == 0 and "would be random" in flat(result.stderr)


def test_a_task_head_beside_the_base_model_is_not_counted(tiny_bert_dir, tmp_path):
    """A checkpoint saved from BertForMaskedLM ("bert." prefix and cls.* head): the head is not
    the base model's, and attention is computed the same."""
    def as_masked_lm(tensors):
        for name in list(tensors):
            tensors["bert." + name] = tensors.pop(name)
        tensors["cls.predictions.bias"] = np.zeros(tensors["bert.embeddings.word_embeddings.weight"].shape[0], np.float32)

    d = edit_weights(copy(tiny_bert_dir, tmp_path / "mlm"), as_masked_lm)
    plain = json.loads(matrix(tiny_bert_dir, "numpy").stdout)
    for backend in ("numpy", "torch"):
        result = matrix(d, backend)
        assert result.exit_code == 0, result.stderr
        f32_close(json.loads(result.stdout)["head_weights"], plain["head_weights"], *f32_size(d), per_element=True)  # torch: float32


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_relative_position_embeddings_are_refused_on_both_backends(tiny_bert_dir, tmp_path, backend):
    d = edit_config(edit_weights(copy(tiny_bert_dir, tmp_path / "relative"), add_unused),
                    position_embedding_type="relative_key")
    err = refused(matrix(d, backend), 2, "relative_key", "neither")
    assert "--backend torch" not in err


@pytest.mark.parametrize("kind,drop", [("gpt2", ("tokenizer.json",)), ("bert", ("tokenizer.json", "vocab.txt"))])
def test_a_tokenizer_that_knows_no_word_is_refused(tiny_gpt2_dir, tiny_bert_dir, tmp_path, kind, drop):
    d = copy(tiny_gpt2_dir if kind == "gpt2" else tiny_bert_dir, tmp_path / "no-tokenizer")
    for name in drop:
        (d / name).unlink()
    refused(matrix(d), 1, "tokenizer", "tokenizer.json")


def nan_in(name: str, value: float = np.nan):
    def change(tensors):
        tensors[name] = tensors[name].copy()
        tensors[name].flat[0] = value
    return change


BERT_KEY = "encoder.layer.1.attention.self.key.weight"
GPT2_ATTN = "transformer.h.1.attn.c_attn.weight"  # GPT2LMHeadModel saves the base model under transformer.


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("command", [
    ("matrix", SENTENCE, "--json"),
    ("matrix", SENTENCE, "--model-view", "--json"),
    ("matrix", SENTENCE),
    ("heads", "--sentences", "2", "--json"),
])
def test_nan_weights_are_damage_in_every_view(tiny_bert_dir, tmp_path, backend, command):
    d = edit_weights(copy(tiny_bert_dir, tmp_path / "nan"), nan_in(BERT_KEY))
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat on the mat\ntime flies like an arrow\n")
    extra = ("--file", texts) if command[0] == "heads" else ()
    refused(run(*command, *extra, "--transformer", d, "--backend", backend), 1, "damaged model: NaN", BERT_KEY)


def test_nan_weights_are_damage_in_generate(tiny_gpt2_dir, tmp_path):
    d = edit_weights(copy(tiny_gpt2_dir, tmp_path / "nan"), nan_in(GPT2_ATTN))
    for extra in ((), ("--json",)):
        refused(run("generate", "the cat", "-n", "2", "--greedy", "--transformer", d, *extra), 1, "damaged model: NaN")


@pytest.mark.parametrize("backend,huge", [("numpy", np.float64(1e200)), ("torch", np.float32(3e38))])
def test_weights_that_overflow_are_damage_found_in_the_forward_pass(tiny_bert_dir, tmp_path, backend, huge):
    """Every weight finite, the scores q k^T not (float64 on the numpy path, float32 on torch): the
    per-layer check of the attention finds it."""
    def overflow(tensors):
        for part in ("query", "key"):
            name = f"encoder.layer.0.attention.self.{part}.weight"
            tensors[name] = np.full(tensors[name].shape, huge)

    d = edit_weights(copy(tiny_bert_dir, tmp_path / "huge"), overflow)
    refused(matrix(d, backend), 1, "damaged model: NaN in layer 0's attention")


def test_nan_in_an_encoder_is_damage_in_lookup(tmp_path, tiny_bert_dir):
    d = edit_weights(copy(tiny_bert_dir, tmp_path / "nan"), nan_in(BERT_KEY))
    refused(run("lookup", "colour", "--encoder", d), 1, "damaged model: NaN")
    refused(run("lookup", "colour", "--encoder", d, "--json"), 1, "damaged model: NaN")


# -- 3. every file through the checked door ---------------------------------------------------------------


def make_special(path: Path, kind: str) -> None:
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(machine_device("/dev/zero"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("name,backend", [
    ("config.json", "auto"), ("tokenizer.json", "auto"), ("tokenizer.json", "torch"),
    ("tokenizer_config.json", "auto"), ("tokenizer_config.json", "torch"), ("special_tokens_map.json", "torch"),
    ("model.safetensors", "auto"), ("vocab.txt", "torch"),
])
def test_a_special_file_in_the_model_directory_is_damage_at_once(tiny_bert_dir, tmp_path, kind, name, backend):
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    d = copy(tiny_bert_dir, tmp_path / "special")
    make_special(d / name, kind)
    what = "a FIFO" if kind == "fifo" else "a device"
    refused(matrix(d, backend), 1, f"damaged model: {name}: it is {what}, not a regular file")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["modules.json", "1_Pooling/config.json", "sentence_bert_config.json"])
def test_a_special_sentence_transformers_file_is_damage_at_once(tiny_bert_dir, tmp_path, name):
    d = copy(tiny_bert_dir, tmp_path / "special")
    (d / "modules.json").write_text(json.dumps([{"idx": 1, "name": "1", "path": "1_Pooling",
                                                 "type": "sentence_transformers.models.Pooling"}]))
    make_special(d / name, "fifo")
    refused(run("lookup", "colour", "--encoder", d), 1, "it is a FIFO, not a regular file")


def test_a_huge_tokenizer_config_is_refused_by_its_size(tiny_bert_dir, tmp_path):
    from attncli.hf.checks import config_check

    d = copy(tiny_bert_dir, tmp_path / "huge")
    with open(d / "tokenizer_config.json", "ab") as fh:
        fh.truncate(config_check.CONFIG_BYTES + 1)  # sparse: no disk used
    refused(matrix(d), 1, "damaged model: tokenizer_config.json", "more than")


@pytest.mark.parametrize("given", ["~nosuchuser/model", "~nosuchuser"])
def test_a_path_in_the_home_of_no_such_user(given):
    refused(run("matrix", SENTENCE, "--transformer", given), 2, "no such model or directory")


# -- 4. damaged or absurd configs, validated up front --------------------------------------------------------

BAD_FIELDS = [
    ("hidden_size", "32", "not a whole number"),
    ("hidden_size", 0, "outside"),
    ("num_attention_heads", -4, "outside"),
    ("num_attention_heads", 5, "do not divide"),
    ("num_hidden_layers", 10**6, "outside"),
    ("num_hidden_layers", True, "not a whole number"),
    ("vocab_size", 10**7, "more than its"),
    ("max_position_embeddings", 10**6, "more than its"),
    ("intermediate_size", [37], "not a whole number"),
    ("layer_norm_eps", -1, "small positive number"),
    ("pad_token_id", -5, "not a token id"),
    ("is_decoder", "no", "not true or false"),
    ("hidden_act", 3, "not a name"),
]


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("field,value,why", BAD_FIELDS)
def test_a_damaged_config_field_is_named(tiny_bert_dir, tmp_path, backend, field, value, why):
    d = edit_config(copy(tiny_bert_dir, tmp_path / "bad"), **{field: value})
    refused(matrix(d, backend), 1, "damaged model: config.json", why)


@pytest.mark.parametrize("deep", [40, 100_000])
def test_deeply_nested_json_is_damage(tiny_bert_dir, tmp_path, deep):
    d = copy(tiny_bert_dir, tmp_path / "deep")
    config = (d / "config.json").read_text()
    (d / "config.json").write_text(config.rstrip()[:-1] + ', "nest": ' + "[" * deep + "]" * deep + "}")
    refused(matrix(d), 1, "damaged model: config.json", "nests more than")


def test_a_nan_in_config_json_is_damage(tiny_bert_dir, tmp_path):
    """NaN is not JSON: refused when parsed, even in a field attn does not otherwise check."""
    d = copy(tiny_bert_dir, tmp_path / "nan")
    text = (d / "config.json").read_text().replace('"initializer_range": 0.4', '"initializer_range": NaN')
    assert "NaN" in text
    (d / "config.json").write_text(text)
    refused(matrix(d), 1, "damaged model: config.json", "NaN")


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_a_position_table_shorter_than_the_config_says(tiny_bert_dir, tmp_path, backend):
    name = "embeddings.position_embeddings.weight"
    d = edit_weights(copy(tiny_bert_dir, tmp_path / "short"), lambda t: t.update({name: t[name][:20].copy()}))
    refused(matrix(d, backend), 1, "embeddings.position_embeddings.weight", "(20, 32)")


@pytest.mark.parametrize("kind,name,shape", [
    ("bert", "encoder.layer.0.attention.self.value.weight", (32, 16)),
    ("gpt2", "transformer.h.0.mlp.c_fc.weight", (32, 36)),
])
def test_a_weight_of_the_wrong_shape_is_damage_on_the_numpy_path(tiny_bert_dir, tiny_gpt2_dir, tmp_path, kind, name,
                                                                shape):
    src = tiny_bert_dir if kind == "bert" else tiny_gpt2_dir
    d = edit_weights(copy(src, tmp_path / "shape"), lambda t: t.update({name: np.ones(shape, np.float32)}))
    refused(matrix(d, "numpy"), 1, f"damaged model: {name.removeprefix('transformer.')}: shape {shape}")


# -- --allow-missing-weights where --transformer / --encoder applies ----------------------------------------


def test_the_flag_reaches_explore_heads_generate_and_lookup(tiny_bert_dir, tiny_gpt2_dir, tmp_path):
    from attncli.errors import RuntimeFailure
    from attncli.explore.checkpoint_state import compute
    from attncli.explore.state import ExploreState

    bert = edit_weights(copy(tiny_bert_dir, tmp_path / "bert-extra"), add_unused)
    state = ExploreState(transformer=str(bert))
    with pytest.raises(RuntimeFailure, match="distance_embedding"):
        compute(state, {})
    allowed = ExploreState(transformer=str(bert), allow_missing_weights=True)
    assert compute(allowed, {}).attentions.shape[0] == 2
    assert "--allow-missing-weights" in allowed.transformer_options(False)  # the copied command carries it

    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat on the mat\n")
    refused(run("heads", "--transformer", bert, "--file", texts, "--json"), 1, "distance_embedding")
    result = run("heads", "--transformer", bert, "--file", texts, "--json", "--allow-missing-weights")
    assert result.exit_code == 0 and "distance_embedding" in flat(result.stderr)
    json.loads(result.stdout)

    refused(run("lookup", "colour", "--encoder", bert), 1, "distance_embedding")
    result = run("lookup", "colour", "--encoder", bert, "--allow-missing-weights", "--json")
    assert result.exit_code == 0 and "distance_embedding" in flat(result.stderr)

    def gpt2_extra(tensors):
        tensors["transformer.h.0.attn.rotary.weight"] = np.ones((4, 4), np.float32)

    gpt2 = edit_weights(copy(tiny_gpt2_dir, tmp_path / "gpt2-extra"), gpt2_extra)
    refused(run("generate", "the cat", "-n", "2", "--greedy", "--transformer", gpt2), 1, "h.0.attn.rotary.weight")
    result = run("generate", "the cat", "-n", "2", "--greedy", "--transformer", gpt2, "--json", "--allow-missing-weights")
    assert result.exit_code == 0 and "rotary" in flat(result.stderr)
    json.loads(result.stdout)


@pytest.mark.parametrize("argv", [
    ("matrix", SENTENCE, "--allow-missing-weights"),
    ("heads", "--allow-missing-weights"),
    ("generate", "the cat", "--allow-missing-weights"),
    ("lookup", "colour", "--allow-missing-weights"),
    ("explore", "--allow-missing-weights"),
])
def test_the_flag_without_a_pretrained_model_is_bad_input(argv):
    refused(run(*argv), 2, "--allow-missing-weights needs")


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_nan_is_found_in_every_float_dtype_on_disk(tiny_bert_dir, tmp_path, dtype):
    """The load-time scan views the file in the tensor's own dtype: a NaN in float16 or float64."""
    def cast_with_nan(tensors):
        for name in list(tensors):
            if tensors[name].dtype.kind == "f":
                tensors[name] = tensors[name].astype(dtype)
        tensors[BERT_KEY][-1, -1] = np.nan

    d = edit_weights(copy(tiny_bert_dir, tmp_path / "cast"), cast_with_nan)
    refused(matrix(d, "numpy"), 1, "damaged model: NaN in the weight", BERT_KEY)
