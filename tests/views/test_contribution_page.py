"""``attn matrix --transformer M --show alti --html``: the interactive page's contribution views (one
matrix per layer, and its rollout), opened in headless Chromium and compared with ``attn matrix
--show alti --json`` of the same layer (and with --rollout)."""

from __future__ import annotations

from test_page import CELLS, chromium_or_skip, fmt, one, page_of, pick


def test_the_page_shows_each_layer_and_its_rollout_as_the_json_does(tiny_bert_dir, tmp_path):
    from _chromium import evaluate_in_page

    chromium = chromium_or_skip()
    page = page_of(tiny_bert_dir, tmp_path, "--show", "alti", "--rollout")
    requested: list[str] = []
    drawn = "document.body.getAttribute('data-drawn')"
    got = evaluate_in_page(chromium, page.as_uri(), [
        CELLS, drawn, pick("layer", "0"), pick("show", "alti"), CELLS, drawn,
        "document.getElementById('head').disabled", "document.getElementById('note').textContent",
        pick("show", "value-zeroing"),  # not in this page: only the method asked for is embedded
        "[...document.getElementById('show').options].map(o => o.value)",
    ], requested)
    assert requested == [page.as_uri()]
    assert got[0] == [fmt(row) for row in one(tiny_bert_dir, "--show", "alti", "--rollout")["weights"]]
    assert got[1].startswith("alti rolled out through layers 0-1")
    assert got[4] == [fmt(row) for row in one(tiny_bert_dir, "--show", "alti", "--layer", "0")["weights"]] != got[0]
    assert got[5].startswith("layer 0 alti (the whole layer)")
    assert got[6] is True  # one matrix per layer: no head to pick
    assert "ALTI (Ferrando et al. 2022)" in got[7]
    assert got[9] == ["weights", "alti", "alti rollout"]
