"""attn dla's view (attncli/views/causal.py): the title is wrapped to the terminal's width, not to
the parts table's (two narrow columns)."""

from __future__ import annotations

from rich.console import Console

from attncli.views.causal import dla_renderables


def test_the_dla_title_wraps_to_the_terminal_not_to_the_table():
    title = "tiny · direct logit attribution · logit difference of 'cat' - 'dog' at position 7"
    doc = {"title": title, "parts": [{"name": "L0H0", "value": 0.5}, {"name": "L0 MLP", "value": -0.25}],
           "sum": 0.25, "logit": 0.25, "heads": [[0.5, 0.0]]}
    console = Console(width=120, record=True, color_system=None)
    for part in dla_renderables(doc, 120):
        console.print(part)
    lines = console.export_text().splitlines()
    assert title in lines
    assert any("L0H0" in line and "+0.5000" in line for line in lines)
