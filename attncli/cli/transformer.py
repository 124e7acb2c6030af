"""``attn matrix --transformer`` and ``attn heads --transformer``: a pretrained model's attention.

Thin layer: the model runs in :mod:`attncli.transformer` (NumPy or transformers), the views are
computed in :mod:`attncli.attention.pretrained` and :mod:`attncli.attention.model_view` (pure
NumPy) and drawn by :mod:`attncli.cli.transformer_views` and :mod:`attncli.views.model_view`.
``attn matrix`` hands over here only when --transformer is given, so no other command imports
this module (and nothing here imports torch, transformers, tokenizers or safetensors at module
level either).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from attncli.errors import BadInput
from attncli.option_conflicts import NOT_FOR_TRANSFORMERS, TRANSFORMER_ONLY, validate  # noqa: F401 (the table)


def check_options(given: set[str], transformer: Optional[str]) -> None:
    """BadInput (exit 2) for an option that does not apply: a word-vector option with
    --transformer, or a --transformer option without it (attncli.option_conflicts)."""
    validate({}, "transformer" if transformer is not None else "vectors", given=given)


@dataclass
class MatrixOptions:
    transformer: str
    text: str
    pair: Optional[str] = None
    layer: Optional[int] = None
    head: Optional[int] = None
    block: Optional[str] = None
    block_specials: str = "none"
    words: bool = False
    hide_special: bool = False
    rollout: bool = False
    backend: str = "auto"
    truncate: bool = False
    explain: Optional[tuple[int, int]] = None
    model_view: bool = False
    layers: Optional[str] = None
    allow_missing_weights: bool = False
    show: str = "weights"  # weights, scores (before the softmax) or norms (||alpha f(x)||)
    flow: bool = False  # attention flow (max-flow through the layers) instead of one layer
    device: Optional[str] = None  # --device / --dtype: the torch backend's (None: cpu, float32)
    dtype: Optional[str] = None
    target: Optional[str] = None  # an encoder-decoder's decoder text (attncli.cli.seq2seq)
    stack: Optional[str] = None  # encoder, decoder or cross (None: encoder)
    rows: Optional[str] = None  # --rows SPEC, --top-k K, --pool SPAN: attncli.attention.long_view
    top_k: Optional[int] = None
    pool: Optional[str] = None
    device_map: Optional[str] = None  # --device-map / --max-memory: accelerate's split (attncli.transformer.placement)
    max_memory: Optional[str] = None

    @property
    def long(self):
        from attncli.attention.long_view import LongSpec

        return LongSpec(rows=self.rows, top_k=self.top_k, pool=self.pool)


def check_combinations(o: MatrixOptions) -> None:
    """What can be checked before the model is loaded: the texts, then the table of
    attncli.option_conflicts (with --target or --stack, the encoder-decoder's rows too)."""
    from attncli.attention.pretrained import check_texts

    check_texts(o.text, o.pair)
    seq2seq = o.target is not None or o.stack is not None
    validate(vars(o), *(("transformer", "seq2seq") if seq2seq else ("transformer",)))
    from attncli.attention.long_view import check_view

    check_view(o.long, model_view=o.model_view, show=o.show, flow=o.flow, words=o.words)


def layer_matrices(reads, enc, layer: int, show: str):
    """(h, T, T) per head and (T, T) for the whole layer of ``show``: scores (the whole layer: the
    heads' mean), or norms ||A f(x)|| (the whole layer: the norm of the heads' vectors added),
    with the explain function of the norms (None for scores)."""
    from attncli.attention import value_norms

    if show == "scores":
        per_head = reads.scores(layer)  # (h, T, T), -inf where masked
        return per_head, per_head.mean(axis=0), None
    weights, fx = reads.value_vectors(layer)  # (h, T, T), (h, T, d)
    explain = lambda i, j, head: value_norms.explain_norm(weights, fx, enc.tokens, i, j, head)  # noqa: E731
    return value_norms.head_norms(weights, fx), value_norms.summed_norms(weights, fx), explain


def load_model(name: str, backend: str, allow_missing_weights: bool = False, *, json_out: bool = False,
               device: Optional[str] = None, dtype: Optional[str] = None, **placement: Optional[str]):
    """The model, with a line on stderr while it loads (a second or more; --backend torch imports
    torch and transformers first)."""
    from attncli.cli.progress import Stage
    from attncli.transformer import load

    what = "" if backend == "auto" else f", --backend {backend}"
    with Stage(f"loading {name}{what}", json_out=json_out):
        return load(name, backend=backend, allow_missing_weights=allow_missing_weights, device=device, dtype=dtype,
                    **placement)  # device_map, max_memory

def run_matrix(o: MatrixOptions, *, json_out: bool, exports, row_span, col_span) -> None:
    """Compute and print the view (or its --json); write the exports (attncli.cli.matrix.Exports)."""
    from attncli.attention import pretrained as pv
    from attncli.cli.app import out_console

    check_combinations(o)
    model = load_model(o.transformer, o.backend, o.allow_missing_weights, json_out=json_out, device=o.device, dtype=o.dtype,
                       device_map=o.device_map, max_memory=o.max_memory)
    if getattr(model, "encoder_decoder", False) or o.target is not None or o.stack is not None:
        from attncli.cli.seq2seq import run_seq2seq_matrix

        if o.top_k is not None or o.pool is not None or (o.rows is not None and row_span is None):
            raise BadInput("an encoder-decoder's view takes --rows START:END; --top-k, --pool and the other --rows "
                           "forms are for one stack of tokens (BERT, GPT-2, Llama families)")
        return run_seq2seq_matrix(o, model, json_out=json_out, exports=exports, row_span=row_span, col_span=col_span)
    layer = pv.layer_shown(model, o.layer, o.head)
    if o.explain is not None and model.backend != "numpy" and o.show != "norms":
        raise BadInput("--explain I J needs attn's NumPy forward pass (the queries and keys of a layer): "
                       "add --backend numpy (BERT and GPT-2 families)")
    enc = model.encode(o.text, pair=o.pair, truncate=o.truncate)
    from attncli.attention import long_view as lvm

    spec = o.long
    positions = lvm.row_positions(o.rows, enc) if o.rows is not None else None  # (R,) input positions
    page = exports.html is not None and not spec  # a long view's --html is its drawing, as --svg
    rows_only = positions is not None and lvm.rows_only(rollout=o.rollout, flow=o.flow, explain=o.explain is not None,
                                                        page=page, show=o.show)
    if page:
        from attncli.views.page import check_size, extra_size

        check_size(model.layers, model.heads, len(enc.tokens), any(enc.special), extra_size(model.heads, o.show, o.flow))
    if o.flow:
        from attncli.attention.flow import check_tokens

        check_tokens(len(enc.ids))  # before the forward pass
    from attncli.transformer.reads import Reads, view_sites

    # one traced pass: every layer's pattern, and what --explain, --show and --html read of it
    # (with --rows: the layer's pattern and scores, those rows only)
    sites = view_sites(model.layers, layer, qk=o.explain is not None and o.show != "norms",
                       scores=o.show == "scores", values=o.show == "norms",
                       every_layer=page and o.show != "weights", only_layer=rows_only)
    with layer_progress(model, len(enc.ids), json_out) as on_layer:
        reads = Reads(model, enc, sites, rows=positions if rows_only else None, on_layer=on_layer)
    # (L, h, T, T); with rows_only (1, h, R, T): the layer's kept rows
    attentions = reads.pattern(layer)[None] if rows_only else reads.attentions()
    meta = pv.view_meta(model, enc, layer=layer, head=o.head, rollout=o.rollout, block=o.block,
                        hide_special=o.hide_special, words=o.words, flow=o.flow)
    from attncli.cli.transformer_views import render_view, view_renderables

    title = f"attn matrix: {enc.text[:60]}"
    if o.model_view:
        show_model_view(o, model, enc, attentions, meta, layer, title, exports, json_out=json_out)
        return
    shown, combined, explain_norm, at = attentions, None, None, 0 if rows_only else layer
    if o.show != "weights":
        per_head, combined, explain_norm = layer_matrices(reads, enc, layer, o.show)
        shown, at, meta["show"] = per_head[None], 0, o.show  # (1, h, T, T): the one layer drawn
        combined = None if rows_only else combined  # scores' (R, T) mean: the heads' mean select takes itself
    view = pv.select(shown, layer=at, head=o.head, rollout=o.rollout, hide_special=o.hide_special,
                     block=o.block or "all", block_specials=o.block_specials, words=o.words, tokens=enc.tokens,
                     segments=enc.segments, special=enc.special, word_ids=enc.word_ids, word_texts=enc.words,
                     combined=combined, flow=o.flow, query_rows=positions)
    lv = lvm.apply_long_view(view, spec, enc, words=o.words)  # --top-k / --pool, None without
    if positions is not None:
        view.notes.append(lvm.rows_note(o.rows, positions, len(enc.ids), computed=rows_only))
    explanation = None
    if explain_norm is not None and o.explain is not None:
        explanation = explain_norm(*o.explain, o.head)
    elif o.explain is not None:
        q, k = reads.qk(layer)  # (h, T, d_head) each
        explanation = pv.explain_cell(q, k, model.scale(layer), bool(model.is_decoder), attentions[layer],
                                      enc.tokens, *o.explain, head=o.head)
    if json_out:
        doc = pv.document(view, meta, segments=enc.segments, special=enc.special, explanation=explanation)
        if spec:
            lvm.long_document(doc, lv, view, enc, spec, words=o.words)
        pv.write_document(doc, sys.stdout.write)
        sys.stdout.flush()
    else:
        render_view(out_console(), view, meta, enc, None, col_span, explanation, long=(lv, spec, o.words))
    draw = lambda w: view_renderables(view, meta, enc, None, col_span, explanation, w, long=(lv, spec, o.words))  # noqa: E731
    _export(draw, title, exports if page else _Drawn(exports))
    if page:
        _page(o, model, enc, attentions, meta, layer, None, exports.html, title, reads)


class _Drawn:
    """The exports of a long view: --html is its drawing too (the interactive page shows whole matrices)."""

    def __init__(self, exports) -> None:
        self.svg, self.png, self.html, self.width = exports.svg, exports.png, exports.html, exports.width


@contextlib.contextmanager
def layer_progress(model, tokens: int, json_out: bool):
    """A bar on stderr advancing as each layer of the pass is done (attncli.cli.progress.Bar) where
    the model's trace reports its layers (``on_layer``), else a line saying what runs; gives the
    ``on_layer(l, L)`` callback (None without a bar)."""
    from attncli.cli.progress import Bar, Stage
    from attncli.transformer.reads import takes_on_layer

    what = f"running {model.name} over {tokens} tokens"
    if getattr(model, "traced", False) and takes_on_layer(model):
        with Bar(what, "layers", model.layers, json_out=json_out) as bar:
            yield lambda l, L: bar.advance()
    else:
        with Stage(what, json_out=json_out):
            yield None


def show_model_view(o: MatrixOptions, model, enc, attentions, meta, layer: int, title: str, exports, *,
                    json_out: bool) -> None:
    """--model-view: every head of the chosen layers as thumbnails (JSON, terminal, exports, page);
    ``model`` is anything with .layers / .heads (a model, or one stack of an encoder-decoder)."""
    from attncli.attention.model_view import head_classes, layer_range
    from attncli.cli.app import out_console
    from attncli.views.model_view import model_view_renderables, render_model_view

    lo, hi = layer_range(o.layers, model.layers)
    classes = head_classes(model, enc, attentions, o.hide_special)  # once, for the JSON and the drawing
    if json_out:
        _write_model_view_json(model, enc, attentions, meta, lo, hi, classes)
    else:
        render_model_view(out_console(), model, enc, attentions, lo, hi, hide_special=o.hide_special, classes=classes)
    _export(lambda w: model_view_renderables(model, enc, attentions, lo, hi, w, hide_special=o.hide_special,
                                             classes=classes), title, exports)
    _page(o, model, enc, attentions, meta, layer, classes, exports.html, title)


def _export(draw, title: str, exports) -> None:
    """The drawn exports (SVG, PNG); --html is the interactive page (:func:`_page`)."""
    html = exports.html if isinstance(exports, _Drawn) else None
    if exports.svg is None and exports.png is None and html is None:
        return
    from attncli.views.export import export_files

    export_files(draw, title, svg=exports.svg, png=exports.png, html=html, width=exports.width)


def _page(o: MatrixOptions, model, enc, attentions, meta, layer: int, classes, html: Optional[Path], title: str,
          reads=None) -> None:
    """--html: the interactive page (attncli.views.page), opened on the view the options ask for."""
    if html is None:
        return
    from attncli.attention.model_view import head_classes
    from attncli.export_target import write_export
    from attncli.views.page import interactive_page, page_data

    if classes is None:
        classes = head_classes(model, enc, attentions, o.hide_special)
    data = page_data(model, enc, attentions, {**meta, "show": "weights", "flow": False}, classes, layer=layer,
                     head=o.head, words=o.words, hide_special=o.hide_special, rollout=o.rollout, block=o.block,
                     model_view=o.model_view, show=o.show, flow=o.flow, reads=reads)
    write_export(html, interactive_page(data, title), "--html")


def _write_model_view_json(model, enc, attentions, meta, lo, hi, classes) -> None:
    """The model view as JSON (attncli.attention.model_view.model_view_document)."""
    from attncli.attention.model_view import model_view_document
    from attncli.attention.pretrained import write_document

    write_document(model_view_document(model, enc, attentions, meta, lo, hi, classes), sys.stdout.write)
    sys.stdout.flush()


# --- attn heads --transformer -------------------------------------------------------------------

DEFAULT_SENTENCES = 200


def run_heads(transformer: str, *, file: Optional[Path], sentences: Optional[int], window: int,
              exclude_first: bool, backend: str, json_out: bool = False, allow_missing_weights: bool = False) -> dict[str, Any]:
    """The report of ``attn heads --transformer``: on --file's lines, else on Brown's held-out
    sentences (the documents ``attn train-attention`` holds out by default, punctuation kept)."""
    from attncli.cli.transformer_heads import score_transformer_heads
    from attncli.lm.data import brown_texts

    validate({"backend": backend}, "transformer")
    if file is not None:
        from attncli.textio import read_user_text

        texts = [line.strip() for line in read_user_text(file, "--file", hint="one sentence per line").splitlines()]
        texts = [t for t in texts if t]
    else:
        texts = None
    model = load_model(transformer, backend, allow_missing_weights, json_out=json_out)
    if texts is None:
        from attncli.cli.progress import Stage

        with Stage("reading the held-out Brown sentences", json_out=json_out):
            texts = brown_texts(sentences or DEFAULT_SENTENCES)
    if sentences is not None:
        texts = texts[:sentences]
    if not texts:
        raise BadInput("no sentence to score the heads on (--file is empty)")
    from attncli.cli.progress import Bar

    with Bar(f"scoring the {model.layers * model.heads} heads of {model.name} on {len(texts)} sentences "
             f"({model.backend} backend)", "sentences", len(texts), json_out=json_out) as bar:
        report = score_transformer_heads(model, texts, window=window, exclude_first=exclude_first, on_text=bar.advance)
    if getattr(model, "encoder_decoder", False):  # T5, BART: the encoder's self-attention (transformer.seq2seq)
        from attncli.cli.app import info

        info("an encoder-decoder: these are the encoder stack's heads (its self-attention over each sentence)")
        report["stack"] = "encoder"
    return report
