"""A checkpoint's tensors (attncli/hf/formats/weights.py, weight_check.py) against safetensors' own
reader and hand-worked cases: the expected shapes, unused and missing names reported, NaN before
infinity, dtypes cast or kept, symlinked shards, and damaged headers named with their file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import needed

from attncli.io import messages
from attncli.errors import BadInput, RuntimeFailure
from attncli.hf.checks import weight_check


# --- weight_check.py ----------------------------------------------------------------------------


def test_report_unused_names_four_tensors_sorted_then_how_many_more(monkeypatch):
    with pytest.raises(RuntimeFailure) as caught:
        weight_check.report_unused("m", missing=["e", "b", "a", "d", "c", "f"])
    assert str(caught.value) == ("model 'm': 6 weight(s) the model needs are not in the checkpoint (a, b, c, d and "
                                 "2 more: they would be random): attn will not show attention that is silently wrong "
                                 "(--allow-missing-weights runs it anyway, with a warning)")
    with pytest.raises(RuntimeFailure) as caught:
        weight_check.report_unused("m", unexpected=["z\x1b[2J", "y", "x", "w"], can_allow=False)
    assert str(caught.value) == ("model 'm': 4 weight(s) in the checkpoint are not used by the model (w, x, y, "
                                 "z\\x1b[2J: its attention would be computed without them): attn will not show "
                                 "attention that is silently wrong (attn's NumPy path cannot run without them; "
                                 "--backend torch --allow-missing-weights runs them random, with a warning)")
    weight_check.report_unused("m")  # nothing missing, nothing unused: silent
    warned = []
    monkeypatch.setattr(messages, "warn", warned.append)
    weight_check.report_unused("m", missing=["a"], allow=True)
    assert warned == ["model 'm': 1 weight(s) the model needs are not in the checkpoint (a: they would be random); "
                      "going on as --allow-missing-weights asks: the attention shown is not the trained model's"]
    with pytest.raises(RuntimeFailure):  # allowed, but the backend cannot run without them
        weight_check.report_unused("m", missing=["a"], allow=True, can_allow=False)


def test_a_tensor_of_another_shape_than_config_json_implies_is_damage():
    expected = {"wte": (50, 8), "wpe": (None, 8), "ln.bias": (8,), "absent": (3, 3)}
    weight_check.check_shapes({"wte": [50, 8], "wpe": [1024, 8], "ln.bias": [8], "other": [1]}, expected)
    for actual, message in (
            ({"wte": [51, 8]}, "damaged model: wte: shape (51, 8), but config.json implies (50, 8)"),
            ({"wpe": [1024, 9]}, "damaged model: wpe: shape (1024, 9), but config.json implies (any, 8)"),
            ({"wpe": [8]}, "damaged model: wpe: shape (8,), but config.json implies (any, 8)"),
            ({"ln.bias": [8, 1]}, "damaged model: ln.bias: shape (8, 1), but config.json implies (8,)"),
            ({"ln.bias": [7]}, "damaged model: ln.bias: shape (7,), but config.json implies (8,)")):
        with pytest.raises(RuntimeFailure) as caught:
            weight_check.check_shapes(actual, expected)
        assert str(caught.value) == message


def test_check_finite_names_nan_before_infinity():
    weight_check.check_finite(np.array([1.0, 2.0]), "x")
    weight_check.check_finite(np.array([1, 2]), "ints")  # integers hold neither
    for array, kind in ((np.array([np.inf, 1.0]), "infinity"), (np.array([np.inf, np.nan]), "NaN"),
                        (np.array([1.0, -np.inf], dtype=np.float32), "infinity"),
                        (np.array([1 + 1j, complex(np.nan, 0)]), "NaN")):
        with pytest.raises(RuntimeFailure) as caught:
            weight_check.check_finite(array, "layer 3's output")
        assert str(caught.value) == f"damaged model: {kind} in layer 3's output"


def test_every_tensor_a_forward_pass_reads_has_the_shape_config_json_implies():
    """The shape of every tensor each forward pass reads, from config.json, worked by hand (GPT-2's
    Conv1D stores (in, out); n_inner null means 4 * n_embd; ELECTRA's embeddings are
    embedding_size wide; a size config.json leaves out is transformers' default for the family)."""
    from attncli.hf.families import bert, distilbert, gpt2

    g = gpt2.expected({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "vocab_size": 10, "n_positions": 6, "n_inner": None})
    assert g == {"wte.weight": (10, 8), "wpe.weight": (6, 8), "ln_f.weight": (8,), "ln_f.bias": (8,),
                 "h.0.ln_1.weight": (8,), "h.0.ln_1.bias": (8,), "h.0.ln_2.weight": (8,), "h.0.ln_2.bias": (8,),
                 "h.0.attn.c_attn.weight": (8, 24), "h.0.attn.c_attn.bias": (24,),
                 "h.0.attn.c_proj.weight": (8, 8), "h.0.attn.c_proj.bias": (8,),
                 "h.0.mlp.c_fc.weight": (8, 32), "h.0.mlp.c_fc.bias": (32,),
                 "h.0.mlp.c_proj.weight": (32, 8), "h.0.mlp.c_proj.bias": (8,)}
    assert gpt2.expected({"model_type": "gpt2", "n_embd": 8, "n_layer": 2, "n_inner": 5})["h.1.mlp.c_fc.weight"] == (8, 5)
    unstated = gpt2.expected({"model_type": "gpt2", "n_layer": 1})  # GPT2Config's defaults
    assert unstated["h.0.attn.c_attn.weight"] == (768, 2304) and unstated["h.0.mlp.c_fc.bias"] == (3072,)
    assert unstated["wte.weight"] == (50257, 768) and unstated["wpe.weight"] == (1024, 768)
    b = bert.expected({"model_type": "electra", "hidden_size": 8, "embedding_size": 4, "intermediate_size": 16,
                       "vocab_size": 10, "max_position_embeddings": 6, "type_vocab_size": 2, "num_hidden_layers": 1})
    assert b["embeddings.word_embeddings.weight"] == (10, 4) and b["embeddings.position_embeddings.weight"] == (6, 4)
    assert b["embeddings.token_type_embeddings.weight"] == (2, 4) and b["embeddings.LayerNorm.bias"] == (4,)
    assert b["embeddings_project.weight"] == (8, 4) and b["embeddings_project.bias"] == (8,)
    assert b["encoder.layer.0.attention.self.key.weight"] == (8, 8) and b["encoder.layer.0.attention.output.dense.bias"] == (8,)
    assert b["encoder.layer.0.intermediate.dense.weight"] == (16, 8) and b["encoder.layer.0.output.dense.weight"] == (8, 16)
    assert b["encoder.layer.0.output.LayerNorm.weight"] == (8,) and len(b) == 7 + 16
    assert bert.expected({"model_type": "bert", "hidden_size": 8, "embedding_size": 4,
                          "num_hidden_layers": 0})["embeddings.word_embeddings.weight"] == (30522, 8)
    d = distilbert.expected({"model_type": "distilbert", "dim": 8, "hidden_dim": 16, "vocab_size": 10, "max_position_embeddings": 6, "n_layers": 2})
    assert d["embeddings.word_embeddings.weight"] == (10, 8) and d["embeddings.position_embeddings.weight"] == (6, 8)
    assert d["transformer.layer.1.ffn.lin1.weight"] == (16, 8) and d["transformer.layer.1.ffn.lin2.weight"] == (8, 16)
    assert d["transformer.layer.1.attention.v_lin.bias"] == (8,) and d["transformer.layer.0.sa_layer_norm.weight"] == (8,)
    assert len(d) == 4 + 2 * 16


def test_report_unused_joins_both_problems():
    with pytest.raises(RuntimeFailure) as caught:
        weight_check.report_unused("m", missing=["a"], unexpected=["b"])
    assert str(caught.value) == ("model 'm': 1 weight(s) the model needs are not in the checkpoint (a: they would be "
                                 "random); 1 weight(s) in the checkpoint are not used by the model (b: its attention "
                                 "would be computed without them): attn will not show attention that is silently "
                                 "wrong (--allow-missing-weights runs it anyway, with a warning)")


def save(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def test_rows_of_an_integer_table_are_its_rows(tmp_path):
    """Weights.rows on a table safetensors stores as integers (not a floating kind the file can be
    viewed in): the rows asked for, in the compute dtype, in the ids' shape; an id past the table
    is an IndexError."""
    needed("safetensors")
    from attncli.hf.formats.weights import Weights

    table = np.arange(5 * 3, dtype=np.int32).reshape(5, 3) * 7 - 20  # (V, d)
    w = Weights(save(tmp_path / "m.safetensors", {"model.wte.weight": table}), ("wte.weight",))
    ids = np.array([[4, 0, 4], [2, 2, 1]])
    got = w.rows("wte.weight", ids)
    assert got.dtype == np.float32 and got.shape == (2, 3, 3)
    np.testing.assert_array_equal(got, table[ids].astype(np.float32))
    with pytest.raises(IndexError):
        w.rows("wte.weight", np.array([5]))


def test_weights_as_float32_knows_the_same_exact_names(tmp_path):
    """WeightsAs (the float32 view for embed) answers has_exact as the file does: every full
    name safetensors' own reader lists, and no other."""
    needed("safetensors")
    from safetensors import safe_open

    from attncli.hf.formats.weights import Weights, WeightsAs

    path = save(tmp_path / "m.safetensors", {"transformer.wte.weight": np.ones((4, 2), np.float32),
                                             "lm_head.weight": np.ones((4, 2), np.float32)})
    w = WeightsAs(Weights(path, ("wte.weight",), np.float64), np.float32)
    with safe_open(str(path), framework="numpy") as f:
        for name in f.keys():
            assert w.has_exact(name), name
    assert not w.has_exact("wte.weight") and not w.has_exact("transformer.lm_head.weight")


def test_a_header_shape_of_2_to_the_40_is_damage(tmp_path):
    """read_header: a size of 2**40 or more in a shape is refused as damage naming the tensor
    (no file attn reads holds a tensor that long); 2**40 - 1 passes the header check."""
    import struct

    from attncli.hf.formats.weights import read_header

    def file_with(shape):
        header = json.dumps({"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
        path = tmp_path / "h.safetensors"
        path.write_bytes(struct.pack("<Q", len(header)) + header)
        return path

    header, start = read_header(file_with([2**40 - 1]))
    assert header["t"]["shape"] == [2**40 - 1] and start == 8 + len(json.dumps(header).encode())
    for shape in ([2**40], [1, 3**39]):
        with pytest.raises(RuntimeFailure, match=r'tensor "t" has no valid shape'):
            read_header(file_with(shape))


def test_a_checkpoint_with_none_of_the_anchors_says_which_and_the_way_out():
    from attncli.hf.formats.weights import _prefix

    with pytest.raises(BadInput) as caught:
        _prefix(["encoder.foo", "bar"], ("wte.weight", "h.0.ln_1.weight"), Path("/m/model.safetensors"))
    assert str(caught.value) == ("/m/model.safetensors holds none of the tensors this architecture needs "
                                 "(wte.weight, h.0.ln_1.weight): use --backend torch")
    assert _prefix(["x.transformer.wte.weight", "wte.weight"], ("wte.weight",), Path("m")) == ""


def test_a_float8_tensor_is_refused_with_the_way_out(tmp_path):
    """A tensor of a kind safetensors' NumPy reader cannot give (float8, as quantised checkpoints
    store) is BadInput naming it and --backend torch, by get and by rows (it was an internal error:
    NumPy has no float8)."""
    import struct

    needed("safetensors")
    from attncli.hf.formats.weights import Weights

    entries = {"wte.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
               "ln_f.weight": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [16, 20]}}
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + np.ones(4, "<f4").tobytes() + bytes(4))
    w = Weights(path, ("wte.weight",))
    np.testing.assert_array_equal(w.get("wte.weight"), np.ones((2, 2), np.float32))
    for read in (lambda: w.get("ln_f.weight"), lambda: w.rows("ln_f.weight", np.array([0]))):
        with pytest.raises(BadInput) as caught:
            read()
        assert str(caught.value) == (f'{path}: tensor "ln_f.weight" is "F8_E4M3", which attn\'s NumPy pass does not '
                                     "read: use --backend torch")


@pytest.fixture
def mixed_checkpoint(tmp_path):
    """A safetensors file with a float64, a float16, a float32 and an int64 tensor under 'enc.'."""
    st = needed("safetensors.numpy")
    rng = np.random.default_rng(0)
    tensors = {"enc.w": rng.standard_normal((3, 4)), "enc.h": rng.standard_normal((2, 3)).astype(np.float16),
               "enc.f": rng.standard_normal((4,)).astype(np.float32), "enc.i": np.arange(6, dtype=np.int64)}
    path = tmp_path / "model.safetensors"
    st.save_file(tensors, str(path))
    return path, st.load_file(str(path))


def test_weights_cast_floats_to_the_asked_dtype_and_leave_integers_alone(mixed_checkpoint):
    from attncli.hf.formats.weights import Weights

    path, stored = mixed_checkpoint
    w = Weights(path, ["w"], dtype=np.float32)
    for name in ("enc.w", "enc.h", "enc.f"):
        got = w.get_exact(name)  # no dtype: the weights' own (float32)
        assert got.dtype == np.float32, name
        np.testing.assert_array_equal(got, stored[name].astype(np.float32))
        got64 = w.get_exact(name, np.float64)
        assert got64.dtype == np.float64, name
        np.testing.assert_array_equal(got64, stored[name].astype(np.float64))
    ints = w.get_exact("enc.i")
    assert ints.dtype == np.int64
    np.testing.assert_array_equal(ints, np.arange(6))


def test_weights_read_a_shard_that_is_a_symlink(mixed_checkpoint, tmp_path):
    """The Hugging Face cache keeps each file as a symlink into its blobs: it must load."""
    from attncli.hf.formats.weights import Weights

    path, stored = mixed_checkpoint
    link = tmp_path / "linked.safetensors"
    link.symlink_to(path)
    w = Weights(link, ["w"], dtype=np.float32)
    np.testing.assert_array_equal(w.get_exact("enc.f"), stored["enc.f"])


def test_weights_name_the_shard_that_cannot_be_mapped(mixed_checkpoint, monkeypatch):
    from attncli.hf.formats import weights

    path, _ = mixed_checkpoint
    monkeypatch.setattr(weights, "SAFETENSORS_BYTES", 16)  # the file is larger than this limit
    with pytest.raises(RuntimeFailure) as caught:
        weights.Weights(path, ["w"])
    assert str(caught.value).startswith("damaged model: model.safetensors: ")


def test_a_header_claiming_more_bytes_than_the_file_is_damage_naming_the_file(tmp_path):
    from attncli.hf.formats.weights import read_header

    path = tmp_path / "short.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")  # 10 bytes in all
    with pytest.raises(RuntimeFailure) as caught:
        read_header(path)
    assert str(caught.value) == "damaged model: short.safetensors: its header claims 1,000 bytes (the file has 10)"
