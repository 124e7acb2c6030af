"""One compute for every view of a pretrained model's attention: :func:`compute` turns a
:class:`~attncli.pipeline.view_request.ViewRequest` into a :class:`~attncli.pipeline.view_result.ViewResult`.

    request -> check -> load (unless given) -> encode -> the sites the request reads
            -> one traced pass (attncli.pipeline.reads.Reads) -> the view (attncli.attention.checkpoint_views)

An encoder-decoder's stack (encoder, decoder, cross) is the request's ``stack``: its attention
comes from the same forward pass of transformers, and the same view is built over the stack's rows
and columns. Shapes: ``L`` layers, ``h`` heads, ``T`` query tokens, ``S`` key tokens.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from attncli.attention import long_view as lvm
from attncli.attention import checkpoint_views as pv
from attncli.attention import value_norms
from attncli.attention.flow import check_tokens
from attncli.attention.model_view import head_classes, layer_range
from attncli.attention.view_rows import start_end
from attncli.io.textio import texts_of
from attncli.attention.contribution_views import formula
from attncli.errors import BadInput
from attncli.hf.methods.contributions import check as check_contribution, rolled_out
from attncli.hf.loader import load  # torch only when the torch backend runs
from attncli.model.interface import has
from attncli.rules.option_conflicts import CONTRIBUTIONS
from attncli.pipeline.view_request import ViewRequest, check_seq2seq_options
from attncli.pipeline.view_result import ModelViewResult, PretrainedResult, ViewResult
from attncli.io.textio import visible
from attncli.pipeline.reads import Reads, view_sites
from attncli.views.page import check_size, extra_size

STACK_NOTES = {
    "encoder": "encoder self-attention: rows and columns are the source's tokens",
    "decoder": "decoder self-attention (causal): rows and columns are the decoder's input, the target's tokens "
               "shifted right behind the decoder start token",
    "cross": "cross-attention: rows are the decoder's input (the target's tokens shifted right), columns the "
             "source's tokens (the encoder's output)",
}


def load_for(request: ViewRequest):
    """The request's model (attncli.hf.load: NumPy or transformers, by ``backend``)."""
    return load(request.transformer, backend=request.backend, allow_missing_weights=request.allow_missing_weights,
                device=request.device, dtype=request.dtype, device_map=request.device_map,
                max_memory=request.max_memory)


