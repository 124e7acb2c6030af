"""``attn sinks`` as one request, one compute, one result: :class:`SinksRequest` -> :func:`compute`
-> :class:`SinksResult` (the result protocol of attncli.views.result, drawn by
attncli.views.sinks_view). The math is attncli.causal.massive_activations (massive activations, sink shares,
the causal test), run on the traced pass over --file's lines or held-out Brown sentences::

    from attncli.pipeline.sinks_compute import SinksRequest, compute
    result = compute(SinksRequest(transformer="gemma3", sentences=100))
    result.document()["channels"]    # the massive channels, at result.document()["appear"]

    >>> SinksRequest(transformer="gpt2", causal=5).command_line()
    'attn sinks --transformer gpt2 --causal-test 5'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from attncli.causal.massive_activations import PAPER_MIN_VALUE, PAPER_RATIO, scan
from attncli.errors import BadInput
from attncli.hf.loader import load
from attncli.model.interface import has, refusal
from attncli.pipeline.heads_compute import Quiet
from attncli.io.textio import read_user_text, visible
from attncli.tinylm.data import brown_texts
from attncli.views.result import attn_command
from attncli.views.sinks_view import SinksView

DEFAULT_SENTENCES = 100  # held-out Brown sentences
DEFAULT_CAUSAL = 20  # the causal test's texts: two more passes each, the logits' whole vocabulary


@dataclass
class SinksRequest:
    """Everything ``attn sinks`` needs (its options, by their parameter names)."""

    transformer: Optional[str] = None  # a hub id, a directory or a GGUF file (a decoder)
    file: Optional[Path] = None  # one sentence per line (None: held-out Brown sentences)
    sentences: Optional[int] = None  # at most this many
    ratio: float = PAPER_RATIO  # massive: |x| >= ratio * the median |x| of the state ...
    min_value: float = PAPER_MIN_VALUE  # ... and |x| >= min_value
    causal: int = DEFAULT_CAUSAL  # the causal test on the first N texts (0: none)
    layer: Optional[int] = None  # the causal test's layer (None: where the massive channels appear)
    allow_missing_weights: bool = False

    def check(self) -> None:
        """The refusals that need no model (bad input: exit 2)."""
        if self.transformer is None:
            raise BadInput("give the model with --transformer NAME (a hub id, a directory or a GGUF file)")
        if self.sentences is not None and not 1 <= self.sentences <= 100_000:
            raise BadInput(f"--sentences must be in [1, 100,000] (got {self.sentences})")
        if not 0 <= self.causal <= 100_000:
            raise BadInput(f"--causal must be in [0, 100,000] (got {self.causal})")
        for name, value in (("--ratio", self.ratio), ("--min-value", self.min_value)):
            if not math.isfinite(value) or value < 0:
                raise BadInput(f"{name} must be a finite number >= 0 (got {value})")

    def options(self) -> list[tuple[str, Any]]:
        return [("--transformer", self.transformer), ("--file", self.file), ("--sentences", self.sentences),
                ("--ratio", self.ratio if self.ratio != PAPER_RATIO else None),
                ("--min-value", self.min_value if self.min_value != PAPER_MIN_VALUE else None),
                ("--causal-test", self.causal if self.causal != DEFAULT_CAUSAL else None), ("--layer", self.layer),
                ("--allow-missing-weights", self.allow_missing_weights)]

    def command_line(self) -> str:
        return attn_command("sinks", (), self.options())


class SinksResult(SinksView):
    """The report of :func:`compute`; the request says its command line."""

    def __init__(self, request: SinksRequest, report: dict[str, Any]) -> None:
        super().__init__(report, title=f"attn sinks: {report['model']}", command="sinks", options=request.options())
        self.request = request


def compute(request: SinksRequest, *, load_model: Optional[Callable[[], Any]] = None,
            progress: Any = None) -> SinksResult:
    """The report ``request`` asks for; ``load_model()`` gives the model (default: attncli.hf.load,
    NumPy backend), ``progress`` says what runs (default: heads_compute.Quiet)."""
    request.check()
    progress = progress or Quiet()
    texts = None
    if request.file is not None:
        lines = read_user_text(request.file, "--file", hint="one sentence per line").splitlines()
        texts = [t for t in (line.strip() for line in lines) if t]
    model = (load_model or (lambda: load(request.transformer, backend="numpy",
                                         allow_missing_weights=request.allow_missing_weights)))()
    if not model.is_decoder:
        raise BadInput(f"attn sinks reads a decoder's causal attention; {visible(str(model.name))} is an encoder")
    for capability in ("trace", "resume"):
        if not has(model, capability):
            raise BadInput(refusal(model, capability, "attn sinks"))
    if texts is None:
        with progress.stage("reading the held-out Brown sentences"):
            texts = brown_texts(request.sentences or DEFAULT_SENTENCES)
    texts = texts[:request.sentences] if request.sentences is not None else texts
    if not texts:
        raise BadInput("no sentence to look for sinks in (--file is empty)")
    ids = [model.encode(t, truncate=True) for t in texts]
    with progress.bar(f"tracing {model.name} on {len(ids)} sentences", "sentences", len(ids)) as advance:
        report = scan(model, ids, ratio=request.ratio, min_value=request.min_value,
                      causal=min(request.causal, len(ids)), causal_layer=request.layer, on_text=advance)
    report["model"] = model.name
    report["layers_count"], report["heads"] = model.layers, model.heads
    for entry in [e for layer in report["layers"] for e in layer["top"]] + report["carriers"]["tokens"] + \
            report["secondary"]:
        entry["token"] = model.token_texts([entry["token_id"]])[0]
    return SinksResult(request, report)
