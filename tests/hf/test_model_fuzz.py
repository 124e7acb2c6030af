"""Fuzzing a tiny saved model's files (issue 20): whatever a stranger's config.json, tokenizer.json or
safetensors header holds, ``attn matrix --transformer`` ends with exit 0, 1 or 2, never a
traceback or "internal error", within a bounded time, and a success prints strict, finite JSON.

Hypothesis mutates one file of a copy of the tiny BERT per example (a field set to any JSON value,
a value deep in tokenizer.json replaced, a tensor's header entry changed, bytes cut off). The
examples are few (the whole file runs in well under a minute) and the commands run in process.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import pytest

from conftest import needed
from _tolerance import f32_close, f32_size
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from attncli.cli.main import app

needed("transformers")
needed("safetensors")

SENTENCE = "time flies like an arrow"
FIELDS = ["model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "hidden_act", "pad_token_id",
          "position_embedding_type", "is_decoder", "architectures", "torch_dtype", "initializer_range"]
FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FUZZ_TORCH = settings(FUZZ, max_examples=8)  # each example loads transformers' model: slower

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, 1, -1, 3, 7, 10**12]),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
plausible = st.one_of(st.integers(-2, 70), st.sampled_from([0, 1, 2, 4, 5, 8, 31, 32, 33, 37, 40, 64, 10**6, 2**31, 2**63]),
                      st.sampled_from(["bert", "gpt2", "roberta", "distilbert", "electra", "llama", "gelu", "relu",
                                       "relative_key", "absolute", "", "float16"]),
                      st.floats(-1, 1), st.booleans(), st.none())  # near what a real field holds
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                           max_leaves=6)


def run_matrix(d: Path, backend: str = "auto"):
    import attncli.cli.common as cli_app

    cli_app._consoles.clear()
    return CliRunner().invoke(app, ["matrix", SENTENCE, "--transformer", str(d), "--backend", backend, "--json"])


def check_outcome(result) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr[-800:], repr(result.exception))
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr[-800:]
    if result.exit_code == 0:
        doc = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in --json"))
        assert doc["tokens"] and all(math.isfinite(x) for row in doc["head_weights"] for r in row for x in r)
    else:
        assert result.stdout == "" and result.stderr.startswith("error: "), (result.stdout[:200], result.stderr[:200])


@pytest.fixture
def fresh(tiny_bert_dir, tmp_path):
    """A function giving a fresh copy of the tiny BERT for each Hypothesis example."""
    count = iter(range(10**6))

    def make() -> Path:
        d = tmp_path / f"m{next(count)}"
        shutil.copytree(tiny_bert_dir, d)
        return d
    return make


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_fuzzed_config_fields(fresh, backend):
    @(FUZZ if backend == "auto" else FUZZ_TORCH)
    @given(fields=st.dictionaries(st.sampled_from(FIELDS), st.one_of(plausible, plausible, json_values), min_size=1,
                                  max_size=3))
    def one(fields):
        d = fresh()
        config = json.loads((d / "config.json").read_text())
        config.update(fields)
        (d / "config.json").write_text(json.dumps(config))
        check_outcome(run_matrix(d, backend))
    one()


def _paths(value, prefix=()):
    """Every path (tuple of keys / indices) into a JSON value, up to a few thousand."""
    stack, out = [(value, prefix)], []
    while stack and len(out) < 5000:
        item, path = stack.pop()
        out.append(path)
        if isinstance(item, dict):
            stack.extend((v, path + (k,)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(item))
    return out


@pytest.mark.timeout(240)
def test_fuzzed_tokenizer_json(fresh):
    @FUZZ
    @given(data=st.data())
    def one(data):
        d = fresh()
        raw = (d / "tokenizer.json").read_text()
        if data.draw(st.booleans(), label="cut"):
            cut = data.draw(st.integers(0, len(raw)), label="at")
            (d / "tokenizer.json").write_text(raw[:cut])
        else:
            doc = json.loads(raw)
            paths = [p for p in _paths(doc) if p]
            path = data.draw(st.sampled_from(sorted(paths, key=repr)), label="path")
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = data.draw(st.one_of(plausible, json_values), label="value")
            (d / "tokenizer.json").write_text(json.dumps(doc))
        check_outcome(run_matrix(d))
    one()


def _header(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8: 8 + n]), data[8 + n:]


@pytest.mark.timeout(240)
def test_fuzzed_safetensors_header(fresh):
    @FUZZ
    @given(data=st.data())
    def one(data):
        d = fresh()
        path = d / "model.safetensors"
        header, body = _header(path)
        how = data.draw(st.sampled_from(["entry", "length", "cut"]), label="how")
        if how == "cut":
            raw = path.read_bytes()
            path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1), label="at")])
        elif how == "length":
            text = json.dumps(header).encode()
            n = data.draw(st.sampled_from([0, 1, len(text) - 1, len(text) + 1, 2**40, 2**64 - 1]), label="n")
            path.write_bytes(struct.pack("<Q", n) + text + body)
        else:
            name = data.draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")), label="tensor")
            field = data.draw(st.sampled_from(["dtype", "shape", "data_offsets"]), label="field")
            header[name][field] = data.draw(st.one_of(
                plausible, json_values, st.sampled_from(["F16", "BF16", "I64", "F64", "U8", "BOOL"]),
                st.lists(st.integers(0, 100), max_size=3), st.lists(st.integers(-10, 2**62), min_size=2, max_size=2)),
                label="value")
            text = json.dumps(header).encode()
            path.write_bytes(struct.pack("<Q", len(text)) + text + body)
        check_outcome(run_matrix(d))
    one()


# --- config defaults: a Llama-family config with fields dropped or changed means what transformers says --------

DROP = "<dropped>"
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
CONFIG_CHOICES = {  # field -> values a stranger's config might hold for it (DROP: the field left out)
    "rms_norm_eps": [DROP, 1e-5, 1e-3, None], "hidden_act": [DROP, "gelu", "silu", "gelu_pytorch_tanh", "relu", None],
    "rope_parameters": [DROP, None, {"rope_type": "linear", "factor": 2.0}, {"rope_type": "default", "rope_theta": 500.0},
                        dict(LLAMA3, original_max_position_embeddings=16), {"rope_type": "yarn", "factor": 2.0}],
    "rope_scaling": [DROP, None, {}, {"type": "linear", "factor": 3.0}, dict(LLAMA3)],
    "rope_theta": [DROP, 100.0, None], "partial_rotary_factor": [DROP, 0.5, 1.0],
    "original_max_position_embeddings": [DROP, 8, 32], "max_position_embeddings": [DROP, 64, 128],
    "sliding_window": [DROP, None, 2, 4], "use_sliding_window": [DROP, True, False], "max_window_layers": [DROP, 0, 1, 2],
    "layer_types": [DROP, None], "tie_word_embeddings": [DROP, True, False], "num_key_value_heads": [DROP],
    "head_dim": [DROP, None], "attention_bias": [DROP, True, False], "mlp_bias": [DROP, False],
    "use_bidirectional_attention": [DROP, False, None],
    # Gemma 3's own (the other families' transformers classes ignore them)
    "query_pre_attn_scalar": [DROP, 3, 64.0], "sliding_window_pattern": [DROP, 1, 2], "rope_local_base_freq": [DROP, 50.0],
    "hidden_activation": [DROP, "gelu", "silu"], "attn_logit_softcapping": [DROP, None, 0.5, 30],
    "final_logit_softcapping": [DROP, None, 2.0],
}
DECODER_KINDS = ("llama", "llama3", "mistral", "qwen2", "gemma", "phi3", "qwen3", "gemma3")


@pytest.fixture(scope="module")
def decoder_dirs(tmp_path_factory):
    from functools import lru_cache

    from _llama_fixtures import build_decoder

    base = tmp_path_factory.mktemp("fuzz-decoders")
    return lru_cache(maxsize=None)(lambda kind: build_decoder(kind, base / kind))


@pytest.mark.timeout(240)
def test_fuzzed_llama_family_config_fields_read_as_transformers_reads_them(decoder_dirs, tmp_path):
    """Whatever subset of a Llama-family config's optional fields is dropped or changed, attn's NumPy
    path either refuses the folder (exit 1 or 2, by name) or shows transformers' own attentions
    (eager, loaded from the same folder) to 1e-5: a default or a precedence of its own would show."""
    import numpy as np

    torch = needed("torch")
    transformers = needed("transformers")
    from attncli.errors import BadInput, RuntimeFailure
    from attncli.hf import load

    count = iter(range(10**6))

    @settings(FUZZ, max_examples=20)
    @given(kind=st.sampled_from(DECODER_KINDS),
           fields=st.dictionaries(st.sampled_from(sorted(CONFIG_CHOICES)), st.integers(0, 5), min_size=1, max_size=4))
    def one(kind, fields):
        d = tmp_path / f"m{next(count)}"
        shutil.copytree(decoder_dirs(kind), d)
        config = json.loads((d / "config.json").read_text())
        for key, pick in fields.items():
            value = CONFIG_CHOICES[key][pick % len(CONFIG_CHOICES[key])]
            if value == DROP:
                config.pop(key, None)
            else:
                config[key] = value
        (d / "config.json").write_text(json.dumps(config))
        check_outcome(run_matrix(d, "numpy"))
        try:
            model = load(str(d), backend="numpy")
        except (BadInput, RuntimeFailure):
            return  # refused by name: allowed
        enc = model.encode(SENTENCE)
        got = model.attentions(enc)  # (L, h, T, T)
        try:
            reference = transformers.AutoModelForCausalLM.from_pretrained(str(d), attn_implementation="eager",
                                                                          dtype=torch.float32).eval()
            with torch.no_grad():
                out = reference(torch.tensor([enc.ids]), output_attentions=True)
        except Exception as exc:
            pytest.fail(f"attn ran a {kind} config transformers will not run ({type(exc).__name__}): {config}")
        want = np.stack([a[0].double().numpy() for a in out.attentions])
        assert got.shape == want.shape, (kind, config)
        f32_close(got, want, *f32_size(d), per_element=True, what=f"{kind} {config}")  # transformers in float32
    one()
