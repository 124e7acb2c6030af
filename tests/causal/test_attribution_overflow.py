"""A model whose finite weights overflow the float32 gradient tape (hf/methods/backward.py) but not attn's own
pass (its attention scores are float64): a Llama whose layer-0 query and key projections are scaled
by 1e20 (q k^T about 1e40, past float32's 3.4e38). attn attribute says "damaged model" with the
layer, exit 1, one line, no RuntimeWarning; attribute_together (--pairs' batches) likewise (attn
circuit's tape is float64: it runs). Before, the grids came out NaN (and a --pairs shard of NaN, refused as damaged on
merge). And a QK-fix grid that overflows is refused in the same words."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")

from _gradient_cli import CLEAN as GPT2_CLEAN, CORRUPT as GPT2_CORRUPT, run  # noqa: E402
from _llama_fixtures import build_decoder  # noqa: E402

from attncli.causal import attribution  # noqa: E402
from attncli.causal.target import Target  # noqa: E402
from attncli.errors import RuntimeFailure  # noqa: E402
from attncli.hf import load  # noqa: E402

CLEAN, CORRUPT = "the cat sat on the mat", "a dog ran to the log"
SAID = "damaged model: NaN in layer 0's output on the float32 gradient tape"


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory):
    from safetensors.numpy import load_file, save_file

    path = build_decoder("llama", tmp_path_factory.mktemp("overflow") / "llama")
    weights = load_file(str(path / "model.safetensors"))
    for name in weights:
        if "layers.0.self_attn.q_proj" in name or "layers.0.self_attn.k_proj" in name:
            weights[name] = (weights[name] * 1e20).astype(np.float32)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def _pairs(model, n=2):
    ids = [model.encode(t).ids for t in (CLEAN, CORRUPT)]
    T = min(map(len, ids))
    return [(ids[0][:T], ids[1][:T], Target(T - 1, 7 + i, "t")) for i in range(n)]


def test_the_pass_is_finite_and_the_tape_is_refused_as_damaged(overflowing):
    model = load(str(overflowing), backend="numpy")
    clean = _pairs(model)[0][0]
    assert np.isfinite(model.trace(clean, "logits")["logits"]).all()  # the model's own pass: finite
    for where in ("head", "resid", "key"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeFailure, match=f"^{SAID}$"):
                attribution.attribute_together(model, _pairs(model), where=where)
        assert [w for w in seen if issubclass(w.category, RuntimeWarning)] == []


def test_attn_attribute_says_damaged_model_and_exits_1(overflowing):
    model = load(str(overflowing), backend="numpy")
    clean, corrupt, _ = _pairs(model)[0]
    code, out = run("attribute", model.decode(clean), model.decode(corrupt), "--transformer", str(overflowing),
                    "--target-id", "7")
    assert code == 1 and SAID in out and "Traceback" not in out and len(out.strip().splitlines()) == 1, out


def test_a_qk_fix_grid_that_overflows_is_refused(tiny_gpt2_dir, monkeypatch):
    """The QK fix recomputes patterns with clean keys put in, where the tape's own pass did not go:
    its overflow is refused too (made here by the fix's recomputed softmax overflowing)."""
    gpt2 = load(str(tiny_gpt2_dir), backend="numpy")
    ids = [gpt2.encode(t).ids for t in (GPT2_CLEAN, GPT2_CORRUPT)]
    pairs = [(ids[0], ids[1], Target(len(ids[0]) - 1, 7, "t"))]
    assert np.isfinite(attribution.attribute_together(gpt2, pairs, where="key")[0].values).all()
    monkeypatch.setattr(attribution, "softmax", lambda s: np.exp(s * 1e300))  # the recomputed patterns overflow
    with pytest.raises(RuntimeFailure, match=r"^damaged model: NaN or infinity in the --site key attribution"):
        attribution.attribute_together(gpt2, pairs, where="key")


def test_attn_attribute_pairs_says_damaged_model_and_exits_1(overflowing, tmp_path):
    """Before: RuntimeWarnings, then "internal error: ValueError: Out of range float values are not
    JSON compliant" writing the shard of NaN."""
    line = '{"clean": "the cat sat on the mat", "corrupt": "the mat sat on the cat", "target": "t"}\n'
    (tmp_path / "pairs.jsonl").write_text(line * 2)
    code, out = run("attribute", "--pairs", str(tmp_path / "pairs.jsonl"), "--transformer", str(overflowing),
                    "--site", "head", "--out", str(tmp_path / "out"))
    said = " ".join(out.split())  # one message, wrapped at the terminal's width
    assert code == 1 and said == "error: --pairs line 1: " + SAID and "Traceback" not in out, out  # the pair it showed in
