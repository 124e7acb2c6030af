"""``attn lookup`` as a result (attncli.views.result): the table of keys sorted by weight with a
bar each, the answer and the soft value; with --explain the steps from the query to the answer.
Drawn by the command and by a notebook alike (``LookupView(lookup(...))``).

    >>> from attncli.lookup import lookup
    >>> from attncli.vectors import load_vectors
    >>> view = LookupView(lookup("colour", {"color": "black", "brand": "Porche"}, load_vectors()),
    ...                   dictionary={"color": "black", "brand": "Porche"})
    >>> print(view.command_line())
    printf '%s\\n' '{"color": "black", "brand": "Porche"}' | attn lookup colour --dict -
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any, Optional

from attncli.lookup.params import DEFAULT_TEMPERATURE, POOLING
from attncli.io.textio import clip, visible
from attncli.views.result import Result, Trimmed, attn_command, shown

BAR_WIDTH = 20
COMPACT_JSON_ABOVE = 1000  # entries: above, --json is one line (indented JSON is Python's slow encoder)
DEFAULT_ROWS = 20
PRINTF_LINE = "%s\\n"  # printf's format: the text, then a newline

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
        f"'{shown(t)}'" + ("" if t in v.index else " (not in the vocabulary: mean of its character n-gram vectors)")
        for t in result.query_tokens[:20]
    ) + (f", … ({len(result.query_tokens):,} tokens)" if len(result.query_tokens) > 20 else "")
    return [
        f"1. tokens of the query {shown(clip(result.query))}: {toks}",
        f"2. phrase vector c(text) = mean over its tokens of (v_t/|v_t| - mu); mu = mean unit vector of the "
        f"{len(v):,} vocabulary words of model '{shown(v.name)}' (removes the direction every word shares)",
    ]


def _encoder_steps(result, index) -> list[str]:
    """Steps 1-2 for a sentence encoder: its tokens and the pooled embedding."""
    enc = index.encoder
    tokens = index.pieces(result.query)
    pieces = ", ".join(f"'{shown(t)}'" for t in tokens[:20]) + (f", … ({len(tokens):,} tokens)" if len(tokens) > 20 else "")
    return [
        f"1. tokens of the query {shown(clip(result.query))} by the encoder's tokenizer: {pieces}",
        f"2. sentence embedding c(text) = {' and '.join(POOLING[m] for m in index.pooling)}"
        f"{', concatenated' if len(index.pooling) > 1 else ''}, as sentence-transformers "
        f"(pooling: {'+'.join(index.pooling)}); encoder '{shown(enc.name)}' "
        f"({shown(enc.model_type)}, {enc.layers} layers, {enc.hidden_size} dims, {enc.backend} backend)",
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
        lines.append(f"5. the query is a key of the dictionary: like a dict, weight 1 on {shown(clip(result.query))}, 0 elsewhere "
                     "(--no-exact to use the softmax anyway)")
    else:
        kept = f"the {result.top_k} most similar keys (--top-k)" if result.top_k and result.top_k < result.n_keys else "all keys"
        lines.append(f"5. weight_i = exp(similarity_i / T) / sum_j exp(similarity_j / T), T = {T:g}, over {kept}")
        top = result.head(3)
        s_max = top[0].similarity
        lines.append(f"     the sum over the {len(result.keys):,} kept keys of exp((s - s_max)/T) is {_num(1.0 / top[0].weight)}; "
                     "weight = exp((s - s_max)/T) / that sum (subtracting s_max changes nothing but avoids overflow)")
        for e in top:
            lines.append(f"     {shown(_cut(e.key))}: similarity {e.similarity:.4f} = {1 - lam:g}*{e.cosine:.4f} + {lam:g}*{e.ngram:.4f};"
                         f" exp((s - s_max)/T) = {_num(math.exp((e.similarity - s_max) / T))}; weight {e.weight:.4f}")
    best = result.best
    lines.append(f"6. answer = value of the key with the largest weight: {shown(clip(best.key))} -> {shown(_value_text(best.value))}")
    if result.soft_value is not None:
        terms = " + ".join(f"{e.weight:.3f}*{_value_text(e.value, 40)}" for e in result.head(4))
        more = " + ..." if len(result.keys) > 4 else ""
        lines.append(f"7. soft value (the attention output) = sum_i weight_i * value_i = {shown(terms)}{more} = {result.soft_value:.6g}")
    else:
        lines.append("7. soft value: none (it is defined only when every value with a weight > 0 is a number)")
    return "\n".join(lines)


def lookup_renderables(result, index, *, rows: int = DEFAULT_ROWS, heading: bool = False,
                       width: Optional[int] = None) -> list:
    """The table (key, similarity, weight, bar, value) sorted by weight, then the answer, for
    ``width`` columns (None: a file, every optional column); with ``index`` the explanation first."""
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    parts: list = []
    if heading:
        parts.append(Rule(f"query: {shown(_cut(result.query, 60))}"))
    if index is not None:
        parts.append(Text.from_markup(explain_text(result, index)))
    shown_rows = result.head(None if rows == 0 else rows)
    table = Table(title=f"attention over {result.n_keys:,} keys for {shown(clip(result.query))}, T = {result.temperature:g}")
    values = [shown(_value_text(e.value)) for e in shown_rows]
    keys = [shown(_cut(e.key)) for e in shown_rows]
    # On a narrow terminal the optional columns go first (the explanation above has the cosine
    # and n-gram numbers too), so that keys and values fold instead of being cut off.
    parts_shown = index is not None and (width is None or width >= 70)
    n_cols = 5 + (2 if parts_shown else 0)
    fixed = (min(max(len(k) for k in keys), 24) + min(max(len(v) for v in values), 16)
             + 10 + 6 + (12 if parts_shown else 0) + 3 * n_cols + 1)
    bar_width = BAR_WIDTH if width is None else min(BAR_WIDTH, width - fixed)  # at most BAR_WIDTH; < 4: no bar
    table.add_column("key", overflow="fold")
    if parts_shown:
        table.add_column("cosine", justify="right")
        table.add_column("ngram", justify="right")
    table.add_column("similarity", justify="right")
    table.add_column("weight", justify="right")
    if bar_width >= 4:
        table.add_column("", min_width=bar_width, no_wrap=True, style="cyan")
    table.add_column("value", overflow="fold")
    for e, key, value in zip(shown_rows, keys, values):
        cells = [key]
        if parts_shown:
            cells += [f"{e.cosine:.3f}", f"{e.ngram:.3f}"]
        cells += [f"{e.similarity:.3f}", f"{e.weight:.3f}"]
        cells += [_bar(e.weight, bar_width)] if bar_width >= 4 else []
        table.add_row(*cells, value)
    hidden = len(result.keys) - len(shown_rows)
    if hidden:
        rest = float(result.weight[len(shown_rows):].sum())
        table.caption = f"... {hidden:,} more keys with total weight {rest:.3g} (--rows 0 shows all)"
    parts.append(Trimmed(table))  # the centred title without the spaces after it
    best = result.best
    how = "exact key" if result.exact else f"weight {best.weight:.3f}"
    parts.append(Text.from_markup(f"answer: [bold]{shown(_value_text(best.value))}[/]  (key {shown(clip(best.key))}, {how})"))
    if result.soft_value is not None:
        parts.append(Text.from_markup(f"soft value (sum of weight * value): [bold]{result.soft_value:.6g}[/]"))
    return parts


class LookupView(Result):
    """One ``attn lookup`` answer as a result. ``index``: the key index, for --explain's steps;
    the other arguments are the options it was looked up with (for the command line): ``dictionary``
    the object looked in when it came from no file (None: ``dict_path``, else the shipped car.json)."""

    def __init__(self, result, index=None, *, rows: int = DEFAULT_ROWS, heading: bool = False,
                 dictionary: Optional[dict[str, Any]] = None, dict_path: Optional[str] = None,
                 model: Optional[str] = None, encoder: Optional[str] = None, allow_missing_weights: bool = False,
                 ngram_weight: Optional[float] = None, exact: bool = True, compact: Optional[bool] = None) -> None:
        self.result, self.index = result, index
        self.rows, self.heading = rows, heading
        self.dictionary, self.dict_path = dictionary, dict_path
        self.model, self.encoder, self.allow_missing_weights = model, encoder, allow_missing_weights
        self.ngram_weight, self.exact = ngram_weight, exact
        self.compact = len(result.keys) > COMPACT_JSON_ABOVE if compact is None else compact
        self.title = f"attn lookup: {visible(result.query[:60])}"

    def renderables(self, width: Optional[int]) -> list:
        return lookup_renderables(self.result, self.index, rows=self.rows, heading=self.heading, width=width)

    def document(self) -> dict[str, Any]:
        return self.result.to_json()

    def write_json(self, write) -> None:
        """Indented, or one line (``compact``: JSON Lines with --queries, and a big result)."""
        write(json.dumps(self.document(), allow_nan=False, ensure_ascii=False, indent=None if self.compact else 2))
        write("\n")

    def command_line(self) -> str:
        r = self.result
        piped = self.dictionary is not None and self.dict_path in (None, "-")
        line = attn_command("lookup", [r.query], [
            ("--dict", "-" if piped else self.dict_path), ("--model", self.model), ("--encoder", self.encoder),
            ("--allow-missing-weights", self.allow_missing_weights),
            ("--temperature", r.temperature if r.temperature != DEFAULT_TEMPERATURE else None),
            ("--top-k", r.top_k), ("--ngram-weight", self.ngram_weight), ("--no-exact", not self.exact),
            ("--rows", self.rows if self.rows != DEFAULT_ROWS else None), ("--explain", self.index is not None),
        ])
        if piped:  # the dictionary came from no file (stdin, Python): it goes in on stdin
            text = json.dumps(self.dictionary, ensure_ascii=False, allow_nan=False)
            line = shlex.join(["printf", PRINTF_LINE, text]) + " | " + line
        return line
