"""MPNet (all-mpnet-base-v2's architecture) on the numpy backend against transformers' MPNetModel:
every layer's and head's attention (its relative position bias included) to 1e-5 in float32 and
1e-10 in float64, mean-pooled embeddings of a padded batch, and no torch on the path. A tiny
random MPNet from tests/_llama_fixtures.py (the bias table drawn large, so a missing or
misplaced bias shows)."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from conftest import needed
from _tolerance import f32_close, f32_size

needed("tokenizers")
torch = needed("torch")
transformers = needed("transformers")

from typer.testing import CliRunner  # noqa: E402

from _llama_fixtures import build_mpnet  # noqa: E402
from _probe import imported_by  # noqa: E402
from attncli.cli.main import app  # noqa: E402
from attncli.errors import BadInput  # noqa: E402
from attncli.hf import load  # noqa: E402

torch.set_num_threads(1)
TEXTS = ["time flies like an arrow", "the cat sat on the mat and the dog sat on the log", "a quick brown fox"]


@pytest.fixture(scope="session")
def mpnet_dir(tmp_path_factory):
    return build_mpnet(tmp_path_factory.mktemp("tiny-mpnet") / "mpnet")


@functools.lru_cache(maxsize=None)
def reference(path: str, double: bool = False):
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    return tok, (model.double() if double else model)


def test_attentions_equal_transformers_every_layer_and_head(mpnet_dir):
    path = str(mpnet_dir)
    model = load(path, backend="numpy")
    assert model.backend == "numpy" and model.model_type == "mpnet"
    for text in TEXTS:
        enc = model.encode(text)
        got = model.attentions(enc)  # (L, h, T, T)
        for double, tolerance in ((False, 1e-5), (True, 1e-10)):
            tok, ref = reference(path, double)
            batch = tok(text, return_tensors="pt")
            assert enc.ids == batch["input_ids"][0].tolist()
            with torch.no_grad():
                want = np.stack([a[0].double().numpy() for a in ref(**batch, output_attentions=True).attentions])
            assert np.abs(got - want).max() < tolerance, (text, double)
        assert got.max() > 0.3


def test_mean_pooled_embeddings_of_a_padded_batch(mpnet_dir):
    path = str(mpnet_dir)
    got = load(path, backend="numpy").embed(TEXTS)
    tok, ref = reference(path)
    batch = tok(TEXTS, return_tensors="pt", padding=True)
    assert (batch["input_ids"] == 1).any()  # padded with <pad> = 1, which MPNet's positions skip
    with torch.no_grad():
        hidden = ref(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].double()
    want = ((hidden.double() * mask).sum(1) / mask.sum(1)).numpy()
    f32_close(got, want, *f32_size(path))  # float32 passes, attn's and transformers'


def test_q_and_k_alone_are_refused_they_miss_the_bias(mpnet_dir):
    model = load(str(mpnet_dir), backend="numpy")
    with pytest.raises(BadInput, match="relative position bias"):
        model.qk(model.encode(TEXTS[0]), 0)
    result = CliRunner().invoke(app, ["matrix", TEXTS[0], "--transformer", str(mpnet_dir), "--explain", "1", "2"])
    assert result.exit_code == 2 and "relative position bias" in " ".join(result.stderr.split())


def test_the_numpy_path_imports_no_torch(mpnet_dir, attn_home):
    modules, out = imported_by(["matrix", TEXTS[0], "--transformer", str(mpnet_dir), "--layer", "1", "--json"])
    assert not [m for m in ("torch", "transformers") if m in modules]
    assert json.loads(out)["backend"] == "numpy"
    modules, out = imported_by(["lookup", "colour", "--encoder", str(mpnet_dir), "--json"])
    assert not [m for m in ("torch", "transformers") if m in modules]


def test_an_unused_tensor_is_named_not_dropped(mpnet_dir, tmp_path):
    """A tensor the MPNet pass would not read (e.g. another kind of position table) is exit 1
    naming it, as on every NumPy family, not silently left out of the attention."""
    import shutil

    from safetensors.numpy import load_file, save_file

    path = tmp_path / "m"
    shutil.copytree(mpnet_dir, path)
    tensors = load_file(str(path / "model.safetensors"))
    tensors["encoder.layer.0.attention.attn.distance_embedding.weight"] = np.ones((3, 4), np.float32)
    (path / "model.safetensors").unlink()
    save_file(tensors, str(path / "model.safetensors"))
    result = CliRunner().invoke(app, ["matrix", "a cat", "--transformer", str(path), "--backend", "numpy"])
    assert result.exit_code == 1, result.output
    assert "distance_embedding" in " ".join(result.stderr.split()) and result.stdout == "", result.output
