"""A view keeps only the layers, heads and rows it shows (attncli.pipeline.compute_view): the
default view of one layer holds that layer's (h, T, T), one head's view (1, T, T), --rows R of
them (1, R, T); rollout, flow, the model view and the page still get every layer. Memory is
counted as the bytes of the arrays the trace kept, never timed; and each view's numbers equal
those of the whole pass (model.attentions)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needed

from _tolerance import f32_close, f32_size

needed("tokenizers")
needed("safetensors")

TEXT = "the cat sat on the mat and the dog ran. then the cat saw the dog"


@pytest.fixture(scope="module")
def model(tiny_gpt2_dir):
    from attncli.hf import load

    return load(str(tiny_gpt2_dir), backend="numpy")


def kept_bytes(result) -> int:
    return sum(x.nbytes for x in result.reads.tr.values())


def view(model, **options):
    from attncli.pipeline import ViewRequest
    from attncli.pipeline.compute_view import compute

    return compute(ViewRequest(text=TEXT, transformer=str(model.path), backend="numpy", **options), model)


@pytest.mark.parametrize("options, layers, heads, rows", [
    ({}, 1, "h", "T"),  # the last layer, its heads and their mean
    ({"head": 2}, 1, 1, "T"),
    ({"layer": 0, "head": 1}, 1, 1, "T"),
    ({"layer": 0}, 1, "h", "T"),
    ({"head": 1, "rows": "3:7"}, 1, 1, 4),
    ({"rows": "last:5"}, 1, "h", 5),
    ({"pool": "sentence"}, 1, "h", "T"),
    ({"head": 0, "top_k": 3}, 1, 1, "T"),
    ({"rollout": True}, "L", "h", "T"),  # rollout multiplies every layer
    ({"flow": True}, "L", "h", "T"),
    ({"model_view": True}, "L", "h", "T"),
])
def test_a_view_keeps_only_the_layers_heads_and_rows_it_shows(model, options, layers, heads, rows):
    enc = model.encode(TEXT)
    T, L, h = len(enc.ids), model.layers, model.heads
    assert T > 12 and L >= 2 and h >= 3
    res = view(model, **options)
    size = {"L": L, "h": h, "T": T}
    want = size.get(layers, layers) * size.get(heads, heads) * size.get(rows, rows) * T
    assert kept_bytes(res) == want * 8, (kept_bytes(res), want * 8)  # float64 weights, nothing else held
    if options.get("rollout") or options.get("flow") or options.get("model_view"):
        return
    full = model.attentions(enc)  # (L, h, T, T): the whole pass, the reference
    layer = options.get("layer", L - 1)
    head = options.get("head")
    expect = full[layer, head] if head is not None else full[layer].mean(axis=0)  # (T, T)
    picked = np.asarray(res.view.rows)
    np.testing.assert_array_equal(res.view.weights, expect[picked][:, res.view.cols])


def test_the_page_of_a_one_layer_view_still_has_every_layer(model, tmp_path):
    res = view(model, head=1)
    assert kept_bytes(res) == len(model.encode(TEXT).ids) ** 2 * 8
    every = res.every_layer()
    np.testing.assert_array_equal(every, model.attentions(model.encode(TEXT)))
    res.export("html", tmp_path / "page.html")  # the interactive page reads every layer and head
    assert (tmp_path / "page.html").stat().st_size > 1000


def test_one_head_on_the_torch_backend_keeps_that_head(model, tiny_gpt2_dir):
    needed("torch")
    needed("transformers")
    from attncli.hf import load
    from attncli.pipeline import ViewRequest
    from attncli.pipeline.compute_view import compute

    torch_model = load(str(tiny_gpt2_dir), backend="torch")
    res = compute(ViewRequest(text=TEXT, transformer=str(tiny_gpt2_dir), backend="torch", head=2, layer=0), torch_model)
    T = len(model.encode(TEXT).ids)
    assert [x.shape for x in res.reads.tr.values()] == [(1, T, T)]  # the layer's pattern, one head
    full = model.attentions(model.encode(TEXT))  # the NumPy pass, every layer and head
    f32_close(res.view.weights, full[0, 2], 1, f32_size(tiny_gpt2_dir)[1], per_element=True)  # torch float32, layer 0
