"""Two attention matrices side by side and their difference, as ``attn compare`` draws them
(attncli.attention.compare computes them): A and B on viridis, then delta = B - A on PuOr
(purple: A attends more, orange: B). Shared by the command and ``attn explore`` (key C)."""

from __future__ import annotations

from typing import Any


def side_title(name: str, meta: dict[str, Any]) -> str:
    """'A: TEXT · how it was made' (a variant and mask, or a model's layer and head)."""
    if "variant" in meta:
        how = f"{meta['variant']}{', causal' if meta['causal'] else ''}"
    else:
        which = f"layer {meta['layer']}" + (f" head {meta['head']}" if meta["head"] is not None else " (head mean)")
        how = f"{meta['model']} · {which}"
    return f"{name}: {meta['text'][:40]} · {how}"


def compare_heatmaps(c, meta_a: dict[str, Any], meta_b: dict[str, Any]) -> list:
    """The three heatmaps of :class:`attncli.attention.compare.Comparison` ``c``: A, B, delta."""
    from attncli.views.render import Heatmap

    numbered = lambda labels: [f"{n} {t}" for n, t in enumerate(labels)]  # noqa: E731
    notes = ("the first rows / columns of each (--align position)",) if c.cropped else ()
    return [Heatmap(c.a, numbered(c.tokens_a), c.key_tokens_a, side_title("A", meta_a)),
            Heatmap(c.b, numbered(c.tokens_b), c.key_tokens_b, side_title("B", meta_b)),
            Heatmap(c.delta, numbered(c.labels), c.key_labels, "delta = B - A (orange: B attends more)",
                    diverging=True, notes=notes)]
