"""``attn matrix --transformer`` on an encoder-decoder (T5, BART): ``--stack encoder|decoder|cross``
with the decoder's text in ``--target`` (bertviz's encoder / decoder / cross views).

The model runs in :mod:`attncli.transformer.seq2seq`; the view is the one every model gets
(:func:`attncli.attention.pretrained.select`, the heatmaps, the JSON, the exports), fed the stack's
attention and, for its rows and columns, the source's or the decoder's tokens:

    stack     rows (queries)        columns (keys)        matrices
    encoder   source tokens (S)     source tokens (S)     (L_enc, h_enc, S, S)
    decoder   decoder tokens (T)    decoder tokens (T)    (L_dec, h_dec, T, T), causal
    cross     decoder tokens (T)    source tokens (S)     (L_dec, h_dec, T, S)
"""

from __future__ import annotations

import sys

from attncli.errors import BadInput
from attncli.option_conflicts import NOT_ACROSS, STACKS, validate  # noqa: F401 (the table)


def check_seq2seq_options(o) -> None:
    """What can be refused before the model loads, when --target or --stack is given, or the model
    turns out to be an encoder-decoder: the encoder-decoder rows of attncli.option_conflicts."""
    validate(vars(o), "seq2seq")


def run_seq2seq_matrix(o, model, *, json_out: bool, exports, row_span, col_span) -> None:
    """``attn matrix --transformer`` for an encoder-decoder (or the refusal of --target / --stack
    for a model that is not one)."""
    from attncli.attention import pretrained as pv
    from attncli.cli.app import out_console
    from attncli.cli.transformer import _export, _page, show_model_view
    from attncli.textio import visible

    if not getattr(model, "encoder_decoder", False):
        given = "--target" if o.target is not None else "--stack"
        raise BadInput(f"{given} reads an encoder-decoder (T5, BART); model '{visible(model.name)}' "
                       f"({visible(model.model_type)}) is not one: drop {given}")
    stack = o.stack or "encoder"
    check_seq2seq_options(o)  # again: the model, not the options, made this an encoder-decoder
    if stack == "cross" and exports.html is not None:
        raise BadInput("--html is the interactive page of square self-attention: save the cross stack with --svg or --png")
    source = model.encode(o.text, pair=o.pair, truncate=o.truncate)
    target = model.encode_target(o.target, truncate=o.truncate) if o.target is not None else None
    attentions = model.stack_attentions(source, target)[stack] if target is not None else model.attentions(source)
    shape = model.stack(stack)  # its layers, heads, and causal flag, for the views
    layer = pv.layer_shown(shape, o.layer, o.head)
    rows_enc = source if stack == "encoder" else target
    keys = None
    if stack == "cross":
        keys = pv.KeySide(source.tokens, source.segments, source.special, source.word_ids, source.words)
    meta = pv.view_meta(shape, rows_enc, layer=layer, head=o.head, rollout=o.rollout, block=o.block,
                        hide_special=o.hide_special, words=o.words, flow=o.flow)
    meta.update(stack=stack, source_tokens=source.tokens, target_tokens=None if target is None else target.tokens,
                target=o.target, decoder_start_token=None if target is None else target.tokens[0])
    title = f"attn matrix ({stack}): {source.text[:50]}"
    if o.model_view:
        show_model_view(o, shape, rows_enc, attentions, meta, layer, title, exports, json_out=json_out)
        return
    view = pv.select(attentions, layer=layer, head=o.head, rollout=o.rollout, hide_special=o.hide_special,
                     block=o.block or "all", block_specials=o.block_specials, words=o.words, tokens=rows_enc.tokens,
                     segments=rows_enc.segments, special=rows_enc.special, word_ids=rows_enc.word_ids,
                     word_texts=rows_enc.words, flow=o.flow, keys=keys)
    view.notes.insert(0, STACK_NOTES[stack])
    if json_out:
        doc = pv.document(view, meta, segments=rows_enc.segments, special=rows_enc.special, keys=keys)
        pv.write_document(doc, sys.stdout.write)
        sys.stdout.flush()
    else:
        from attncli.cli.transformer_views import render_view

        render_view(out_console(), view, meta, rows_enc, row_span, col_span)
    from attncli.cli.transformer_views import view_renderables

    _export(lambda w: view_renderables(view, meta, rows_enc, row_span, col_span, None, w), title, exports)
    if stack != "cross":
        _page(o, shape, rows_enc, attentions, meta, layer, None, exports.html, title)


STACK_NOTES = {
    "encoder": "encoder self-attention: rows and columns are the source's tokens",
    "decoder": "decoder self-attention (causal): rows and columns are the decoder's input, the target's tokens "
               "shifted right behind the decoder start token",
    "cross": "cross-attention: rows are the decoder's input (the target's tokens shifted right), columns the "
             "source's tokens (the encoder's output)",
}
