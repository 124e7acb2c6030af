"""A long view drawn for a file (--svg, --html, --png) draws a bounded number of cells: each
heatmap at most FILE_MAX x FILE_MAX, all of them together at most FILE_CELLS (the heads' maps that
fit, then always the mean, with a note), a --top-k table at most FILE_MAX rows. The work is counted
as the table cells drawn (rich's drawing and the SVG grow with them), never timed; a 1,500-token
text on a tiny Llama of 4 heads is drawn pooled (125 spans a side: 5 maps of ~15,600 cells)."""

from __future__ import annotations

import random

import pytest

from _llama_fixtures import build_decoder
from conftest import needed

needed("torch")
needed("transformers")
needed("tokenizers")
needed("safetensors")


@pytest.fixture(scope="module")
def long_llama(tmp_path_factory):
    return build_decoder("llama", tmp_path_factory.mktemp("long-llama") / "llama", max_position_embeddings=2048)


def long_text(tokens_wanted: int, model) -> str:
    rng = random.Random(0)
    words = "the cat sat on mat a dog and she sells sea shells time flies like an arrow".split()
    text = ""
    while len(model.encode(text or "a").ids) < tokens_wanted:
        text += " ".join(rng.choice(words) for _ in range(50)) + " "
    return text.strip()


def drawn_cells(parts) -> int:
    from rich.table import Table

    return sum(t.row_count * (len(t.columns) - 1) for t in parts if isinstance(t, Table))  # but the label column


@pytest.mark.parametrize("options", [{}, {"rows": "0:1500", "top_k": 8}], ids=["pooled", "top-k"])
def test_a_files_drawing_of_a_long_view_draws_a_bounded_number_of_cells(long_llama, options, tmp_path):
    from rich.table import Table

    from attncli.hf import load
    from attncli.pipeline import ViewRequest
    from attncli.pipeline.compute_view import compute
    from attncli.views.render import FILE_CELLS, FILE_MAX

    model = load(str(long_llama), backend="numpy")
    text = long_text(1500, model)
    res = compute(ViewRequest(text=text, transformer=str(long_llama), backend="numpy", **options), model)
    parts = res.renderables(None)  # a file's drawing
    tables = [t for t in parts if isinstance(t, Table)]
    assert tables and all(t.row_count <= FILE_MAX for t in tables)
    assert drawn_cells(parts) <= FILE_CELLS, drawn_cells(parts)
    notes = " ".join(" ".join(str(p) for p in parts if not isinstance(p, Table)).split())
    if options:  # 1,500 rows: the first FILE_MAX drawn
        assert "rows 0-127 of 0-" in notes
    else:  # 5 maps of ~15,600 cells: the heads' maps that did not fit are named
        assert "of the 4 heads' maps are left out of this file" in notes
    res.export("svg", tmp_path / "view.svg")
    assert (tmp_path / "view.svg").stat().st_size < 16 * 2**20
