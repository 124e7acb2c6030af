"""``attn qk`` as request -> compute -> result: :class:`QKRequest` says the head and the two
positions, :func:`compute` splits that score into query-side x key-side parts
(attncli.hf.methods.qk_attribution) and returns views/qk_view.py's QKResult (attncli.views.result's
protocol), whoever asked: the command line or Python::

    from attncli.pipeline import QKRequest, compute_qk
    result = compute_qk(QKRequest("the cat sat on the mat", transformer="gpt2", layer=3, head=2))
    result.document()["score"]       # the score; result.document()["top"]: its largest parts

    >>> QKRequest("time flies", layer=1).check()
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: give the model with --transformer NAME (a hub id or a directory)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

from attncli.attention.checkpoint_views import check_texts
from attncli.errors import BadInput
from attncli.hf.methods import qk_attribution
from attncli.hf.loader import load
from attncli.rules.option_conflicts import TableRequest
from attncli.io.textio import visible
from attncli.views.qk_view import QKResult


@dataclass(frozen=True)
class QKRequest(TableRequest):
    """One head's score from one query token to one key token, to be split into parts."""

    text: str  # the text the model reads
    transformer: Optional[str] = None  # a hub id or a directory
    pair: Optional[str] = None  # a second sentence read with ``text`` as one input (BERT-style pairs)
    layer: int = 0
    head: int = 0
    query: Optional[int] = None  # the query token's position (None: the last token)
    key: Optional[int] = None  # the key token's position (None: the query's)
    top: int = 12  # how many parts to list
    allow_missing_weights: bool = False

    command: ClassVar[str] = "qk"
    table_path: ClassVar[str] = "qk"

    def check(self) -> None:
        """The refusals that need no model (BadInput, exit 2): the table's "qk" rows, a blank text
        (as attn matrix refuses it) and a position below 0 (a count from the end is not a position)."""
        super().check()
        check_texts(self.text, self.pair, "qk")
        for name in ("query", "key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise BadInput(f"--{name} {visible(str(value)[:40])} is not a token position (0 = the first token; "
                               f"leave --{name} out for the {'last token' if name == 'query' else 'query'})")

    def positions(self, tokens: int) -> tuple[int, int]:
        """(query, key) in a text of ``tokens`` tokens: the last token, and the query itself, by default."""
        i = tokens - 1 if self.query is None else self.query
        return i, i if self.key is None else self.key

    def options(self) -> list[tuple[str, Any]]:
        """(flag, value) of each option that says this request, in the command line's order."""
        return [("--pair", self.pair), ("--transformer", self.transformer), ("--layer", self.layer),
                ("--head", self.head), ("--query", self.query), ("--key", self.key),
                ("--top", self.top if self.top != 12 else None),
                ("--allow-missing-weights", self.allow_missing_weights)]

    @property
    def title(self) -> str:
        return f"attn qk: {visible(self.text[:60])}"


def compute(request: QKRequest, model: Any = None) -> QKResult:
    """The result of ``request`` on ``model`` (None: loaded here, on attn's NumPy pass); the result's
    request has its positions resolved, so its command line names them."""
    request.check()
    if model is None:
        model = load(request.transformer, backend="numpy", allow_missing_weights=request.allow_missing_weights)
    enc = model.encode(request.text, pair=request.pair)
    i, j = request.positions(len(enc.ids))
    parts = qk_attribution.qk_parts(model, enc, request.layer, request.head, i, j)
    return QKResult(qk_attribution.document(model, enc, parts, request.top), replace(request, query=i, key=j))
