"""The panels of ``attn demo`` and ``attn scale``: rich tables and heatmaps of what
``attncli.attention.example`` computes."""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.attention.example import NAMES
from attncli.views.render import Heatmap, render_heatmap


def _small_table(console, title: str, m: np.ndarray, rows: list[str], cols: list[str], decimals: int = 0) -> None:
    from rich.table import Table

    console.print(title, style="bold", highlight=False)
    table = Table(show_edge=False)
    table.add_column("")
    for c in cols:
        table.add_column(c, justify="right")
    for name, row in zip(rows, np.asarray(m)):
        table.add_row(name, *[f"{x:.{decimals}f}" for x in row])
    console.print(table)


def render_demo(console, ex: dict[str, np.ndarray]) -> None:
    dims = ["0", "1", "2"]
    console.print("The seed's worked example: four words, numpy.random.seed(42), "
                  "W_Q, W_K, W_V = randint(3, size=(3, 3)) in that order.", highlight=False)
    _small_table(console, "1. the words (one row each)", ex["words"], NAMES, dims)
    for w in ("W_Q", "W_K", "W_V"):
        _small_table(console, f"2. {w}", ex[w], dims, dims)
    for m, w in (("Q", "W_Q"), ("K", "W_K"), ("V", "W_V")):
        _small_table(console, f"3. {m} = words {w}", ex[m], NAMES, dims)
    _small_table(console, "4. scores = Q K^T", ex["scores"], NAMES, NAMES)
    _small_table(console, "5. scores / sqrt(d_k), d_k = 3", ex["scaled_scores"], NAMES, NAMES, 4)
    render_heatmap(console, Heatmap(ex["weights"], NAMES, NAMES, "6. weights = softmax(scores / sqrt(3)), by row",
                                    decimals=(8, 4)))
    _small_table(console, "7. output = weights V (one context vector per word)", ex["output"], NAMES, dims, 8)


def render_scale(console, doc: dict[str, Any]) -> None:
    from rich.table import Table

    f = doc["factor"]
    console.print(f"The worked example's raw scores Q K^T (d_k = {doc['d_k']}), through three softmaxes:", highlight=False)
    _small_table(console, "scores = Q K^T", np.array(doc["scores"]), NAMES, NAMES)
    for key, what in (("softmax_raw", "softmax(scores)"), ("softmax_times_factor", f"softmax(scores x {f:g})"),
                      ("softmax_scaled", f"softmax(scores / sqrt({doc['d_k']}))")):
        render_heatmap(console, Heatmap(np.array(doc[key]), NAMES, NAMES, what, decimals=(4, 3)))
    ent = doc["entropy_bits"]
    console.print("entropy of each row in bits (2 = spread over all 4 words, 0 = one-hot)", style="bold", highlight=False)
    table = Table(show_edge=False)
    for col in ("query", "raw", f"x {f:g}", "/ sqrt(d_k)"):
        table.add_column(col, justify="right")
    for i, name in enumerate(NAMES):
        table.add_row(name, *(f"{ent[k][i]:.3f}" for k in ("raw", "times_factor", "scaled")))
    console.print(table)
    sw = doc["sweep"]
    console.print(f"why divide by sqrt(d_k): random q, k ~ N(0, 1), {sw['keys']} keys, {sw['trials']} trials each",
                  style="bold", highlight=False)
    table = Table(show_edge=False)
    for col in ("d_k", "std q.k", "max w raw", "max w scaled", "H raw", "H scaled", "grad raw", "grad scaled"):
        table.add_column(col, justify="right")
    for r in sw["rows"]:
        table.add_row(str(r["d_k"]), f"{r['score_std']:.2f}", f"{r['max_weight_raw']:.3f}", f"{r['max_weight_scaled']:.3f}",
                      f"{r['entropy_raw']:.2f}", f"{r['entropy_scaled']:.2f}", f"{r['gradient_raw']:.4f}",
                      f"{r['gradient_scaled']:.4f}")
    console.print(table)
    console.print("max w = the largest weight of a row, H = its entropy in bits (4 = uniform over 16 keys), "
                  "grad = the norm of the softmax's Jacobian; scaled = scores / sqrt(d_k).", style="dim", highlight=False)
    console.print("The dot product's spread grows like sqrt(d_k): unscaled, the softmax saturates (max weight -> 1, "
                  "entropy -> 0) and its gradient (the norm of diag(p) - p p^T) vanishes, so learning stalls. "
                  "Dividing by sqrt(d_k) keeps the spread, the entropy and the gradient steady "
                  "(Vaswani et al. 2017, section 3.2.1).", style="dim", highlight=False)
