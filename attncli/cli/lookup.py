"""``attn lookup``: the fuzzy-key dictionary (a thin layer: the request, compute and result are
attncli.pipeline.lookup_compute's, the lookup attncli.lookup.dictionary's).

Results (table and answer, or JSON) go to stdout; ``--explain`` steps go to stdout with the
table, and to stderr with ``--json`` so that the JSON stays clean.
"""

from typing import Annotated, Optional

import typer

from attncli.cli.common import app, err_console
from attncli.cli.options import AllowMissingWeightsOpt, JsonOpt, ModelOpt
from attncli.cli.output import show
from attncli.cli.progress import Progress
from attncli.lookup.params import DEFAULT_TEMPERATURE, ENCODER_NGRAM_WEIGHTS, NGRAM_WEIGHT
from attncli.pipeline.lookup_compute import LookupRequest, compute
from attncli.views.lookup_view import explain_text

_ENCODER_WEIGHTS = ", ".join(f"{name} {lam:g}" for name, lam in ENCODER_NGRAM_WEIGHTS.items())


@app.command("lookup")
def lookup_cmd(
    query: Annotated[Optional[str], typer.Argument(help="The key to look up: a word or a phrase (\"top speed\").", show_default=False)] = None,
    *,
    dict_path: Annotated[Optional[str], typer.Option("--dict", help="JSON object to look in: a file, or - for stdin (default: the shipped car.json).", show_default=False)] = None,
    model: ModelOpt = None,
    encoder: Annotated[Optional[str], typer.Option("--encoder", help="Compare query and keys with a pretrained sentence encoder instead (a directory or hub id, e.g. all-MiniLM-L6-v2): its sentence-transformers pooling (mean if none), then cosine.", show_default=False)] = None,
    allow_missing_weights: AllowMissingWeightsOpt = False,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="Softmax temperature T (> 0): lower is sharper.")] = DEFAULT_TEMPERATURE,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Keep only the K most similar keys (softmax over those K).", show_default=False)] = None,
    ngram_weight: Annotated[Optional[float], typer.Option(help=f"lambda in similarity = (1-lambda)*cosine + lambda*ngram overlap; 0: cosine only. Default {NGRAM_WEIGHT:g}; with --encoder, the encoder's own where one was chosen ({_ENCODER_WEIGHTS}).", show_default=False)] = None,
    exact: Annotated[bool, typer.Option("--exact/--no-exact", help="A query that is a key gets weight 1 on it, like a dict.")] = True,
    queries: Annotated[Optional[str], typer.Option("--queries", help="Batch: one query per line from a file, or - for stdin (--json: JSON Lines).", show_default=False)] = None,
    rows: Annotated[int, typer.Option(help="Table rows to show (0: all); --json always lists every kept key.")] = 20,
    explain: Annotated[bool, typer.Option("--explain", help="Print the steps and the formula.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Look a key up in a dictionary by attention: softmax over the similarity of the query to every key.

    `attn lookup colour` answers 'black' from {"brand": "Porche", "model": "Taycan", "color": "black"}.
    """
    request = LookupRequest(query, dict_path=dict_path, model=model, encoder=encoder,
                            allow_missing_weights=allow_missing_weights, temperature=temperature, top_k=top_k,
                            ngram_weight=ngram_weight, exact=exact, queries=queries, rows=rows, explain=explain)
    batch = compute(request, progress=Progress(json_out))
    for _, view in batch.views():
        # one compact line in batch mode, and for big results (indented JSON is written by
        # Python's slow pure-Python encoder: 2.5 s for 100,000 entries)
        show(view, json_out=json_out)
        if json_out and explain:
            err_console().print(explain_text(view.result, batch.index), highlight=False)
