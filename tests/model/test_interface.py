"""The written model interface (attncli/model/interface.py): every model implements it, what it can
do is data (``can``) and its methods do it, a missing capability is one refusal sentence, and no
module outside the model wings probes a model or reaches a private part of one."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from typer.testing import CliRunner  # noqa: E402

import attncli  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402
from attncli.model.interface import CAPABILITIES, Model, has, refusal, require  # noqa: E402
from attncli.model.trace import Intervention, site  # noqa: E402

PKG = Path(attncli.__file__).parent
TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def models(tiny_bert_dir, tiny_gpt2_dir, tmp_path_factory):
    from _llama_fixtures import build_decoder
    from _seq2seq_fixtures import build_t5

    d = tmp_path_factory.mktemp("interface")
    return {
        "numpy-bert": load(str(tiny_bert_dir), backend="numpy"),
        "numpy-gpt2": load(str(tiny_gpt2_dir), backend="numpy"),
        "numpy-llama": load(str(build_decoder("llama", d / "llama")), backend="numpy"),
        "torch-gpt2": load(str(tiny_gpt2_dir), backend="torch"),
        "torch-bert": load(str(tiny_bert_dir), backend="torch"),
        "seq2seq-t5": load(str(build_t5(d / "t5")), backend="auto"),
    }


EXPECTED = {  # what each kind of model can do, written out
    "numpy-bert": {"trace", "resume", "batch", "rerun", "output_weight", "qk", "pairs", "stacks"} - {"stacks"},
    "numpy-gpt2": {"trace", "resume", "batch", "rerun", "output_weight", "qk", "unembed", "dla", "next_token", "lens",
                   "cache", "grad"},
    "numpy-llama": {"trace", "resume", "batch", "rerun", "output_weight", "qk", "unembed", "dla", "next_token", "lens",
                    "cache", "grad"},
    "torch-gpt2": {"trace", "resume", "qk", "next_token", "cache", "grad"},
    "torch-bert": {"trace", "resume", "qk", "pairs"},
    "seq2seq-t5": {"stacks", "pairs"},
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_every_model_implements_the_protocol_and_says_what_it_can_do(models, kind):
    model = models[kind]
    assert isinstance(model, Model)
    assert model.can == frozenset(EXPECTED[kind]), sorted(model.can ^ EXPECTED[kind])
    for cap in CAPABILITIES:
        assert (model.why_not(cap) == "") == (cap in model.can), cap


@pytest.mark.parametrize("kind", ["numpy-gpt2", "numpy-llama"])
def test_the_capabilities_methods_do_what_they_say(models, kind):
    model = models[kind]
    ids = model.encode(TEXT).ids
    tr = model.trace(ids, ["blocks.1.resid_pre", "final_norm", "logits"])
    ivs = [[Intervention(site(1, "attn.z"), head=h)] for h in range(model.heads)]
    rows = model.rerun(ids, 1, tr["blocks.1.resid_pre"], ivs)  # (h, T, d)
    for h in range(model.heads):  # each batched rerun equals one resumed trace with the same intervention
        one = model.trace(ids, "final_norm", interventions=ivs[h], start=(1, tr["blocks.1.resid_pre"]))
        np.testing.assert_allclose(rows[h], one["final_norm"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.unembed(tr["final_norm"]), tr["logits"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(tr["final_norm"], dtype=np.float64) @ model.unembedding().T.astype(np.float64),
                               tr["logits"], rtol=1e-4, atol=1e-4)
    kind_, w, b, eps = model.final_norm_parts()
    assert kind_ in ("layer", "rms") and w.shape == (tr["final_norm"].shape[-1],)
    assert model.output_weight(0).shape == (model.heads * (w.shape[0] // model.heads), w.shape[0])
    first = model.token_strings([ids[1]])[0]
    assert model.vocab_id(first) == ids[1] and model.vocab_id("no such entry ~~") is None
    assert model.pieces(" cat") and all(0 <= i < model.vocab_size for i in model.pieces(" cat"))
    assert model.vocab_size > max(ids)


@pytest.mark.parametrize("kind, cap", [("torch-gpt2", "dla"), ("numpy-bert", "dla"), ("seq2seq-t5", "trace"),
                                       ("torch-gpt2", "rerun"), ("numpy-bert", "lens")])
def test_a_missing_capability_is_the_one_refusal(models, kind, cap):
    model = models[kind]
    with pytest.raises(BadInput) as caught:
        require(model, cap, "doing it")
    assert str(caught.value) == refusal(model, cap, "doing it")
    assert model.why_not(cap) in str(caught.value) and CAPABILITIES[cap] in str(caught.value)
    assert not has(model, cap)


def test_the_command_line_and_explore_refuse_with_the_same_sentence(models, tiny_gpt2_dir):
    from attncli.explore.causal_view import refusal as explore_refusal

    model = models["torch-gpt2"]
    result = CliRunner().invoke(app, ["dla", TEXT, "--transformer", str(tiny_gpt2_dir), "--target-id", "5",
                                      "--backend", "torch"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and model.why_not("dla") in said
    assert model.why_not("dla") in explore_refusal(model, "dla")


# --- the AST: callers speak the interface ------------------------------------------------------------

MODEL_WINGS = ("hf", "tinylm", "model")
ALLOWED: dict[str, str] = {  # "path:line" -> why a probe is safe there
    "vectors/train.py:194": "a gensim Word2Vec / FastText model (its compute_loss flag), not a model of this interface",
}


def _model_like(node: ast.AST) -> bool:
    """``model``, ``self.model``, ``something.model``: an expression naming a model."""
    return (isinstance(node, ast.Name) and node.id == "model") or (isinstance(node, ast.Attribute) and node.attr == "model")


def probes(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            if node.args and _model_like(node.args[0]):
                found.append((node.lineno, f"{node.func.id}(model, ...)"))
        if isinstance(node, ast.Attribute) and _model_like(node.value) and (node.attr.startswith("_") or node.attr == "arch"):
            found.append((node.lineno, f"model.{node.attr}"))
    return found


def test_no_module_outside_the_model_wings_probes_a_model():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] in MODEL_WINGS:
            continue
        for line, what in probes(path.read_text(encoding="utf-8")):
            if f"{rel}:{line}" not in ALLOWED:
                bad.append(f"{rel}:{line}: {what}")
    assert not bad, "ask the model interface (has/require, a public method) instead:\n" + "\n".join(bad)


def test_the_probe_finder_sees_each_kind_of_probe():
    src = "hasattr(model, 'trace')\ngetattr(self.model, 'traced', False)\nmodel._tokenize(x)\nmodel.arch.w\nmodel.heads\n"
    assert [w for _, w in probes(src)] == ["hasattr(model, ...)", "getattr(model, ...)", "model._tokenize", "model.arch"]
