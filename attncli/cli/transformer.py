"""``attn matrix --transformer`` and ``attn heads --transformer``: a pretrained model's attention.

Thin layer: the options make a :class:`attncli.pipeline.ViewRequest`, :func:`attncli.pipeline.compute_view`
runs it (every stack of an encoder-decoder too), and the result draws, prints its JSON and writes
its exports (attncli.pipeline.view_result).
``attn matrix`` hands over here only when --transformer is given, so no other command imports
this module (and nothing here imports torch, transformers, tokenizers or safetensors at module
level either).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from attncli.cli.app import info, out_console
from attncli.cli.options import TRANSFORMER_ONLY  # one list, kept beside the options
from attncli.cli.progress import Bar, Stage
from attncli.cli.transformer_heads import score_transformer_heads
from attncli.errors import BadInput
from attncli.pipeline.compute_view import compute
from attncli.lm.data import brown_texts
from attncli.pipeline.view_request import STACKS, ViewRequest, check_combinations
from attncli.textio import read_user_text, visible
from attncli.views.export import export_files

# attn matrix options that belong to the word-vector path, with what to use instead
NOT_FOR_TRANSFORMERS = {
    "variant": "the model's own attention is shown (scaled dot product, per head)",
    "proj": "the model's own W_Q, W_K are used",
    "positions": "the model has its own position embeddings",
    "d_k": "the model's head size is fixed",
    "context": "for two sentences as one input use --pair TEXT",
    "causal": "a decoder (GPT-2) is causal by itself, an encoder (BERT) is not",
    "window": "the model sees the whole input",
    "pad_to": "the input is not padded",
    "seed": "nothing is random",
    "heads": "the model's head count is fixed; pick one with --head",
    "max_relative": "it belongs to --variant relative",
    "model": "--transformer names the model",
}


def option_name(param: str) -> str:
    return "--" + {"pair_filter": "filter"}.get(param, param.replace("_", "-"))


def check_options(given: set[str], transformer: Optional[str]) -> None:
    """BadInput (exit 2) for an option that does not apply: a word-vector option with
    --transformer, or a --transformer option without it."""
    if transformer is None:
        wrong = [p for p in TRANSFORMER_ONLY if p in given]
        if wrong:
            raise BadInput(f"{option_name(wrong[0])} needs --transformer NAME_OR_PATH (a pretrained model)")
        return
    for param, why in NOT_FOR_TRANSFORMERS.items():
        if param in given:
            raise BadInput(f"{option_name(param)} does not apply with --transformer: {why}")


MatrixOptions = ViewRequest  # the options of attn matrix --transformer are the request


def load_model(name: str, backend: str, allow_missing_weights: bool = False, *, json_out: bool = False,
               device: Optional[str] = None, dtype: Optional[str] = None):
    """The model, with a line on stderr while it loads (a second or more; --backend torch imports
    torch and transformers first)."""
    from attncli.transformer import load

    what = "" if backend == "auto" else f", --backend {backend}"
    with Stage(f"loading {name}{what}", json_out=json_out):
        return load(name, backend=backend, allow_missing_weights=allow_missing_weights, device=device, dtype=dtype)


def run_matrix(o: ViewRequest, *, json_out: bool, exports, row_span, col_span) -> None:
    """Compute and print the view (or its --json); write the exports (attncli.cli.matrix.Exports)."""
    o = replace(o, page=exports.html is not None)
    check_combinations(o)
    model = load_model(o.transformer, o.backend, o.allow_missing_weights, json_out=json_out, device=o.device, dtype=o.dtype)
    res = compute(o, model)
    if json_out:
        res.write_json(sys.stdout.write)
        sys.stdout.flush()
    else:
        console = out_console()
        for part in res.renderables(console.width, row_span, col_span):
            console.print(part)
    if exports.svg is not None or exports.png is not None:
        export_files(lambda w: res.renderables(w, row_span, col_span), res.title, svg=exports.svg, png=exports.png,
                     width=exports.width)
    if exports.html is not None:
        res.export("html", exports.html)


# --- attn heads --transformer -------------------------------------------------------------------

DEFAULT_SENTENCES = 200


def run_heads(transformer: str, *, file: Optional[Path], sentences: Optional[int], window: int,
              exclude_first: bool, backend: str, json_out: bool = False, allow_missing_weights: bool = False,
              stack: Optional[str] = None) -> dict[str, Any]:
    """The report of ``attn heads --transformer``: on --file's lines, else on Brown's held-out
    sentences (the documents ``attn train-attention`` holds out by default, punctuation kept).
    ``stack``: an encoder-decoder's encoder, decoder or cross heads (a line "SOURCE<TAB>TARGET"
    gives the decoder its own text; else it reads the source again)."""
    if backend not in ("auto", "numpy", "torch"):
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
