"""Commands ``attn matrix``, ``attn variants``, ``attn demo`` and ``attn scale``: a thin layer.

The core is :mod:`attncli.attention.matrix` (pipeline), :mod:`attncli.attention.variants` (variants),
:mod:`attncli.attention.explain`, :mod:`attncli.views.render` (heatmaps), :mod:`attncli.attention.example` and :mod:`attncli.cli.panels`; the options it shares with
``attn explore`` are declared in :mod:`attncli.cli.options`. Nothing heavy
is imported at module level: the command bodies import what they use, and never torch, gensim or
nltk.
"""

from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Optional

import typer

from attncli.attention.example import demo_json, scale_experiment, worked_example
from attncli.attention.explain import explain as explain_cell
from attncli.attention.view_rows import span, start_end
from attncli.attention.masks import MaskSpec
from attncli.attention.matrix import MatrixRequest, compute
from attncli.attention.variants import DEFAULT_VARIANT, VARIANTS
from attncli.cli.common import app, emit_json, info, json_write, out_console
from attncli.cli.options import EXPORT_OPTIONS, PLACEMENT_OPTIONS, VIEW_OPTIONS, WORD_VECTOR_OPTIONS, JsonOpt, declared
from attncli.cli.options import TRANSFORMER_ONLY as _TRANSFORMER_ONLY
from attncli.cli.output import Exports, check_exports
from attncli.cli.output import show as show_result
from attncli.cli.panels import render_demo, render_scale
from attncli.errors import BadInput
from attncli.rules.option_conflicts import SWITCHES, validate
from attncli.io.textio import read_user_text
from attncli.views.matrix_result import MatrixView
from attncli.views.render import render_variants


def read_sentence(sentence: Optional[str], file: Optional[Path]) -> str:
    if sentence is not None and file is not None:
        raise BadInput("give the sentence either as an argument or with --file, not both")
    if file is None and sentence is None:
        raise BadInput('give a sentence, e.g. attn matrix "time flies like an arrow", or --file PATH, or - for stdin')
    if sentence is not None and sentence != "-":
        return sentence
    if file is None:
        file = Path("-")
    return read_user_text(file, "--file", hint="give a UTF-8 text file")


@app.command("matrix")
@declared("ctx", "sentence", "file", *WORD_VECTOR_OPTIONS, "explain", "rows", "cols", "model", *EXPORT_OPTIONS, "json_out",
          *VIEW_OPTIONS, *PLACEMENT_OPTIONS, "target", "stack", "top_k", "pool")
def matrix_cmd(
    ctx: typer.Context,
    sentence: Annotated[Optional[str], typer.Argument(help="The sentence (queries); - reads stdin.", show_default=False)] = None,
    *,
    file: Annotated[Optional[Path], typer.Option("--file", "-f", help="Read the sentence from a file (- = stdin).")] = None,
    explain: Annotated[Optional[tuple[int, int]], typer.Option(help="Explain cell (I, J), 0-based: query I, key J (--transformer: input positions, NumPy backend).",
                                                               metavar="I J", show_default=False)] = None,
    rows: Annotated[Optional[str], typer.Option(help="Rows to draw, START:END (0-based, END excluded); with --transformer "
                                                     "also A-B (both included), last:N or word:TEXT, and only those rows are "
                                                     "computed.", metavar="SPEC")] = None,
    cols: Annotated[Optional[str], typer.Option(help="Columns to draw, START:END.")] = None,
    **options: Any,
) -> None:
    """Attention matrix of a sentence as a heatmap: rows are queries, columns keys.

    The input of each token is its word vector plus a sinusoidal positional encoding scaled to
    the model's average word-vector length (--positions none: the word vectors alone).
    With --transformer: a pretrained model's own attention (--layer, --head 0-based; default the
    last layer, every head).
    """
    given = {name for name in ctx.params if _given(ctx, name)}
    json_out = options.pop("json_out")
    o = SimpleNamespace(**options)
    exports = Exports.of(options)
    if o.transformer is not None or given & set(_TRANSFORMER_ONLY):
        _transformer_matrix(given, sentence=sentence, file=file, explain=explain, rows=rows, cols=cols, exports=exports,
                            json_out=json_out, options=options)
        return
    validate({"show": o.show.value, "layer": o.layer, "head": o.head, "proj": o.proj}, "vectors")

    check_exports(exports, json_out)
    text = read_sentence(sentence, file)
    row_span, col_span = span(rows, "--rows"), span(cols, "--cols")
    projection_options = {name: value for name, value in (("layer", o.layer), ("head", o.head)) if value is not None}
    req = MatrixRequest(
        text=text, context=o.context, variant=o.variant,
        mask=MaskSpec(causal=o.causal, window=o.window, pad_to=o.pad_to), positions=o.positions.value,
        projection=o.proj, d_k=o.d_k, seed=o.seed, heads=o.heads, max_relative=o.max_relative, model=o.model,
        projection_options=projection_options,
    )
    res = compute(req)
    if o.proj == "trained" and not o.causal and o.context is None:
        info("hint: the learned heads were trained under a causal mask; add --causal to see them as they were trained")
    explanation = None
    if explain is not None:
        explanation = explain_cell(res, *explain)

    show_result(MatrixView(res, o.show.value, row_span, col_span, explanation, explain), json_out=json_out,
                exports=exports)


