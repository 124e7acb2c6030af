"""``attn retrieval`` as one request, one compute, one result: :class:`RetrievalRequest` ->
:func:`compute` -> :class:`RetrievalResult` (the result protocol of attncli.views.result, drawn by
attncli.views.retrieval_view). The math is attncli.causal.retrieval_heads (needles, greedy decoding
with a key/value cache that keeps only the decoded rows, the copy-paste score, the causal test),
its haystack held-out Brown text::

    from attncli.pipeline.retrieval_compute import RetrievalRequest, compute
    result = compute(RetrievalRequest(transformer="smollm2", needles=20, lengths=(2048,), depths=4))
    result.document()["top"]    # the heads with the largest retrieval score

    >>> RetrievalRequest(transformer="gpt2", needles=5, lengths=(256, 512)).command_line()
    'attn retrieval --transformer gpt2 --needles 5 --lengths 256,512'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from attncli.causal.retrieval_heads import (DEFAULT_TOLERANCE, DEFAULT_TOP, depth_fractions, haystack, make_needles,
                                            scan)
from attncli.errors import BadInput
from attncli.hf.loader import load
from attncli.model.interface import facts
from attncli.rules.option_conflicts import TableRequest
from attncli.pipeline.head_roles import leading_specials
from attncli.pipeline.running import Progress, model_for, quiet
from attncli.io.textio import visible
from attncli.tinylm.data import brown_texts
from attncli.views.result import attn_command
from attncli.views.retrieval_view import RetrievalView

DEFAULT_NEEDLES = 20
DEFAULT_LENGTHS = (2048,)
DEFAULT_DEPTHS = 4
MAX_LENGTH = 131_072
TOKENS_PER_SENTENCE = 4  # held-out sentences read: max length / this (Brown's average is about 25 tokens)


def parse_lengths(text: str) -> tuple[int, ...]:
    """'1024,2048' -> (1024, 2048); BadInput naming --lengths otherwise."""
    try:
        out = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise BadInput(f"--lengths takes token counts separated by commas, e.g. 1024,2048 (got {visible(text)!r})") from None
    return out


@dataclass
class RetrievalRequest(TableRequest):
    """Everything ``attn retrieval`` needs (its options, by their parameter names)."""

    transformer: Optional[str] = None  # a hub id, a directory or a GGUF file (a decoder)
    needles: int = DEFAULT_NEEDLES
    lengths: tuple[int, ...] = DEFAULT_LENGTHS  # prompt lengths in tokens
    depths: int = DEFAULT_DEPTHS  # depths from 0 to 1
    top: int = DEFAULT_TOP  # the heads listed, and the k of the stability
    tolerance: float = DEFAULT_TOLERANCE  # the stability's score tolerance
    mask: int = 0  # the causal test: mask the top K heads, and K random others (0: none)
    seed: int = 0  # the needles and the random heads
    allow_missing_weights: bool = False

    table_path: ClassVar[str] = "retrieval"
    POSITIONALS: ClassVar[tuple[str, ...]] = ()  # every input is an option

    def check(self) -> None:
        """The refusals that need no model (bad input: exit 2)."""
        if self.transformer is None:
            raise BadInput("give the model with --transformer NAME (a hub id, a directory or a GGUF file)")
        if not 1 <= self.needles <= 10_000:
            raise BadInput(f"--needles must be in [1, 10,000] (got {self.needles})")
        if not self.lengths or any(not 16 <= n <= MAX_LENGTH for n in self.lengths):
            raise BadInput(f"--lengths: each must be in [16, {MAX_LENGTH:,}] (got {','.join(map(str, self.lengths))})")
        if not 1 <= self.depths <= 101:
            raise BadInput(f"--depths must be in [1, 101] (got {self.depths})")
        if not 1 <= self.top <= 10_000:
            raise BadInput(f"--top must be in [1, 10,000] (got {self.top})")
        if not 0.0 <= self.tolerance <= 1.0:  # NaN fails both
            raise BadInput(f"--tolerance must be in [0, 1] (got {self.tolerance})")
        if not 0 <= self.mask <= 10_000:
            raise BadInput(f"--mask must be in [0, 10,000] (got {self.mask})")

    def options(self) -> list[tuple[str, Any]]:
        return [("--transformer", self.transformer),
                ("--needles", self.needles if self.needles != DEFAULT_NEEDLES else None),
                ("--lengths", ",".join(map(str, self.lengths)) if self.lengths != DEFAULT_LENGTHS else None),
                ("--depths", self.depths if self.depths != DEFAULT_DEPTHS else None),
                ("--top", self.top if self.top != DEFAULT_TOP else None),
                ("--tolerance", self.tolerance if self.tolerance != DEFAULT_TOLERANCE else None),
                ("--mask", self.mask or None), ("--seed", self.seed or None),
                ("--allow-missing-weights", self.allow_missing_weights)]

    def command_line(self) -> str:
        return attn_command("retrieval", (), self.options())


class RetrievalResult(RetrievalView):
    """The report of :func:`compute`; the request says its command line."""

    def __init__(self, request: RetrievalRequest, report: dict[str, Any]) -> None:
        super().__init__(report, title=f"attn retrieval: {report['model']}", command="retrieval",
                         options=request.options())
        self.request = request


def compute(request: RetrievalRequest, model: Any = None, *, progress: Optional[Progress] = None) -> RetrievalResult:
    """The report ``request`` asks for, of ``model`` (pipeline.running: loaded, Later, or None:
    attncli.hf.load, NumPy backend); ``progress`` says what runs (default: running.Quiet). The
    haystack is held-out Brown text."""
    request.check()
    progress = quiet(progress)
    model = model_for(model, request.transformer, lambda: load(request.transformer, backend="numpy",
                                                               allow_missing_weights=request.allow_missing_weights))
    request.check_model(facts(model))  # the table's rows on the model: a decoder's
    too_long = [n for n in request.lengths if n > model.max_positions]
    if too_long:
        raise BadInput(f"--lengths {too_long[0]:,}: the model reads at most {model.max_positions:,} positions")
    with progress.stage("reading the held-out Brown sentences"):
        sentences = brown_texts(max(request.lengths) // TOKENS_PER_SENTENCE + 50)
    hay = haystack(model, sentences)
    needles = make_needles(request.needles, request.seed)
    count = request.needles * len(request.lengths) * request.depths * (1 + 2 * (request.mask > 0))
    with progress.bar(f"decoding {count} needle prompts on {model.name}", "prompts", count) as advance:
        report = scan(model, hay, leading_specials(model), needles, request.lengths, depth_fractions(request.depths),
                      top=request.top, tolerance=request.tolerance, mask=request.mask, seed=request.seed,
                      on_sample=advance)
    report["model"] = model.name
    return RetrievalResult(request, report)
