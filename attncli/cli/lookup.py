"""``attn lookup``: the fuzzy-key dictionary (a thin layer over ``attncli.lookup.dictionary``).

Results (table and answer, or JSON) go to stdout; ``--explain`` steps go to stdout with the
table, and to stderr with ``--json`` so that the JSON stays clean.
"""

import json
import math
from typing import Annotated, Any, Optional

import typer

from attncli.cli.app import app, emit_json, err_console, escape, out_console, warn
from attncli.errors import BadInput
from attncli.textio import clip
from attncli.lookup.params import DEFAULT_TEMPERATURE, ENCODER_NGRAM_WEIGHTS, NGRAM_WEIGHT, encoder_ngram_weight

BAR_WIDTH = 20
_ENCODER_WEIGHTS = ", ".join(f"{name} {lam:g}" for name, lam in ENCODER_NGRAM_WEIGHTS.items())
COMPACT_JSON_ABOVE = 1000  # entries


@app.command("lookup")
def lookup_cmd(
    query: Annotated[Optional[str], typer.Argument(help="The key to look up: a word or a phrase (\"top speed\").", show_default=False)] = None,
    *,
    dict_path: Annotated[Optional[str], typer.Option("--dict", help="JSON object to look in: a file, or - for stdin (default: the shipped car.json).", show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Word-vector model (default: $ATTN_MODEL, else the built-in one).", show_default=False)] = None,
    encoder: Annotated[Optional[str], typer.Option("--encoder", help="Compare query and keys with a pretrained sentence encoder instead (a directory or hub id, e.g. all-MiniLM-L6-v2): its sentence-transformers pooling (mean if none), then cosine.", show_default=False)] = None,
    allow_missing_weights: Annotated[bool, typer.Option("--allow-missing-weights", help="With --encoder: run an encoder whose checkpoint lacks weights or holds unused ones, with a warning.")] = False,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="Softmax temperature T (> 0): lower is sharper.")] = DEFAULT_TEMPERATURE,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Keep only the K most similar keys (softmax over those K).", show_default=False)] = None,
    ngram_weight: Annotated[Optional[float], typer.Option(help=f"lambda in similarity = (1-lambda)*cosine + lambda*ngram overlap; 0: cosine only. Default {NGRAM_WEIGHT:g}; with --encoder, the encoder's own where one was chosen ({_ENCODER_WEIGHTS}).", show_default=False)] = None,
    exact: Annotated[bool, typer.Option("--exact/--no-exact", help="A query that is a key gets weight 1 on it, like a dict.")] = True,
    queries: Annotated[Optional[str], typer.Option("--queries", help="Batch: one query per line from a file, or - for stdin.", show_default=False)] = None,
    rows: Annotated[int, typer.Option(help="Table rows to show (0: all); --json always lists every kept key.")] = 20,
    explain: Annotated[bool, typer.Option("--explain", help="Print the steps and the formula.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout (JSON Lines with --queries).")] = False,
) -> None:
    """Look a key up in a dictionary by attention: softmax over the similarity of the query to every key.

    `attn lookup colour` answers 'black' from {"brand": "Porche", "model": "Taycan", "color": "black"}.
    """
    from attncli.lookup import dictionary as core
    from attncli.paths import data_dir
    from attncli.vectors.model import load_vectors

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
    if ngram_weight is None:
        ngram_weight = encoder_ngram_weight(encoder) if encoder is not None else NGRAM_WEIGHT
    core.check_ngram_weight(ngram_weight)

    dictionary = core.read_dictionary(dict_path if dict_path is not None else data_dir() / "car.json")
    batch = core.read_queries(queries) if queries is not None else [(0, query)]
    if query is not None and not query.strip():  # before a model is loaded
        raise BadInput("the query is empty: give a word or phrase to look up")
    if encoder is not None:
        from attncli.lookup.encoder import EncoderIndex, load_encoder

        vectors = None
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
        if json_out:
            # one compact line in batch mode, and for big results (indented JSON is written by
            # Python's slow pure-Python encoder: 2.5 s for 100,000 entries)
            emit_json(result.to_json(), lines=queries is not None or len(result.keys) > COMPACT_JSON_ABOVE)
            if explain:
                err_console().print(explain_text(result, index), highlight=False)
        else:
            render(result, index if explain else None, rows=rows, heading=queries is not None)


