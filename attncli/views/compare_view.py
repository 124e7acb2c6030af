"""Two attention matrices side by side and their difference, as ``attn compare`` draws them
(attncli.attention.compare computes them): A and B on viridis, then delta = B - A on PuOr
(purple: A attends more, orange: B). Shared by the command and ``attn explore`` (key C)."""

from __future__ import annotations

from typing import Any, Optional

from attncli.attention.compare import Comparison, document
from attncli.io.textio import token_label, visible
from attncli.views.render import Heatmap, heatmap_renderables
from attncli.views.result import Result, attn_command


def side_title(name: str, meta: dict[str, Any]) -> str:
    """'A: TEXT · how it was made' (a variant and mask, or a model's layer and head)."""
    if "variant" in meta:
        how = f"{meta['variant']}{', causal' if meta['causal'] else ''}"
    else:
        which = f"layer {meta['layer']}" + (f" head {meta['head']}" if meta["head"] is not None else " (head mean)")
        how = f"{meta['model']} · {which}"
    return f"{name}: {meta['text'][:40]} · {how}"


def _shown(meta: dict[str, Any], key: str, tokens: list[str]) -> list[str]:
    """The labels of one side's rows or columns: each token's text (meta's ``token_texts``, as
    attncli.io.textio.token_label draws it: ␣ for a space) where the side has them, else its tokens."""
    texts = meta.get(key)
    return [token_label(t) for t in texts[:len(tokens)]] if texts else list(tokens)


def compare_heatmaps(c, meta_a: dict[str, Any], meta_b: dict[str, Any]) -> list:
    """The three heatmaps of :class:`attncli.attention.compare.Comparison` ``c``: A, B, delta."""
    numbered = lambda labels: [f"{n} {t}" for n, t in enumerate(labels)]  # noqa: E731
    joined = lambda a, b: [x if x == y else f"{x}/{y}" for x, y in zip(a, b)]  # noqa: E731
    notes = ("the first rows / columns of each (--align position)",) if c.cropped else ()
    rows_a, rows_b = _shown(meta_a, "token_texts", c.tokens_a), _shown(meta_b, "token_texts", c.tokens_b)
    cols_a, cols_b = _shown(meta_a, "key_token_texts", c.key_tokens_a), _shown(meta_b, "key_token_texts", c.key_tokens_b)
    return [Heatmap(c.a, numbered(rows_a), cols_a, side_title("A", meta_a)),
            Heatmap(c.b, numbered(rows_b), cols_b, side_title("B", meta_b)),
            Heatmap(c.delta, numbered(joined(rows_a, rows_b)), joined(cols_a, cols_b),
                    "delta = B - A (orange: B attends more)", diverging=True, notes=notes)]


class CompareView(Result):
    """``attn compare`` as a result (attncli.views.result): A, B and delta drawn, the document of
    attncli.attention.compare; ``positionals`` and ``options`` make its command line."""

    def __init__(self, c: Comparison, meta_a: dict[str, Any], meta_b: dict[str, Any], unit: str, *,
                 positionals: list[str] = (), options: list[tuple[str, Any]] = ()) -> None:
        self.comparison, self.meta_a, self.meta_b, self.unit = c, meta_a, meta_b, unit
        self.positionals, self.options = list(positionals), list(options)
        self.title = f"attn compare: {visible(meta_a['text'][:60])}"

    def renderables(self, width: Optional[int], lines: bool = False) -> list:
        """A, B and delta as heatmaps at ``width`` columns (None: as wide as they need, for a file);
        ``lines``: each page as lines of text (views.render.heatmap_renderables), for an app."""
        return [part for hm in compare_heatmaps(self.comparison, self.meta_a, self.meta_b)
                for part in heatmap_renderables(hm, width, lines=lines)]

    def screen_renderables(self, width: int) -> list:
        return self.renderables(width, lines=True)

    def document(self) -> dict[str, Any]:
        return document(self.comparison, self.meta_a, self.meta_b, self.unit)

    def command_line(self) -> str:
        return attn_command("compare", self.positionals, self.options)
