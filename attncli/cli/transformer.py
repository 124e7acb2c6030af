"""``attn matrix --transformer``: a pretrained model's attention (and the model loader ``attn heads``
and ``attn compare`` share).

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
from typing import Optional

from attncli.cli.common import out_console, warn
from attncli.model.interface import has
from attncli.cli.progress import Bar, Stage
from attncli.errors import BadInput
from attncli.hf import load
from attncli.rules.option_conflicts import BACKENDS, NOT_FOR_TRANSFORMERS, TRANSFORMER_ONLY, validate  # noqa: F401 (the table)
from attncli.pipeline.compute_view import compute
from attncli.pipeline.view_request import ViewRequest, check_combinations
from attncli.views.export import export_files

def check_options(given: set[str], transformer: Optional[str]) -> None:
    """BadInput (exit 2) for an option that does not apply: a word-vector option with
    --transformer, or a --transformer option without it (attncli.rules.option_conflicts)."""
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
    """Compute and print the view (or its --json); write the exports (attncli.cli.output.Exports)."""
    o = replace(o, page=exports.html is not None)
    check_combinations(o)
    model = load_model(o.transformer, o.backend, o.allow_missing_weights, json_out=json_out, device=o.device,
                       dtype=o.dtype, device_map=o.device_map, max_memory=o.max_memory)
    with layer_progress(model, None, json_out) as on_layer:
        res = compute(o, model, on_layer=on_layer)
    if res.meta.get("truncated"):  # said on stderr, so a --json or a piped view is not mistaken for the whole text
        warn(f"--truncate cut the input to the model's limit of {model.max_positions} tokens: "
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
    if has(model, "trace") and has(model, "progress"):
        with Bar(what, "layers", model.layers, json_out=json_out) as bar:
            yield lambda l, L: bar.advance()
    else:
        with Stage(what, json_out=json_out):
            yield None
