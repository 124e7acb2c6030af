"""``attn matrix --transformer`` and ``attn heads --transformer``: a pretrained model's attention.

Thin layer: the options make a :class:`attncli.pipeline.ViewRequest`, :func:`attncli.pipeline.compute_view`
runs it (every stack of an encoder-decoder too), and the result draws, prints its JSON and writes
its exports (attncli.pipeline.view_result).
``attn matrix`` hands over here only when --transformer is given, so no other command imports
this module (and nothing here imports torch, transformers, tokenizers or safetensors at module
level either).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from attncli.cli.common import info, out_console, warn
from attncli.cli.progress import Bar, Stage
from attncli.cli.transformer_heads import score_transformer_heads
from attncli.errors import BadInput
from attncli.hf import load
from attncli.hf.reads import takes_on_layer
from attncli.option_conflicts import BACKENDS, NOT_FOR_TRANSFORMERS, TRANSFORMER_ONLY, validate  # noqa: F401 (the table)
from attncli.pipeline.compute_view import compute
from attncli.tinylm.data import brown_texts
from attncli.pipeline.view_request import STACKS, ViewRequest, check_combinations
from attncli.textio import read_user_text, visible
from attncli.views.export import export_files

def check_options(given: set[str], transformer: Optional[str]) -> None:
    """BadInput (exit 2) for an option that does not apply: a word-vector option with
    --transformer, or a --transformer option without it (attncli.option_conflicts)."""
    validate({}, "transformer" if transformer is not None else "vectors", given=given)


MatrixOptions = ViewRequest  # the options of attn matrix --transformer are the request


def load_model(name: str, backend: str, allow_missing_weights: bool = False, *, json_out: bool = False,
               device: Optional[str] = None, dtype: Optional[str] = None, **placement: Optional[str]):
    """The model, with a line on stderr while it loads (a second or more; --backend torch imports
    torch and transformers first)."""
    what = "" if backend == "auto" else f", --backend {backend}"
    with Stage(f"loading {name}{what}", json_out=json_out):
        return load(name, backend=backend, allow_missing_weights=allow_missing_weights, device=device, dtype=dtype,
                    **placement)  # device_map, max_memory


def run_matrix(o: ViewRequest, *, json_out: bool, exports, row_span, col_span) -> None:
    """Compute and print the view (or its --json); write the exports (attncli.cli.matrix.Exports)."""
    o = replace(o, page=exports.html is not None)
    check_combinations(o)
    model = load_model(o.transformer, o.backend, o.allow_missing_weights, json_out=json_out, device=o.device,
                       dtype=o.dtype, device_map=o.device_map, max_memory=o.max_memory)
    with layer_progress(model, None, json_out) as on_layer:
        res = compute(o, model, on_layer=on_layer)
    if res.meta.get("truncated"):  # said on stderr, so a --json or a piped view is not mistaken for the whole text
        warn(f"--truncate cut the input to the model's limit of {getattr(model, 'max_positions', '?')} tokens: "
             "the view shows only its start")
    if json_out:
        res.write_json(sys.stdout.write)
        sys.stdout.flush()
    else:
        console = out_console()
        for part in res.renderables(console.width, row_span, col_span):
            console.print(part)
    drawn_html = exports.html if o.long else None  # a long view's --html is its drawing, as --svg
    if exports.svg is not None or exports.png is not None or drawn_html is not None:
        export_files(lambda w: res.renderables(w, row_span, col_span), res.title, svg=exports.svg, png=exports.png,
                     html=drawn_html, width=exports.width)
    if exports.html is not None and drawn_html is None:
        res.export("html", exports.html)


@contextlib.contextmanager
def layer_progress(model, tokens: Optional[int], json_out: bool):
    """A bar on stderr advancing as each layer of the pass is done (attncli.cli.progress.Bar) where
    the model's trace reports its layers (``on_layer``), else a line saying what runs; gives the
    ``on_layer(l, L)`` callback (None without a bar)."""
    what = f"running {model.name}" + (f" over {tokens} tokens" if tokens is not None else "")
    if getattr(model, "traced", False) and takes_on_layer(model):
        with Bar(what, "layers", model.layers, json_out=json_out) as bar:
            yield lambda l, L: bar.advance()
    else:
        with Stage(what, json_out=json_out):
            yield None


# --- attn heads --transformer -------------------------------------------------------------------

DEFAULT_SENTENCES = 200


def run_heads(transformer: str, *, file: Optional[Path], sentences: Optional[int], window: int,
              exclude_first: bool, backend: str, json_out: bool = False, allow_missing_weights: bool = False,
              stack: Optional[str] = None) -> dict[str, Any]:
    """The report of ``attn heads --transformer``: on --file's lines, else on Brown's held-out
    sentences (the documents ``attn train-attention`` holds out by default, punctuation kept).
    ``stack``: an encoder-decoder's encoder, decoder or cross heads (a line "SOURCE<TAB>TARGET"
    gives the decoder its own text; else it reads the source again)."""
    if backend not in BACKENDS:
        raise BadInput(f"--backend {backend!r}: expected auto, numpy or torch")
    if stack is not None and stack not in STACKS:
        raise BadInput(f"--stack {stack!r}: choose one of {', '.join(STACKS)}")
    if file is not None:
        texts = [line.strip() for line in read_user_text(file, "--file", hint="one sentence per line").splitlines()]
        texts = [t for t in texts if t]
    else:
        texts = None
    model = load_model(transformer, backend, allow_missing_weights, json_out=json_out)
    if stack is not None and not getattr(model, "encoder_decoder", False):
        raise BadInput(f"--stack reads an encoder-decoder (T5, BART); model '{visible(model.name)}' "
                       f"({visible(model.model_type)}) is not one: drop --stack")
    if texts is None:
        with Stage("reading the held-out Brown sentences", json_out=json_out):
            texts = brown_texts(sentences or DEFAULT_SENTENCES)
    if sentences is not None:
        texts = texts[:sentences]
    if not texts:
        raise BadInput("no sentence to score the heads on (--file is empty)")
    stack = stack or ("encoder" if getattr(model, "encoder_decoder", False) else None)
    shape = model.stack(stack) if stack is not None else model
    with Bar(f"scoring the {shape.layers * shape.heads} heads of {model.name} on {len(texts)} sentences "
             f"({model.backend} backend)", "sentences", len(texts), json_out=json_out) as bar:
        report = score_transformer_heads(model, texts, window=window, exclude_first=exclude_first, on_text=bar.advance,
                                         stack=stack)
    if stack is not None:  # T5, BART (transformer.seq2seq)
        info(f"an encoder-decoder: these are the {stack} stack's heads ({STACK_READS[stack]})")
        report["stack"] = stack
    return report


STACK_READS = {"encoder": "its self-attention over each sentence",
               "decoder": "its causal self-attention over each target, the source read by the encoder",
               "cross": "the target's tokens over the source's; a line without a TAB is its own target"}