def _given(ctx, name: str) -> bool:
    """Whether option ``name`` was given on the command line (not just its default)."""
    source = ctx.get_parameter_source(name)  # an enum of click's (or of the click Typer vendors): compare by name
    return source is not None and getattr(source, "name", "") not in ("DEFAULT", "DEFAULT_MAP")


def _transformer_matrix(given: set[str], *, sentence, file, explain, rows, cols, exports, json_out,
                        options: dict[str, Any]) -> None:
    """attn matrix --transformer: checked here, computed and drawn by attncli.cli.transformer."""
    from attncli.cli.transformer import MatrixOptions, check_options, run_matrix  # the hf wing: --transformer only

    o = SimpleNamespace(**options)
    check_options(given, o.transformer)
    check_exports(exports, json_out)
    opts = MatrixOptions(transformer=o.transformer, text=read_sentence(sentence, file), pair=o.pair, layer=o.layer,
                         head=o.head, filter=o.filter.value if o.filter else None,
                         filter_specials=o.filter_specials.value if o.filter_specials else "none",
                         backend=o.backend.value if o.backend else "auto", explain=explain, layers=o.layers,
                         show=o.show.value, device=o.device, dtype=o.dtype, target=o.target,
                         stack=o.stack.value if o.stack else None, rows=rows, top_k=o.top_k, pool=o.pool,
                         device_map=o.device_map, max_memory=o.max_memory,
                         **{name: options[name] for name in SWITCHES})  # --words, --flow, ...: a field each
    run_matrix(opts, json_out=json_out, exports=exports, row_span=start_end(rows), col_span=span(cols, "--cols"))


@app.command("variants")
def variants_cmd(
    *,
    json_out: JsonOpt = False,
) -> None:
    """The attention variants of 'attn matrix --variant': formula and source."""
    rows = [
        {"name": v.name, "title": v.title, "formula": v.formula, "source": v.source, "default": v.name == DEFAULT_VARIANT,
         "doc": " ".join((v.fn.__doc__ or "").split())}
        for v in VARIANTS.values()
    ]
    if json_out:
        emit_json({"variants": rows})
        return

    render_variants(out_console(), rows)


@app.command("demo")
def demo_cmd(
    *,
    json_out: JsonOpt = False,
) -> None:
    """The seed's worked example of attention, step by step (four words, seed 42)."""
    ex = worked_example()
    if json_out:
        emit_json(demo_json(ex))
        return
    render_demo(out_console(), ex)


@app.command("scale")
def scale_cmd(
    *,
    factor: Annotated[float, typer.Option(help="The factor the scores are multiplied by in the middle panel.")] = 100.0,
    seed: Annotated[int, typer.Option(help="Seed of the random vectors of the d_k sweep.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Why scaled dot-product attention divides by sqrt(d_k): softmax saturation, side by side."""
    import math

    if not math.isfinite(factor) or factor <= 0 or factor > 1e6:
        raise BadInput(f"--factor must be a positive number up to 1e6 (got {factor})")
    if not 0 <= seed < 2**64:
        raise BadInput(f"--seed must be between 0 and 2**64 - 1 (got {seed})")
    doc = scale_experiment(factor, seed=seed)
    if json_out:
        emit_json(doc)
        return
    render_scale(out_console(), doc)