MAX_CELL = 200  # characters of a key or value shown in a view (--json has them whole)


def _value_text(value: Any, limit: int | None = MAX_CELL) -> str:
    """A value as the views show it: a string as it is, anything else as JSON; cut to ``limit``
    characters (the JSON output has it whole)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return _cut(text, limit)


def _cut(text: str, limit: int | None = MAX_CELL) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters; --json shows all)"


def _bar(weight: float, width: int = BAR_WIDTH) -> str:
    eighths = int(round(weight * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[part]


def _num(x: float) -> str:
    return f"{x:.4g}" if abs(x) >= 1e-4 or x == 0 else f"{x:.2e}"


def _vector_steps(result, index) -> list[str]:
    """Steps 1-2 for word vectors: the query's tokens and the phrase vector."""
    v = index.vectors
    toks = ", ".join(
        f"'{escape(t)}'" + ("" if t in v.index else " (not in the vocabulary: mean of its character n-gram vectors)")
        for t in result.query_tokens[:20]
    ) + (f", … ({len(result.query_tokens):,} tokens)" if len(result.query_tokens) > 20 else "")
    return [
        f"1. tokens of the query {escape(clip(result.query))}: {toks}",
        f"2. phrase vector c(text) = mean over its tokens of (v_t/|v_t| - mu); mu = mean unit vector of the "
        f"{len(v):,} vocabulary words of model '{escape(v.name)}' (removes the direction every word shares)",
    ]


def _encoder_steps(result, index) -> list[str]:
    """Steps 1-2 for a sentence encoder: its tokens and the pooled embedding."""
    from attncli.lookup.encoder import POOLING

    enc = index.encoder
    tokens = index.pieces(result.query)
    pieces = ", ".join(f"'{escape(t)}'" for t in tokens[:20]) + (f", … ({len(tokens):,} tokens)" if len(tokens) > 20 else "")
    return [
        f"1. tokens of the query {escape(clip(result.query))} by the encoder's tokenizer: {pieces}",
        f"2. sentence embedding c(text) = {' and '.join(POOLING[m] for m in index.pooling)}"
        f"{', concatenated' if len(index.pooling) > 1 else ''}, as sentence-transformers "
        f"(pooling: {'+'.join(index.pooling)}); encoder '{escape(enc.name)}' "
        f"({escape(enc.model_type)}, {enc.layers} layers, {enc.hidden_size} dims, {enc.backend} backend)",
    ]


