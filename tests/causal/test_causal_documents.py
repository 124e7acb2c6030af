"""The notes of ablate's and patch's documents (attncli/causal/documents.py): a metric that rounds
to zero prints as 0.0000, never -0.0000 (a log p of -3e-9 is a certain prediction)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from attncli.causal.documents import ablate_document, patch_document
from attncli.causal.grids import Grid
from attncli.causal.target import Target

MODEL = SimpleNamespace(name="tiny")
ENC = SimpleNamespace(tokens=["a", "b"])


def test_a_metric_that_rounds_to_zero_is_not_printed_negative():
    doc = ablate_document(MODEL, ENC, Target(1, 7, "x"), Grid(np.zeros((1, 2)), -3e-9))
    assert doc["notes"][0] == "clean log p: 0.0000; each cell: ablated - clean"
    doc = patch_document(MODEL, ENC, ENC, Target(1, 7, "x", 11, "y"), Grid(np.zeros((1, 2)), 1.5, -2e-7), site="head")
    assert doc["notes"][0].startswith("clean 1.5000, corrupt 0.0000;")
    # a real negative value keeps its sign
    assert ablate_document(MODEL, ENC, Target(1, 7, "x"), Grid(np.zeros((1, 2)), -0.25))["notes"][0] \
        == "clean log p: -0.2500; each cell: ablated - clean"
