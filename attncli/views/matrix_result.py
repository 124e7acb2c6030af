"""The word-vector ``attn matrix`` as a result (attncli.views.result): the core's
:class:`attncli.attention.matrix.MatrixResult` (which never imports rich) with what the view adds,
the --show choice, the --rows / --cols windows and the --explain panel.

    >>> from attncli.attention import MatrixRequest, compute
    >>> view = MatrixView(compute(MatrixRequest("time flies", variant="dot")), show="scores")
    >>> view.command_line()
    "attn matrix 'time flies' --variant dot --show scores"
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from attncli.attention import document as matrix_document
from attncli.attention.matrix import DEFAULT_POSITIONS, MatrixResult
from attncli.io.textio import visible
from attncli.views.explanation import explanation_renderables
from attncli.views.render import matrix_renderables
from attncli.views.result import Result, attn_command

Span = Optional[tuple[int, int]]


def span_text(span: Span) -> Optional[str]:
    """(start, end) -> 'START:END' as --rows / --cols take it (an open end: 'START:')."""
    if span is None:
        return None
    lo, hi = span
    return f"{lo}:" if hi >= 1 << 30 else f"{lo}:{hi}"


class MatrixView(Result):
    """``attn matrix`` (word vectors) as a result: heatmap, JSON document, exports, command line.
    The command line names ``--model`` when the request does (else the same default is read:
    ``$ATTN_MODEL``, or the built-in model)."""

    def __init__(self, result: MatrixResult, show: str = "weights", rows: Span = None, cols: Span = None,
                 explanation: Optional[dict[str, Any]] = None, explain: Optional[tuple[int, int]] = None) -> None:
        self.result = result
        self.show = show
        self.rows, self.cols = rows, cols
        self.explanation = explanation
        self.explain = explain  # the cell (I, J) the explanation is of, for the command line
        self.title = f"attn matrix: {visible(' '.join(result.tokens)[:60])}"

    def renderables(self, width: Optional[int]) -> list:
        parts = matrix_renderables(self.result, width, self.show, self.rows, self.cols)
        return parts + (explanation_renderables(self.explanation) if self.explanation is not None else [])

    def document(self) -> dict[str, Any]:
        return matrix_document.to_json(self.result, self.explanation)

    def write_json(self, write: Callable[[str], Any]) -> None:
        """Streamed row by row (a 2,048 x 2,048 matrix never sits in memory as one string)."""
        matrix_document.write_json(self.result, write, self.explanation)

    def command_line(self) -> str:
        req = self.result.request
        mask = req.mask
        options = req.projection_options
        return attn_command("matrix", [req.text], [
            ("--context", req.context),
            ("--variant", req.variant if req.variant != "scaled" else None),
            ("--causal", mask.causal), ("--window", mask.window), ("--pad-to", mask.pad_to),
            ("--positions", req.positions if req.positions != DEFAULT_POSITIONS else None),
            ("--proj", req.projection if req.projection != "identity" else None),
            ("--d-k", req.d_k), ("--seed", req.seed or None),
            ("--layer", options.get("layer")), ("--head", options.get("head")), ("--heads", req.heads),
            ("--max-relative", req.max_relative if req.max_relative != 4 else None),
            ("--model", req.model),
            ("--show", self.show if self.show != "weights" else None),
            ("--explain", self.explain), ("--rows", span_text(self.rows)), ("--cols", span_text(self.cols)),
        ])
