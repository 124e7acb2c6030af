"""``attn matrix --transformer`` and ``attn heads --transformer``: a pretrained model's attention.

Thin layer: the model runs in :mod:`attncli.transformer` (NumPy or transformers), the views are
computed in :mod:`attncli.attention.pretrained` and :mod:`attncli.attention.model_view` (pure
NumPy) and drawn by :mod:`attncli.cli.transformer_views` and :mod:`attncli.views.model_view`.
``attn matrix`` hands over here only when --transformer is given, so no other command imports
this module (and nothing here imports torch, transformers, tokenizers or safetensors at module
level either).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from attncli.cli.options import TRANSFORMER_ONLY  # one list, kept beside the options
from attncli.errors import BadInput

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
    device_map: Optional[str] = None  # --device-map / --max-memory: accelerate's split (attncli.transformer.placement)
    max_memory: Optional[str] = None


def check_combinations(o: MatrixOptions) -> None:
    """What can be checked before the model is loaded."""
    from attncli.attention.model_view import check_model_view_options
    from attncli.attention.pretrained import check_texts, check_view_options

    check_texts(o.text, o.pair)
    check_view_options(pair=o.pair, block=o.block, rollout=o.rollout, layer=o.layer, head=o.head)
    if o.block_specials != "none" and o.block in (None, "all"):
        raise BadInput("--filter-specials says where a --filter block puts the special tokens: add --filter a-a|a-b|b-a|b-b")
    if o.words and o.explain is not None:
        raise BadInput("--explain I J explains one token-level cell: drop --words (word rows mix several pieces)")
    if o.rollout and o.explain is not None:
        raise BadInput("--explain I J explains one head's cell, not the rollout: drop --rollout")
    if o.explain is not None and o.hide_special:
        raise BadInput("--explain I J takes input positions (special tokens included): drop --hide-special")
    check_model_view_options(model_view=o.model_view, layers=o.layers, layer=o.layer, head=o.head, explain=o.explain,
                             rollout=o.rollout, words=o.words, block=o.block)
    _check_show(o)
    _check_flow(o)
    if o.target is not None or o.stack is not None:
        from attncli.cli.seq2seq import check_seq2seq_options

        check_seq2seq_options(o)
    if o.backend not in ("auto", "numpy", "torch"):
        raise BadInput(f"--backend {o.backend!r}: expected auto, numpy or torch")


def _check_show(o: MatrixOptions) -> None:
    """--show scores / norms draw one layer's heads by token: the views that mix tokens, layers or
    renormalise rows are refused."""
    if o.show == "weights":
        return
    if o.show not in ("scores", "norms"):
        raise BadInput(f"--show {o.show} does not apply with --transformer: choose weights, scores or norms")
    from attncli.attention.value_norms import check_norms_options

    check_norms_options(rollout=o.rollout, words=o.words, hide_special=o.hide_special, model_view=o.model_view,
                        show=o.show)


def _check_flow(o: MatrixOptions) -> None:
    if o.flow:
        from attncli.attention.flow import check_flow_options

        check_flow_options(head=o.head, rollout=o.rollout, explain=o.explain, show=o.show, words=o.words,
                           hide_special=o.hide_special, model_view=o.model_view)


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

        return run_seq2seq_matrix(o, model, json_out=json_out, exports=exports, row_span=row_span, col_span=col_span)
    layer = pv.layer_shown(model, o.layer, o.head)
    if o.explain is not None and model.backend != "numpy" and o.show != "norms":
        raise BadInput("--explain I J needs attn's NumPy forward pass (the queries and keys of a layer): "
                       "add --backend numpy (BERT and GPT-2 families)")
    enc = model.encode(o.text, pair=o.pair, truncate=o.truncate)
    if exports.html is not None:
        from attncli.views.page import check_size, extra_size

        check_size(model.layers, model.heads, len(enc.tokens), any(enc.special), extra_size(model.heads, o.show, o.flow))
    if o.flow:
        from attncli.attention.flow import check_tokens

        check_tokens(len(enc.ids))  # before the forward pass
    from attncli.transformer.reads import Reads, view_sites

    # one traced pass: every layer's pattern, and what --explain, --show and --html read of it
    sites = view_sites(model.layers, layer, qk=o.explain is not None and o.show != "norms",
                       scores=o.show == "scores", values=o.show == "norms",
                       every_layer=exports.html is not None and o.show != "weights")
    reads = Reads(model, enc, sites)
    attentions = reads.attentions()  # (L, h, T, T)
    meta = pv.view_meta(model, enc, layer=layer, head=o.head, rollout=o.rollout, block=o.block,
                        hide_special=o.hide_special, words=o.words, flow=o.flow)
    from attncli.cli.transformer_views import render_view, view_renderables

    title = f"attn matrix: {enc.text[:60]}"
    if o.model_view:
        show_model_view(o, model, enc, attentions, meta, layer, title, exports, json_out=json_out)
        return
    shown, combined, explain_norm, at = attentions, None, None, layer
    if o.show != "weights":
        per_head, combined, explain_norm = layer_matrices(reads, enc, layer, o.show)
        shown, at, meta["show"] = per_head[None], 0, o.show  # (1, h, T, T): the one layer drawn
    view = pv.select(shown, layer=at, head=o.head, rollout=o.rollout, hide_special=o.hide_special,
                     block=o.block or "all", block_specials=o.block_specials, words=o.words, tokens=enc.tokens,
                     segments=enc.segments, special=enc.special, word_ids=enc.word_ids, word_texts=enc.words,
                     combined=combined, flow=o.flow)
    explanation = None
    if explain_norm is not None and o.explain is not None:
        explanation = explain_norm(*o.explain, o.head)
    elif o.explain is not None:
        q, k = reads.qk(layer)  # (h, T, d_head) each
        explanation = pv.explain_cell(q, k, model.scale(layer), bool(model.is_decoder), attentions[layer],
                                      enc.tokens, *o.explain, head=o.head)
    if json_out:
        doc = pv.document(view, meta, segments=enc.segments, special=enc.special, explanation=explanation)
        pv.write_document(doc, sys.stdout.write)
        sys.stdout.flush()
    else:
        render_view(out_console(), view, meta, enc, row_span, col_span, explanation)
    _export(lambda w: view_renderables(view, meta, enc, row_span, col_span, explanation, w), title, exports)
    _page(o, model, enc, attentions, meta, layer, None, exports.html, title, reads)


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
    if exports.svg is None and exports.png is None:
        return
    from attncli.views.export import export_files

    export_files(draw, title, svg=exports.svg, png=exports.png, width=exports.width)


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

    if backend not in ("auto", "numpy", "torch"):
        raise BadInput(f"--backend {backend!r}: expected auto, numpy or torch")
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
