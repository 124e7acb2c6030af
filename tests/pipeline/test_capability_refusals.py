"""What only attn's NumPy pass does is asked of a model by its capability (attncli.model.interface's
``can``), never by its backend's name: --explain I J (``explain``), attn stats --precision
(``precision``). On the torch backend each refuses with its message, before any work."""

from __future__ import annotations

import pytest
from conftest import needed

from attncli.errors import BadInput
from attncli.hf import load
from attncli.model import has
from attncli.pipeline import ViewRequest, compute
from attncli.pipeline.stats_compute import compute as compute_stats
from attncli.stats.stats_request import StatsRequest

needed("torch")
needed("transformers")


@pytest.fixture(scope="module")
def torch_gpt2(tiny_gpt2_dir):
    return load(str(tiny_gpt2_dir), backend="torch")


def test_explain_is_refused_where_the_model_cannot_explain(torch_gpt2, tiny_gpt2_dir):
    assert not has(torch_gpt2, "explain")
    request = ViewRequest("time flies like an arrow", transformer=str(tiny_gpt2_dir), backend="torch", explain=(2, 1))
    with pytest.raises(BadInput, match="^--explain I J needs attn's NumPy forward pass"):
        compute(request, torch_gpt2)


def test_precision_is_refused_where_the_pass_has_none(torch_gpt2, tiny_gpt2_dir, tmp_path):
    assert not has(torch_gpt2, "precision")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n")
    request = StatsRequest(str(corpus), transformer=str(tiny_gpt2_dir), backend="torch", precision="float64")
    with pytest.raises(BadInput, match="^--precision chooses attn's NumPy pass; .* drop --precision$"):
        compute_stats(request, torch_gpt2)
