"""``attn heads`` as one request, one compute, one result: :class:`HeadsRequest` -> :func:`compute`
-> :class:`HeadsResult` (the result protocol of attncli.views.result, drawn by
attncli.views.heads_table). attn's own LM's heads (attncli.tinylm.heads) or a pretrained model's
(attncli.pipeline.heads_scoring), over --file's lines or held-out sentences.

    >>> HeadsRequest(transformer="gpt2", window=5).command_line()
    'attn heads --transformer gpt2 --window 5'
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Optional

from attncli.model.interface import has
from attncli.errors import BadInput
from attncli.hf.loader import load
from attncli.rules.option_conflicts import TableRequest
from attncli.pipeline.head_roles import MAX_RANDOM_LENGTH, check_role, random_report, weights_report
from attncli.pipeline.heads_scoring import score_transformer_heads
from attncli.io.textio import read_user_text, visible
from attncli.tinylm.data import brown_texts
from attncli.tinylm.heads import check_window, score_heads
from attncli.tinylm.model import load_trained
from attncli.vectors.tokenize import tokenize
from attncli.views.head_map import HeadMapView, edges
from attncli.views.heads_table import HeadsView
from attncli.views.result import attn_command

DEFAULT_SENTENCES = 200  # a pretrained model's: held-out Brown sentences
DEFAULT_RANDOM_SEQUENCES = 10  # --random: repeated random sequences (--sentences sets another count)
STACK_READS = {"encoder": "its self-attention over each sentence",
               "decoder": "its causal self-attention over each target, the source read by the encoder",
               "cross": "the target's tokens over the source's; a line without a TAB is its own target"}


@dataclass
class HeadsRequest(TableRequest):
    """Everything ``attn heads`` needs (its options, by their parameter names)."""

    model: Optional[str] = None  # attn's own LM of this word-vector model (None: the default)
    transformer: Optional[str] = None  # a pretrained model instead
    file: Optional[Path] = None  # one sentence per line (None: held-out sentences)
    sentences: Optional[int] = None  # at most this many
    window: int = 3  # 'local': within this many tokens back
    exclude_first: bool = False  # drop key 0 and renormalise each row (attention sinks)
    backend: str = "auto"
    allow_missing_weights: bool = False
    stack: Optional[str] = None  # an encoder-decoder's encoder, decoder or cross heads
    weights: bool = False  # read the heads from their weights alone (attncli.pipeline.head_roles)
    random: Optional[int] = None  # score them on this many random tokens, repeated (TransformerLens' test)
    role: Optional[str] = None  # the score the head map shows (--weights or --random)
    threshold: Optional[float] = None  # the composition edges listed: those above it (None: the strongest)

    table_path: ClassVar[str] = "heads"
    POSITIONALS: ClassVar[tuple[str, ...]] = ()  # every input is an option

    def check(self) -> None:
        """The refusals that need no model (bad input: exit 2), in the order the command reads them."""
        if self.sentences is not None and self.sentences < 1:
            raise BadInput(f"--sentences must be at least 1 (got {self.sentences})")
        if self.sentences is not None and self.sentences > 10**9:
            raise BadInput(f"--sentences must be in [1, 1,000,000,000] (got {self.sentences})")
        check_window(self.window)
        if self.random is not None and not 1 <= self.random <= MAX_RANDOM_LENGTH:
            raise BadInput(f"--random must be in [1, {MAX_RANDOM_LENGTH:,}] (got {self.random})")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise BadInput(f"--threshold must be in [0, 1] (got {self.threshold})")
        super().check()  # how the options go together: the table's rows of attn heads

    def options(self) -> list[tuple[str, Any]]:
        return [("--model", self.model), ("--transformer", self.transformer), ("--file", self.file),
                ("--sentences", self.sentences), ("--window", self.window if self.window != 3 else None),
                ("--exclude-first", self.exclude_first), ("--backend", self.backend if self.backend != "auto" else None),
                ("--allow-missing-weights", self.allow_missing_weights), ("--stack", self.stack),
                ("--weights", self.weights), ("--random", self.random), ("--role", self.role),
                ("--threshold", self.threshold)]

    def command_line(self) -> str:
        return attn_command("heads", self.positionals(), self.options())


class HeadsResult(HeadsView):
    """The report of :func:`compute`; the request says its command line."""

    def __init__(self, request: HeadsRequest, report: dict[str, Any]) -> None:
        super().__init__(report, title=f"attn heads: {report['model']}", command="heads", options=request.options())
        self.request = request


class HeadMapResult(HeadMapView):
    """The head map of ``--weights`` or ``--random``; the request says its command line."""

    def __init__(self, request: HeadsRequest, report: dict[str, Any]) -> None:
        super().__init__(report, title=f"attn heads: {report['model']}", command="heads", options=request.options())
        self.request = request


class Quiet:
    """What :func:`compute` says while it works, to no one (the command line shows a line or a bar
    on stderr: attncli.cli.progress)."""

    def stage(self, what: str) -> ContextManager[None]:
        return contextlib.nullcontext()

    def bar(self, what: str, unit: str, total: int) -> ContextManager[Callable[[], None]]:
        return contextlib.nullcontext(lambda: None)

    def info(self, message: str) -> None:
        pass


def compute(request: HeadsRequest, *, load_model: Optional[Callable[[], Any]] = None,
            progress: Any = None) -> HeadsResult:
    """The heads' report ``request`` asks for; ``load_model()`` gives the pretrained model (default:
    attncli.hf.load), ``progress`` says what runs (stage, bar, info; default: :class:`Quiet`)."""
    request.check()
    progress = progress or Quiet()
    if request.transformer is None:
        return HeadsResult(request, _own_lm_report(request))
    texts = None
    if request.file is not None:
        lines = read_user_text(request.file, "--file", hint="one sentence per line").splitlines()
        texts = [t for t in (line.strip() for line in lines) if t]
    model = (load_model or (lambda: load(request.transformer, backend=request.backend,
                                         allow_missing_weights=request.allow_missing_weights)))()
    if request.weights or request.random is not None:
        return _head_roles(request, model, progress)
    if request.stack is not None and not has(model, "stacks"):
        raise BadInput(f"--stack reads an encoder-decoder (T5, BART); model '{visible(model.name)}' "
                       f"({visible(model.model_type)}) is not one: drop --stack")
    if texts is None:
        with progress.stage("reading the held-out Brown sentences"):
            texts = brown_texts(request.sentences or DEFAULT_SENTENCES)
    if request.sentences is not None:
        texts = texts[:request.sentences]
    if not texts:
        raise BadInput("no sentence to score the heads on (--file is empty)")
    stack = request.stack or ("encoder" if has(model, "stacks") else None)
    shape = model.stack(stack) if stack is not None else model
    with progress.bar(f"scoring the {shape.layers * shape.heads} heads of {model.name} on {len(texts)} sentences "
                      f"({model.backend} backend)", "sentences", len(texts)) as advance:
        report = score_transformer_heads(model, texts, window=request.window, exclude_first=request.exclude_first,
                                         on_text=advance, stack=stack)
    if stack is not None:  # T5, BART (hf.backends.seq2seq)
        progress.info(f"an encoder-decoder: these are the {stack} stack's heads ({STACK_READS[stack]})")
        report["stack"] = stack
    return HeadsResult(request, report)


def _head_roles(request: HeadsRequest, model: Any, progress: Any) -> HeadMapResult:
    """--weights or --random: the head map's document."""
    source = "weights" if request.weights else "random"
    check_role(request.role, source)
    if request.weights:
        with progress.stage(f"reading the {model.layers * model.heads} heads' weights of {model.name}"):
            report = weights_report(model)
        report["threshold"] = request.threshold
        report["edges"] = edges(report, request.threshold)
    else:
        count = request.sentences or DEFAULT_RANDOM_SEQUENCES
        with progress.bar(f"scoring the {model.layers * model.heads} heads of {model.name} on {count} repeated "
                          f"random sequences", "sequences", count) as advance:
            report = random_report(model, length=request.random, count=count, on_text=advance)
    report["role"] = request.role or ("copying" if request.weights else "induction")
    return HeadMapResult(request, report)


def _own_lm_report(request: HeadsRequest) -> dict[str, Any]:
    att = load_trained(request.model)
    if request.file is not None:
        text = read_user_text(request.file, "--file", hint="give a UTF-8 text file, one sentence per line")
        sents = [tokenize(line) for line in text.splitlines()]
    else:
        sents = att.heldout_sentences()
    if request.sentences is not None:
        sents = sents[:request.sentences]
    return score_heads(att, sents, window=request.window)
