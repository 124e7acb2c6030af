"""What a pretrained model's attention view asks for: :class:`ViewRequest`, the twin of the word
vectors' :class:`~attncli.attention.matrix.MatrixRequest`, and the refusals that need no model.

The CLI (``attn matrix --transformer``), explore (``attn explore --transformer``), the interactive
page and the Python API all build one and hand it to :func:`attncli.pipeline.compute_view`. An
encoder-decoder's stack (encoder, decoder or cross) is a field, not another pipeline.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from attncli.attention.flow import check_flow_options
from attncli.attention.model_view import check_model_view_options
from attncli.attention.pretrained import check_texts, check_view_options
from attncli.attention.value_norms import check_norms_options
from attncli.errors import BadInput

BACKENDS = ("auto", "numpy", "torch")
SHOWS = ("weights", "scores", "norms")
STACKS = ("encoder", "decoder", "cross")


@dataclass
class ViewRequest:
    """Everything one view of a pretrained model's attention needs (``attn matrix --transformer``'s
    options, by their parameter names)."""

    text: str
    transformer: str  # a hub id or a directory
    pair: Optional[str] = None  # a second sentence, one input with the first (--pair)
    layer: Optional[int] = None  # None: the last
    head: Optional[int] = None  # None: every head and their mean
    block: Optional[str] = None  # --filter a-a | a-b | b-a | b-b (None: all)
    block_specials: str = "none"  # --filter-specials
    words: bool = False
    hide_special: bool = False
    rollout: bool = False
    backend: str = "auto"
    truncate: bool = False
    explain: Optional[tuple[int, int]] = None  # --explain I J (input positions)
    model_view: bool = False
    layers: Optional[str] = None  # --layers A-B of the model view
    allow_missing_weights: bool = False
    show: str = "weights"  # weights, scores (before the softmax) or norms (||alpha f(x)||)
    flow: bool = False  # attention flow (max-flow through the layers) instead of one layer
    device: Optional[str] = None  # --device / --dtype: the torch backend's (None: cpu, float32)
    dtype: Optional[str] = None
    target: Optional[str] = None  # an encoder-decoder's decoder text
    stack: Optional[str] = None  # encoder, decoder or cross (None: encoder)
    # what the surface will read besides the view, so the one traced pass keeps it:
    page: bool = False  # the interactive page (--html): every layer's extra sites
    cursor: bool = False  # explore: any cell may be explained (the layer's q, k kept on the NumPy backend)

    def check(self) -> None:
        """The refusals that need no model (BadInput, exit 2)."""
        check_combinations(self)

    def options(self, cell: Optional[tuple[int, int]] = None) -> list[str]:
        """The sentence and the options of ``attn matrix`` that say this request (``cell``: an
        ``--explain I J`` instead of the request's own)."""
        args = [self.text, "--transformer", self.transformer]
        for option, value in (("--pair", self.pair), ("--filter", self.block), ("--layer", self.layer),
                              ("--head", self.head), ("--backend", None if self.backend == "auto" else self.backend),
                              ("--target", self.target), ("--stack", self.stack), ("--device", self.device),
                              ("--dtype", self.dtype),
                              ("--filter-specials", None if self.block_specials == "none" else self.block_specials)):
            if value is not None:
                args += [option, str(value)]
        for option, flag in (("--words", self.words), ("--hide-special", self.hide_special), ("--rollout", self.rollout),
                             ("--truncate", self.truncate), ("--model-view", self.model_view),
                             ("--allow-missing-weights", self.allow_missing_weights)):
            if flag:
                args.append(option)
        if self.show != "weights":
            args += ["--show", self.show]
        if self.flow:
            args.append("--flow")
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
    """What can be checked before the model is loaded."""
    check_texts(o.text, o.pair)
    check_view_options(pair=o.pair, block=o.block, rollout=o.rollout, layer=o.layer, head=o.head)
    if o.block_specials != "none" and o.block in (None, "all"):
        raise BadInput("--filter-specials says where a --filter block puts the special tokens: add --filter a-a|a-b|b-a|b-b")
    if o.words and o.explain is not None:
        raise BadInput("--explain I J explains one token-level cell: drop --words (word rows mix several pieces)")
    if o.rollout and o.explain is not None:
        raise BadInput("--explain I J explains one head's cell, not the rollout: drop --rollout")
    if o.explain is not None and o.hide_special:
        raise BadInput("--explain I J takes input positions (special tokens included): drop --hide-special")
    check_model_view_options(model_view=o.model_view, layers=o.layers, layer=o.layer, head=o.head, explain=o.explain,
                             rollout=o.rollout, words=o.words, block=o.block)
    _check_show(o)
    _check_flow(o)
    if o.target is not None or o.stack is not None:
        check_seq2seq_options(o)
    if o.backend not in BACKENDS:
        raise BadInput(f"--backend {o.backend!r}: expected auto, numpy or torch")


def _check_show(o: ViewRequest) -> None:
    """--show scores / norms draw one layer's heads by token: the views that mix tokens, layers or
    renormalise rows are refused."""
    if o.show == "weights":
        return
    if o.show not in ("scores", "norms"):
        raise BadInput(f"--show {o.show} does not apply with --transformer: choose weights, scores or norms")
    check_norms_options(rollout=o.rollout, words=o.words, hide_special=o.hide_special, model_view=o.model_view,
                        show=o.show)


def _check_flow(o: ViewRequest) -> None:
    if o.flow:
        check_flow_options(head=o.head, rollout=o.rollout, explain=o.explain, show=o.show, words=o.words,
                           hide_special=o.hide_special, model_view=o.model_view)


NOT_ACROSS = {  # option -> why it does not apply to the cross stack (rows and columns are other tokens)
    "rollout": "--rollout multiplies a stack's layers over one sequence: the cross stack's rows (the target) and "
               "columns (the source) are different tokens, so rollout is not defined there",
    "flow": "--flow follows one sequence's tokens through the layers: not defined across the stacks",
    "model_view": "--model-view draws square self-attention: use --stack encoder or decoder",
    "pair": "--pair is a second source sentence: use it with --stack encoder",
}


def check_seq2seq_options(o: ViewRequest) -> None:
    """What can be refused before the model loads, when --target or --stack is given."""
    stack = o.stack or "encoder"
    if stack not in STACKS:
        raise BadInput(f"--stack {stack!r}: choose one of {', '.join(STACKS)}")
    if stack != "encoder" and o.target is None:
        raise BadInput(f"--stack {stack} reads the decoder: give its text with --target \"TEXT\"")
    if o.target is not None and not o.target.strip():
        raise BadInput("the --target text is empty: give the decoder's text, e.g. --target \"le chat\"")
    if o.show != "weights":
        raise BadInput(f"--show {o.show} is not implemented for encoder-decoders (T5, BART): use --show weights")
    if o.explain is not None:
        raise BadInput("--explain needs attn's NumPy forward pass, which does not run encoder-decoders (T5, BART)")
    if stack == "cross":
        for option, on in (("rollout", o.rollout), ("flow", o.flow), ("model_view", o.model_view),
                           ("pair", o.pair is not None)):
            if on:
                raise BadInput(NOT_ACROSS[option])
    if stack == "decoder" and o.pair is not None:
        raise BadInput(NOT_ACROSS["pair"])
