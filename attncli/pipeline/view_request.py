"""What a pretrained model's attention view asks for: :class:`ViewRequest`, the twin of the word
vectors' :class:`~attncli.attention.matrix.MatrixRequest`, and the refusals that need no model.

The CLI (``attn matrix --transformer``), explore (``attn explore --transformer``), the interactive
page and the Python API all build one and hand it to :func:`attncli.pipeline.compute_view`. An
encoder-decoder's stack (encoder, decoder or cross) is a field, not another pipeline.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields
from typing import Optional

from attncli.attention.long_view import LongSpec, check_spec
from attncli.attention.checkpoint_views import check_texts
from attncli.rules.option_conflicts import BACKENDS, NEW_SWITCHES, NOT_ACROSS, STACKS, TRANSFORMER_SHOWS, validate  # noqa: F401
from attncli.rules.option_conflicts import flag as flag_of

SHOWS = TRANSFORMER_SHOWS
NOT_WRITTEN = ("text", "layers", "explain", "page", "cursor")  # options() writes the text first, --layers and
# --explain last where they apply; page and cursor are what a surface reads, not options


@dataclass
class ViewRequest:
    """Everything one view of a pretrained model's attention needs (``attn matrix --transformer``'s
    options, by their parameter names)."""

    text: str
    transformer: str  # a hub id or a directory
    # the options, in the order the command line (options()) writes them: a field is its flag (option_conditions.flag)
    pair: Optional[str] = None  # a second sentence, one input with the first (--pair)
    filter: Optional[str] = None  # --filter a-a | a-b | b-a | b-b (None: all)
    layer: Optional[int] = None  # None: the last
    head: Optional[int] = None  # None: every head and their mean
    backend: str = "auto"
    target: Optional[str] = None  # an encoder-decoder's decoder text
    stack: Optional[str] = None  # encoder, decoder or cross (None: encoder)
    device: Optional[str] = None  # --device / --dtype: the torch backend's (None: cpu, float32)
    dtype: Optional[str] = None
    device_map: Optional[str] = None  # --device-map / --max-memory: accelerate's split (attncli.hf.backends.placement)
    max_memory: Optional[str] = None
    filter_specials: str = "none"  # --filter-specials
    words: bool = False
    hide_special: bool = False
    rollout: bool = False
    truncate: bool = False
    model_view: bool = False
    allow_missing_weights: bool = False
    show: str = "weights"  # weights, scores (before the softmax), norms (||alpha f(x)||), alti, globenc or value-zeroing
    flow: bool = False  # attention flow (max-flow through the layers) instead of one layer
    rows: Optional[str] = None  # --rows SPEC, --top-k K, --pool SPAN: a long text's views (attncli.attention.long_view)
    top_k: Optional[int] = None
    pool: Optional[str] = None
    # written last, and only where they apply (options()):
    layers: Optional[str] = None  # --layers A-B of the model view
    explain: Optional[tuple[int, int]] = None  # --explain I J (input positions)
    # what the surface will read besides the view, so the one traced pass keeps it (not options):
    page: bool = False  # the interactive page (--html): every layer's extra sites
    cursor: bool = False  # explore: any cell may be explained (the layer's q, k kept on the NumPy backend)
    # a new view's switch (option_conflicts.NEW_SWITCHES): a field added here, written as its flag

    @property
    def long(self) -> LongSpec:
        return LongSpec(rows=self.rows, top_k=self.top_k, pool=self.pool)

    def check(self) -> None:
        """The refusals that need no model (BadInput, exit 2)."""
        check_combinations(self)

    def options(self, cell: Optional[tuple[int, int]] = None) -> list[str]:
        """The sentence and the options of ``attn matrix`` that say this request (``cell``: an
        ``--explain I J`` instead of the request's own)."""
        args = [self.text]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in NOT_WRITTEN or value is False or value is None or value == f.default:
                continue
            args += [flag_of(f.name)] if value is True else [flag_of(f.name), str(value)]
        if self.top_k is not None or self.pool is not None:  # their cells are no (query, key) cell
            return args
        if self.model_view:  # --layers belongs to it; it has no --explain
            return args + (["--layers", self.layers] if self.layers is not None else [])
        cell = cell if cell is not None else self.explain
        return args + (["--explain", str(cell[0]), str(cell[1])] if cell is not None else [])

    def command_line(self, cell: Optional[tuple[int, int]] = None) -> str:
        """The ``attn matrix`` command that prints this view.

        >>> ViewRequest("time flies", transformer="gpt2", layer=1, show="scores").command_line()
        "attn matrix 'time flies' --transformer gpt2 --layer 1 --show scores"
        """
        return shlex.join(["attn", "matrix", *self.options(cell)])


def check_combinations(o: ViewRequest) -> None:
    """What can be checked before the model is loaded: the texts, then the table of
    attncli.rules.option_conflicts (with --target or --stack, the encoder-decoder's rows too), then the
    values of a long text's views (attncli.attention.long_view)."""
    check_texts(o.text, o.pair)
    seq2seq = o.target is not None or o.stack is not None
    validate(vars(o), *(("transformer", "seq2seq") if seq2seq else ("transformer",)))
    check_spec(o.long)  # the values themselves; how they go with the rest is the table's


def check_seq2seq_options(o: ViewRequest) -> None:
    """What can be refused before the model loads, when --target or --stack is given, or the model
    turns out to be an encoder-decoder: the encoder-decoder rows of attncli.rules.option_conflicts."""
    validate(vars(o), "seq2seq")
