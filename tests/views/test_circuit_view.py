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


def test_a_circuit_of_more_edges_than_the_table_lists_shows_its_strongest():
    """SmolLM2-135M's IOI circuit has hundreds of edges: the table lists the MAX_ROWS strongest (by
    |score|), still by layer, not the MAX_ROWS of the lowest layers, which would leave out every
    edge into the logits."""
    from attncli.views.circuit_view import MAX_ROWS

    weak = [{"from": "embed", "to": "L0H1", "input": "q", "score": 0.01} for _ in range(MAX_ROWS)]
    strong = [{"from": "L1MLP", "to": "logits", "input": "logits", "score": -5.0},
              {"from": "L0H1", "to": "L1MLP", "input": "mlp", "score": 3.0}]
    doc = {"title": "tiny · circuit (EAP)", "notes": [], "layers": 2, "nodes": NODES, "edges": weak + strong}
    console = Console(width=120, record=True, color_system=None)
    for part in circuit_renderables(doc, 120):
        console.print(part)
    lines = console.export_text().splitlines()
    rows = [line.split() for line in lines if line.split()[-1][:1] in "+-" and line.split()[-1][1:2].isdigit()]
    assert len(rows) == MAX_ROWS
    assert rows[-2:] == [["1", "L0H1", "L1MLP", "mlp", "+3.0000"], ["out", "L1MLP", "logits", "logits", "-5.0000"]]
    assert lines[-1] == "2 more edges: see --json"