def explain_text(result, index) -> str:
    """The steps from the query to the answer, with the numbers of the winning rows (rich markup)."""
    T, lam = result.temperature, index.ngram_weight
    encoder = getattr(index, "encoder", None) is not None
    lines = [
        "[bold]How the answer was found[/]",
        *(_encoder_steps(result, index) if encoder else _vector_steps(result, index)),
        f"3. for each of the {result.n_keys:,} keys: cosine = cos(c(query), c(key)); ngram = Dice overlap of "
        f"the character 3-6-grams = 2|G(q) & G(k)| / (|G(q)| + |G(k)|)",
        f"4. similarity = {1 - lam:g} * cosine + {lam:g} * ngram",
    ]
    if result.exact:
        lines.append(f"5. the query is a key of the dictionary: like a dict, weight 1 on {escape(clip(result.query))}, 0 elsewhere "
                     "(--no-exact to use the softmax anyway)")
    else:
        kept = f"the {result.top_k} most similar keys (--top-k)" if result.top_k and result.top_k < result.n_keys else "all keys"
        lines.append(f"5. weight_i = exp(similarity_i / T) / sum_j exp(similarity_j / T), T = {T:g}, over {kept}")
        top = result.head(3)
        s_max = top[0].similarity
        lines.append(f"     the sum over the {len(result.keys):,} kept keys of exp((s - s_max)/T) is {_num(1.0 / top[0].weight)}; "
                     "weight = exp((s - s_max)/T) / that sum (subtracting s_max changes nothing but avoids overflow)")
        for e in top:
            lines.append(f"     {escape(_cut(e.key))}: similarity {e.similarity:.4f} = {1 - lam:g}*{e.cosine:.4f} + {lam:g}*{e.ngram:.4f};"
                         f" exp((s - s_max)/T) = {_num(math.exp((e.similarity - s_max) / T))}; weight {e.weight:.4f}")
    best = result.best
    lines.append(f"6. answer = value of the key with the largest weight: {escape(clip(best.key))} -> {escape(_value_text(best.value))}")
    if result.soft_value is not None:
        terms = " + ".join(f"{e.weight:.3f}*{_value_text(e.value, 40)}" for e in result.head(4))
        more = " + ..." if len(result.keys) > 4 else ""
        lines.append(f"7. soft value (the attention output) = sum_i weight_i * value_i = {escape(terms)}{more} = {result.soft_value:.6g}")
    else:
        lines.append("7. soft value: none (it is defined only when every value with a weight > 0 is a number)")
    return "\n".join(lines)


def render(result, index, *, rows: int, heading: bool) -> None:
    """The rich table (key, similarity, weight, bar, value) sorted by weight, then the answer."""
    from rich.table import Table

    out = out_console()
    if heading:
        out.rule(f"query: {escape(_cut(result.query, 60))}")
    if index is not None:
        out.print(explain_text(result, index), highlight=False)
    shown = result.head(None if rows == 0 else rows)
    table = Table(title=f"attention over {result.n_keys:,} keys for {escape(clip(result.query))}, T = {result.temperature:g}")
    values = [escape(_value_text(e.value)) for e in shown]
    keys = [escape(_cut(e.key)) for e in shown]
    # On a narrow terminal the optional columns go first (the explanation above has the cosine
    # and n-gram numbers too), so that keys and values fold instead of being cut off.
    parts = index is not None and out.width >= 70
    n_cols = 5 + (2 if parts else 0)
    fixed = (min(max(len(k) for k in keys), 24) + min(max(len(v) for v in values), 16)
             + 10 + 6 + (12 if parts else 0) + 3 * n_cols + 1)
    bar_width = min(BAR_WIDTH, out.width - fixed)  # what is left, at most BAR_WIDTH; < 4: no bar
    table.add_column("key", overflow="fold")
    if parts:
        table.add_column("cosine", justify="right")
        table.add_column("ngram", justify="right")
    table.add_column("similarity", justify="right")
    table.add_column("weight", justify="right")
    if bar_width >= 4:
        table.add_column("", min_width=bar_width, no_wrap=True, style="cyan")
    table.add_column("value", overflow="fold")
    for e, key, value in zip(shown, keys, values):
        cells = [key]
        if parts:
            cells += [f"{e.cosine:.3f}", f"{e.ngram:.3f}"]
        cells += [f"{e.similarity:.3f}", f"{e.weight:.3f}"]
        cells += [_bar(e.weight, bar_width)] if bar_width >= 4 else []
        table.add_row(*cells, value)
    hidden = len(result.keys) - len(shown)
    if hidden:
        rest = float(result.weight[len(shown):].sum())
        table.caption = f"... {hidden:,} more keys with total weight {rest:.3g} (--rows 0 shows all)"
    out.print(table)
    best = result.best
    how = "exact key" if result.exact else f"weight {best.weight:.3f}"
    out.print(f"answer: [bold]{escape(_value_text(best.value))}[/]  (key {escape(clip(best.key))}, {how})", highlight=False)
    if result.soft_value is not None:
        out.print(f"soft value (sum of weight * value): [bold]{result.soft_value:.6g}[/]", highlight=False)