def compute(request: ViewRequest, model: Any = None, *, on_layer=None) -> PretrainedResult:
    """The view ``request`` asks for, from one forward pass of ``model`` (None: loaded here);
    ``on_layer(l, L)`` is called as each layer of the pass is done, where the model's trace reports it."""
    request.check()
    if model is None:
        model = load_for(request)
    if has(model, "stacks") or request.target is not None or request.stack is not None:
        if request.rows is not None and start_end(request.rows) is None:  # --top-k, --pool: the table's rows
            raise BadInput(f"--rows {request.rows}: an encoder-decoder's view takes --rows START:END; the other "
                           "--rows forms are for one stack of tokens (BERT, GPT-2, Llama families)")
        return _stack_view(request, model)
    layer = pv.layer_shown(model, request.layer, request.head)
    if request.explain is not None and not has(model, "explain") and request.show != "norms":
        raise BadInput("--explain I J needs attn's NumPy forward pass (the queries and keys of a layer): "
                       "add --backend numpy (BERT and GPT-2 families)")
    enc = model.encode(request.text, pair=request.pair, truncate=request.truncate)
    spec = request.long
    positions = lvm.row_positions(request.rows, enc) if request.rows is not None else None  # (R,) input positions
    page = request.page and not spec  # a long view's --html is its drawing, as --svg
    # what the view reads of the pass, and so all the pass keeps (memory follows the view, not the model):
    # one layer, unless rollout / flow (every layer), the page, --explain, explore's cursor, norms, the model view;
    # of it --rows' query rows, and with --head (weights) that head
    one_layer = lvm.rows_only(rollout=request.rollout, flow=request.flow,
                              explain=request.explain is not None or request.cursor,
                              page=page, show=request.show) and not request.model_view
    rows_only = positions is not None and one_layer
    one_head = [request.head] if one_layer and request.head is not None and request.show == "weights" else None
    if page:
        check_size(model.layers, model.heads, len(enc.tokens), any(enc.special),
                   extra_size(model.heads, request.show, request.flow))
    if request.flow:
        check_tokens(len(enc.ids))  # before the forward pass
    cursor_qk = (request.cursor and has(model, "explain") and has(model, "qk")
                 and request.show in ("weights", "scores"))
    qk = not request.model_view and (cursor_qk or (request.explain is not None and request.show != "norms"))
    # a contribution method (one matrix per layer): layer L's, or layers 0..L's to roll out; the page every layer's
    contributed = request.show in CONTRIBUTIONS and not request.model_view
    layers_read = (range(model.layers) if page else range(layer + 1) if request.rollout else [layer]) if contributed else ()
    if contributed:
        check_contribution(model, request.show)  # the torch backend's refusal, before its pass
    # one traced pass: every layer's pattern, and what --explain, --show and the page read of it
    # (with --rows: the layer's pattern and scores, those rows only)
    sites = view_sites(model.layers, layer, qk=qk, scores=request.show == "scores",
                       values=request.show == "norms" and not request.model_view,
                       every_layer=page and request.show in ("scores", "norms"), only_layer=one_layer,
                       contributions=layers_read)
    reads = Reads(model, enc, sites, rows=positions if rows_only else None, heads=one_head, on_layer=on_layer)
    # (L, h, T, T); with one_layer (1, h, R, T): the layer's kept heads (h = 1 with one_head) and rows (R = T
    # without rows_only)
    attentions = reads.pattern(layer)[None] if one_layer else reads.attentions()
    head = 0 if one_head is not None and attentions.shape[1] == 1 else request.head  # its index in what was kept
    meta = pv.view_meta(model, enc, layer=layer, head=request.head, rollout=request.rollout, block=request.filter,
                        hide_special=request.hide_special, words=request.words, flow=request.flow)
    title = f"attn matrix: {enc.text[:60]}"
    if request.model_view:
        lo, hi = layer_range(request.layers, model.layers)
        return ModelViewResult(request, model, enc, layer, meta, attentions, title=title, reads=reads, lo=lo, hi=hi,
                               classes=head_classes(model, enc, attentions, request.hide_special))
    shown, at, combined, values, rollout = attentions, 0 if one_layer else layer, None, None, request.rollout
    if request.show == "scores":
        per_head = reads.scores(layer)  # (h, T, T), -inf where masked; with rows_only (h, R, T)
        shown, at = per_head[None], 0
        combined = None if rows_only else per_head.mean(axis=0)  # the layer's: the heads' mean
    elif request.show == "norms":
        values = reads.value_vectors(layer)  # (h, T, T), (h, T, d)
        shown, at, combined = value_norms.head_norms(*values)[None], 0, value_norms.summed_norms(*values)
    elif contributed:  # (T, T): the layer's matrix, or R = C_L ... C_0 with --rollout
        per_layer = reads.contributions(request.show, range(layer + 1) if request.rollout else [layer])  # (L', T, T)
        shown, at, rollout = (rolled_out(per_layer) if request.rollout else per_layer[-1])[None, None], 0, False
        meta["formula"] = formula(request.show, request.rollout)
    meta["show"] = request.show
    view = _select(replace(request, rollout=rollout), shown, at, enc, combined, query_rows=positions, head=head)
    long = lvm.apply_long_view(view, spec, enc, words=request.words)  # --top-k / --pool, None without
    if positions is not None:
        view.notes.append(lvm.rows_note(request.rows, positions, len(enc.ids), computed=rows_only))
    result = ViewResult(request, model, enc, layer, meta, attentions, title=title, view=view, reads=reads,
                        qk=reads.qk(layer) if qk and not rows_only else None, values=values, long=long,
                        rows_only=rows_only, one_layer=one_layer)
    return result.at_cell(request.explain) if request.explain is not None else result


