"""Command ``attn sinks``: attention sinks and massive activations. It builds its request
(attncli.pipeline.sinks_compute.SinksRequest), hands it to the compute (attncli.causal.massive_activations: the
math) and shows the result (views/sinks_view.py), or its --json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import app
from attncli.cli.options import EXPORT_OPTIONS, declared
from attncli.cli.output import Exports, check_exports, show
from attncli.cli.progress import Progress
from attncli.cli.transformer import load_model
from attncli.pipeline.running import Later
from attncli.pipeline.sinks_compute import DEFAULT_CAUSAL, SinksRequest, compute


@app.command("sinks")
@declared("transformer", "file", "sentences", "ratio", "min_value", "causal", "layer", "allow_missing_weights",
          "json_out", *EXPORT_OPTIONS)
def sinks_cmd(
    *,
    file: Annotated[Optional[Path], typer.Option("--file", help="Read these sentences (one per line) instead of 100 held-out Brown sentences.")] = None,
    ratio: Annotated[float, typer.Option("--ratio", help="Massive: |x| at least this many times the median |x| of the layer's residual stream (Sun et al. 2024: 1000).")] = 1000.0,
    min_value: Annotated[float, typer.Option("--min-value", help="... and |x| at least this (Sun et al. 2024: 100).")] = 100.0,
    causal: Annotated[int, typer.Option("--causal-test", min=0, max=100_000, help="Run the causal test (massive channels set to their mean) on the first N sentences; 0: none.")] = DEFAULT_CAUSAL,
    layer: Annotated[Optional[int], typer.Option("--layer", min=0, help="The causal test's layer: its massive channels set to their mean there (default: the first layer with a massive entry).", metavar="L", show_default=False)] = None,
    **options: Any,
) -> None:
    """Attention sinks and massive activations: the residual channels far above the rest, their layer and tokens.

    For each layer, the residual stream's largest channels (value, ratio to the median |value|,
    the token holding it); the massive channels (Sun et al. 2024: |x| >= 1000 x median and >= 100)
    and the layer they appear at, the tokens carrying them; each head's sink share (mean attention
    of a query on those tokens, and on the first token); the secondary sinks; and a causal test:
    the channels set to their mean over the sentences at that layer, the change in the next-token
    loss and in the sink share. JSON keys: model, ratio, min_value, texts, queries, layers [{layer,
    median, top, massive_channels}], appear, channels, carriers, sink_keys, sink_share (layers x
    heads), first_token_share, secondary, causal {layer, channels, means, texts, tokens, loss,
    loss_mean, sink_share, sink_share_mean}.
    """
    json_out = options["json_out"]
    request = SinksRequest(transformer=options["transformer"], file=file, sentences=options["sentences"], ratio=ratio,
                           min_value=min_value, causal=causal, layer=layer, allow_missing_weights=options["allow_missing_weights"])
    request.check()  # before any model is read
    exports = Exports.of(options)
    check_exports(exports, json_out)
    show(compute(request, Later(lambda name: load_model(name, "numpy", request.allow_missing_weights,
                                                        json_out=json_out)),
                 progress=Progress(json_out)),
         json_out=json_out, exports=exports)
