"""attn circuit's terminal table (attncli/views/circuit_view.py): the edges grouped by the layer of
the node they enter, as the document's nodes place it (embeddings -1, logits ``layers``, printed
"out"), strongest first within a layer."""

from __future__ import annotations

from rich.console import Console

from attncli.views.circuit_view import circuit_renderables

NODES = [{"name": "embed", "layer": -1}, {"name": "L0H1", "layer": 0}, {"name": "L1MLP", "layer": 1},
         {"name": "logits", "layer": 2}]
EDGES = [{"from": "L1MLP", "to": "logits", "input": "logits", "score": 0.1},
         {"from": "embed", "to": "L1MLP", "input": "mlp", "score": -0.2},
         {"from": "embed", "to": "L0H1", "input": "q", "score": 0.05},
         {"from": "L0H1", "to": "L1MLP", "input": "mlp", "score": 0.3}]


def test_the_edges_go_by_the_layer_of_the_node_they_enter():
    doc = {"title": "tiny · circuit (EAP)", "notes": [], "layers": 2, "nodes": NODES, "edges": EDGES}
    console = Console(width=120, record=True, color_system=None)
    for part in circuit_renderables(doc, 120):
        console.print(part)
    rows = [line.split() for line in console.export_text().splitlines() if line.split()[-1:][0][:1] in "+-"]
    assert [(r[0], r[1], r[2]) for r in rows] == [("0", "embed", "L0H1"), ("1", "L0H1", "L1MLP"),
                                                  ("1", "embed", "L1MLP"), ("out", "L1MLP", "logits")]
