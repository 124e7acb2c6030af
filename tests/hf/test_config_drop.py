"""Each optional config.json field dropped in turn (and a few added beside the ones saved): attn's
NumPy attentions equal those of transformers (eager, ``output_attentions``) loaded from the same
edited folder, to 1e-5, for every family the NumPy path runs; or attn refuses the folder.

A refusal is allowed where transformers would not run the model either (its from_pretrained or
forward pass raises), and for a field that shapes the checkpoint (a size, a bias or tie flag):
without it the config describes other tensors, which attn reports as not matching (transformers
fills them with random weights or raises). Tiny random models from tests/_llama_fixtures.py and
tests/_transformer_fixtures.py; the token ids are attn's, fed to both.
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

from _llama_fixtures import build_decoder, build_mpnet  # noqa: E402
from _transformer_fixtures import BUILDERS  # noqa: E402
from _tolerance import f32_close, f32_size  # noqa: E402
from attncli.errors import BadInput, RuntimeFailure  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.hf.checks.config_defaults import DEFAULTS, ROPE_FIELDS  # noqa: E402
from attncli.hf.families import registry  # noqa: E402

torch.set_num_threads(1)
TEXT = "the cat sat on the mat and the dog sat on the log"
DECODERS = ("llama", "llama-bias", "llama3", "mistral", "qwen2", "gemma", "gemma-bias", "phi3", "qwen3", "gemma3")
ENCODERS = ("bert", "roberta", "distilbert", "electra", "gpt2", "mpnet")
# fields that say which tensors the checkpoint holds, or their shapes: dropped, the config describes another model
SHAPING = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "attention_bias", "mlp_bias", "tie_word_embeddings", "n_positions",
           "n_embd", "n_layer", "n_head", "n_inner", "dim", "hidden_dim", "n_layers", "n_heads", "type_vocab_size",
           "embedding_size", "relative_attention_num_buckets"}
ENCODER_SHAPING = {"max_position_embeddings"}  # an encoder's position table
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
ADDED = [  # (folder, fields set beside the saved ones)
    ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 3.0}}),  # rope_scaling wins over rope_parameters
    ("llama", {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 300.0}),
    ("llama", {"partial_rotary_factor": 0.5}),  # Llama's default RoPE rotates whole heads
    ("llama3", {"original_max_position_embeddings": 32}),  # the top-level one wins
    ("llama3", {"rope_scaling": {**LLAMA3, "factor": 2.0}, "original_max_position_embeddings": 8}),
    ("gemma", {"hidden_act": "gelu"}),  # the legacy name of the tanh approximation
    ("gemma-bias", {"attention_bias": False}),
    ("mistral", {"sliding_window": None}),
    ("qwen2", {"use_sliding_window": False, "layer_types": None}),
    ("qwen2", {"layer_types": None, "max_window_layers": 0}),
    ("qwen3", {"use_sliding_window": False, "layer_types": None}),
    ("qwen3", {"layer_types": None, "max_window_layers": 0, "attention_bias": False}),
    ("phi3", {"sliding_window": None, "rope_parameters": None, "partial_rotary_factor": 0.25}),
    ("phi3", {"rope_scaling": {"rope_type": "default", "partial_rotary_factor": 0.75}}),
    ("gemma3", {"rope_parameters": None, "rope_theta": 300.0, "rope_local_base_freq": 50.0}),  # older configs
    ("gemma3", {"rope_scaling": {"rope_type": "linear", "factor": 3.0}}),  # the global layers' alone
    ("gemma3", {"rope_parameters": {"full_attention": {"rope_type": "llama3", "rope_theta": 300.0, **{
        k: v for k, v in LLAMA3.items() if k != "rope_type"}}}, "rope_local_base_freq": 20.0}),
    ("gemma3", {"layer_types": None, "sliding_window_pattern": 2}),  # layer 1 global
    ("gemma3", {"layer_types": None, "sliding_window_pattern": 1}),  # every layer global
    ("gemma3", {"query_pre_attn_scalar": 3, "sliding_window": 2}),
    ("gemma3", {"attn_logit_softcapping": 0.3}),  # transformers' Gemma 3 does not apply it
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True, "activation_function": "relu", "scale_attn_weights": False}),
    ("bert", {"hidden_act": "gelu_new", "layer_norm_eps": 1e-3}),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("config-drop")

    @functools.lru_cache(maxsize=None)
    def build(kind: str) -> Path:
        if kind == "gemma-bias":
            return build_decoder("gemma", base / kind, attention_bias=True)
        if kind in DECODERS:
            return build_decoder(kind, base / kind)
        if kind == "mpnet":
            return build_mpnet(base / kind)
        return BUILDERS[kind](base / kind)
    return build


def edited(src: Path, dst: Path, drop: str | None = None, inside: str | None = None, **changes) -> Path:
    """A copy of ``src`` whose config.json lacks ``drop`` (or rope_parameters' ``inside``) and holds ``changes``."""
    shutil.copytree(src, dst)
    config = json.loads((src / "config.json").read_text())
    if drop:
        del config[drop]
    if inside:
        del config["rope_parameters"][inside]
    config.update(changes)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def theirs(path: Path, ids: list[int], decoder: bool) -> np.ndarray | None:
    """(L, h, T, T) transformers' attentions, float64; None when it will not load or run the model."""
    auto = transformers.AutoModelForCausalLM if decoder else transformers.AutoModel
    try:
        model = auto.from_pretrained(str(path), attn_implementation="eager", dtype=torch.float32).eval()
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
    except Exception:
        return None
    return np.stack([a[0].double().numpy() for a in out.attentions])


def check(path: Path, what: str, shaping: bool) -> str:
    """attn's and transformers' attentions agree, or attn refuses where it may: "ran" or "refused"."""
    try:
        model = load(str(path), backend="numpy")
    except (BadInput, RuntimeFailure) as exc:
        if shaping:
            return "refused"
        decoder = "CausalLM" in str(json.loads(Path(path, "config.json").read_text()).get("architectures"))
        want = theirs(path, [1, 5, 7, 9], decoder)
        assert want is None, f"{what}: attn refused ({exc}) a folder transformers runs"
        return "refused"
    enc = model.encode(TEXT)
    got = model.attentions(enc)  # (L, h, T, T)
    want = theirs(path, enc.ids, model.is_decoder)
    assert want is not None, f"{what}: attn ran a folder transformers will not run"
    assert got.shape == want.shape, what
    # transformers in float32; at the weights' largest, not per element: a config may leave the scores
    # unscaled (scale_attn_weights false), larger than per_element's estimate of their size
    f32_close(got, want, *f32_size(path), scale=1.0, what=what)
    return "ran"


# the defaults every family reads: config_defaults' tables and a family file's own (qwen3.py's)
TABLES = {**DEFAULTS, **{t: vars(f.module)["DEFAULTS"] for f in registry.FAMILIES if "DEFAULTS" in vars(f.module)
                         for t in f.model_types}}


def optional_fields(config: dict) -> list[str]:
    read = set(TABLES[config["model_type"]])
    if config["model_type"] in TABLES and "rope_parameters" in config:
        read |= set(ROPE_FIELDS)
    return sorted(k for k in config if k in read)


@pytest.mark.parametrize("kind", DECODERS + ENCODERS)
def test_each_field_dropped_in_turn_reads_as_transformers_reads_it(kind, folders, tmp_path):
    src = folders(kind)
    config = json.loads((src / "config.json").read_text())
    outcomes = {"(as saved)": check(edited(src, tmp_path / "saved"), f"{kind} as saved", False)}
    encoder = kind in ENCODERS
    for key in optional_fields(config):
        shaping = key in SHAPING or (encoder and key in ENCODER_SHAPING)
        outcomes[key] = check(edited(src, tmp_path / key, drop=key), f"{kind} without {key}", shaping)
    for inside in sorted(config.get("rope_parameters") or {}):
        outcomes["rope_parameters." + inside] = check(edited(src, tmp_path / f"rope-{inside}", inside=inside),
                                                      f"{kind} without rope_parameters.{inside}", False)
    assert [k for k, v in outcomes.items() if v == "ran"], (kind, outcomes)  # compared, not only refused


@pytest.mark.parametrize("kind, changes", ADDED, ids=[f"{k}-{'-'.join(c)}" for k, c in ADDED])
def test_fields_added_beside_the_saved_ones_read_as_transformers_reads_them(kind, changes, folders, tmp_path):
    outcome = check(edited(folders(kind), tmp_path / "m", **changes), f"{kind} with {changes}",
                    shaping="attention_bias" in changes)
    assert outcome == "ran" or "attention_bias" in changes, (kind, changes, outcome)


@pytest.mark.parametrize("backend", ["auto", "numpy"])
def test_a_gemma_with_attention_bias_runs_with_its_biases_on_the_numpy_path(backend, folders):
    """Gemma's modeling applies attention_bias (q, k, v and o): the NumPy path reads those biases,
    so the folder runs there, equal to transformers, with no hint to drop them."""
    from typer.testing import CliRunner

    from attncli.cli.main import app

    path = folders("gemma-bias")
    model = load(str(path), backend=backend)
    assert model.backend == "numpy"
    enc = model.encode(TEXT)
    f32_close(model.attentions(enc), theirs(path, enc.ids, True), *f32_size(path), per_element=True)  # float32 there
    result = CliRunner().invoke(app, ["matrix", TEXT, "--transformer", str(path), "--backend", backend, "--json"])
    assert result.exit_code == 0 and "allow-missing-weights" not in result.stderr, result.output


@pytest.mark.parametrize("kind, changes, words", [
    ("gemma", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor with rope type 'linear'"),
])
def test_a_field_the_numpy_path_cannot_honour_is_refused_by_name_and_auto_hands_it_to_transformers(
        kind, changes, words, folders, tmp_path):
    from typer.testing import CliRunner

    from attncli.cli.main import app

    path = edited(folders(kind), tmp_path / "m", **changes)
    result = CliRunner().invoke(app, ["matrix", TEXT, "--transformer", str(path), "--backend", "numpy"])
    assert result.exit_code == 2 and words in " ".join(result.stderr.split()), result.output
    if kind == "gemma":  # (transformers' Llama fails on the other in its forward pass)
        assert load(str(path), backend="auto").backend == "torch"
