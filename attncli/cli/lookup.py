"""``attn lookup``: the fuzzy-key dictionary (a thin layer over ``attncli.lookup.dictionary``).

Results (table and answer, or JSON) go to stdout; ``--explain`` steps go to stdout with the
table, and to stderr with ``--json`` so that the JSON stays clean.
"""

from typing import Annotated, Optional

import typer

from attncli.cli.common import app, err_console, warn
from attncli.cli.options import AllowMissingWeightsOpt, JsonOpt, ModelOpt
from attncli.cli.output import show
from attncli.errors import BadInput
from attncli.lookup import dictionary as core
from attncli.lookup.params import DEFAULT_TEMPERATURE, ENCODER_NGRAM_WEIGHTS, NGRAM_WEIGHT, encoder_ngram_weight
from attncli.env.paths import data_dir
from attncli.io.textio import clip
from attncli.vectors.model import load_vectors
from attncli.views.lookup_view import LookupView, explain_text

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
    core.check_temperature(temperature)
    if top_k is not None and top_k <= 0:
        raise BadInput(f"--top-k must be at least 1, got {top_k}")
    if rows < 0:
        raise BadInput(f"--rows must be 0 (all) or more, got {rows}")
    if (query is None) == (queries is None):
        raise BadInput("give a QUERY or --queries FILE (one query per line), not both" if query is not None
                       else "give a QUERY to look up (e.g. attn lookup colour), or --queries FILE")
    if queries == "-" and dict_path == "-":
        raise BadInput("--queries - and --dict - cannot both read stdin: put one of them in a file")
    if encoder is not None and model is not None:
        raise BadInput("--model (word vectors) and --encoder (a sentence encoder) are two ways to compare keys: give one")
    if allow_missing_weights and encoder is None:
        raise BadInput("--allow-missing-weights needs --encoder NAME_OR_PATH (a pretrained sentence encoder)")
    given_weight = ngram_weight
    if ngram_weight is None:
        ngram_weight = encoder_ngram_weight(encoder) if encoder is not None else NGRAM_WEIGHT
    core.check_ngram_weight(ngram_weight)

    dictionary = core.read_dictionary(dict_path if dict_path is not None else data_dir() / "car.json")
    batch = core.read_queries(queries) if queries is not None else [(0, query)]
    if query is not None and not query.strip():  # before a model is loaded
        raise BadInput("the query is empty: give a word or phrase to look up")
    if encoder is not None:
        vectors = None
        from attncli.lookup.encoder import EncoderIndex, load_encoder  # the model's forward passes: --encoder only

        index = EncoderIndex(load_encoder(encoder, allow_missing_weights=allow_missing_weights), list(dictionary),
                             ngram_weight=ngram_weight)
    else:
        vectors = load_vectors(model)
        index = core.KeyIndex(vectors, list(dictionary), ngram_weight=ngram_weight)
    if queries is not None:  # every query checked before any answer is printed: no partial output on a bad line
        for line, q in batch:
            try:
                index.check_query(q, allow_no_vector=core.exact_key(q, dictionary, index, exact=exact))
            except BadInput as exc:
                raise BadInput(f"--queries line {line}: {exc}") from None
    noted = False
    for line, q in batch:
        try:
            result = core.lookup(q, dictionary, vectors, temperature=temperature, top_k=top_k, exact=exact, index=index)
        except BadInput as exc:
            if line:
                raise BadInput(f"--queries line {line}: {exc}") from None
            raise
        if result.exact and index.vectorless_keys and not noted:  # said once, on stderr
            noted = True
            names = ", ".join(clip(k) for k in index.vectorless_keys[:5]) + (" ..." if len(index.vectorless_keys) > 5 else "")
            warn(f"{len(index.vectorless_keys)} key(s) have no word vector in model '{index.name}' ({names}): "
                 "an exact key answers like a dict, and their cosine is shown as 0")
        view = LookupView(result, index if explain else None, rows=rows, heading=queries is not None,
                          dictionary=dictionary if dict_path == "-" else None, dict_path=dict_path, model=model,
                          encoder=encoder, allow_missing_weights=allow_missing_weights, ngram_weight=given_weight,
                          exact=exact, compact=True if queries is not None else None)
        # one compact line in batch mode, and for big results (indented JSON is written by
        # Python's slow pure-Python encoder: 2.5 s for 100,000 entries)
        show(view, json_out=json_out)
        if json_out and explain:
            err_console().print(explain_text(result, index), highlight=False)