def _select(request: ViewRequest, shown, at: int, enc, combined=None, keys: Optional[pv.KeySide] = None,
            query_rows=None, head: Optional[int] = -1):
    view = pv.select(shown, layer=at, head=request.head if head == -1 else head, rollout=request.rollout, hide_special=request.hide_special,
                     block=request.filter or "all", block_specials=request.filter_specials, words=request.words,
                     tokens=enc.tokens, segments=enc.segments, special=enc.special, word_ids=enc.word_ids,
                     word_texts=enc.words, combined=combined, flow=request.flow, keys=keys, query_rows=query_rows,
                     texts=texts_of(enc))
    if view.weights.size == 0:
        raise BadInput("the view is empty: no token is left after --hide-special or --filter")
    return view


def _stack_view(request: ViewRequest, model) -> PretrainedResult:
    """An encoder-decoder's view (or the refusal of --target / --stack for a model that is not one):
    the rows and columns of each stack, from attncli.hf.backends.seq2seq's one forward pass.

        stack     rows (queries)        columns (keys)        matrices
        encoder   source tokens (S)     source tokens (S)     (L_enc, h_enc, S, S)
        decoder   decoder tokens (T)    decoder tokens (T)    (L_dec, h_dec, T, T), causal
        cross     decoder tokens (T)    source tokens (S)     (L_dec, h_dec, T, S)
    """
    if not has(model, "stacks"):
        given = "--target" if request.target is not None else "--stack"
        raise BadInput(f"{given} reads an encoder-decoder (T5, BART); model '{visible(model.name)}' "
                       f"({visible(model.model_type)}) is not one: drop {given}")
    stack = request.stack or "encoder"
    check_seq2seq_options(request)  # again: the model, not the options, made this an encoder-decoder
    source = model.encode(request.text, pair=request.pair, truncate=request.truncate)
    target = model.encode_target(request.target, truncate=request.truncate) if request.target is not None else None
    shape = model.stack(stack)  # its layers, heads, and causal flag, for the views
    rows_enc = source if stack == "encoder" else target
    keys = pv.KeySide(source.tokens, source.segments, source.special, source.word_ids, source.words, texts_of(source)) \
        if stack == "cross" else None
    if request.page:
        key_count = len(source.tokens) if keys is not None else len(rows_enc.tokens)
        check_size(shape.layers, shape.heads, max(len(rows_enc.tokens), key_count),
                   any(rows_enc.special) or (keys is not None and any(source.special)))
    attentions = model.stack_attentions(source, target)[stack] if target is not None else model.attentions(source)
    layer = pv.layer_shown(shape, request.layer, request.head)
    meta = pv.view_meta(shape, rows_enc, layer=layer, head=request.head, rollout=request.rollout, block=request.filter,
                        hide_special=request.hide_special, words=request.words, flow=request.flow)
    meta.update(stack=stack, source_tokens=source.tokens, target_tokens=None if target is None else target.tokens,
                target=request.target, decoder_start_token=None if target is None else target.tokens[0])
    title = f"attn matrix ({stack}): {source.text[:50]}"
    common = dict(title=title, keys=keys, source=source)
    if request.model_view:
        lo, hi = layer_range(request.layers, shape.layers)
        return ModelViewResult(request, shape, rows_enc, layer, meta, attentions, lo=lo, hi=hi,
                               classes=head_classes(shape, rows_enc, attentions, request.hide_special), **common)
    view = _select(request, attentions, layer, rows_enc, keys=keys)
    view.notes.insert(0, STACK_NOTES[stack])
    return ViewResult(request, shape, rows_enc, layer, meta, attentions, view=view, **common)

