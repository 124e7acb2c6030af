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
    "show": "the pretrained view shows weights (--explain I J shows the scores of one cell)",
}
# options that only --transformer gives a meaning to (attn matrix's parameter names)
TRANSFORMER_ONLY = ("pair", "pair_filter", "words", "hide_special", "rollout", "backend", "truncate", "model_view", "layers",
                    "device", "dtype")


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
    words: bool = False
    hide_special: bool = False
    rollout: bool = False
    backend: str = "auto"
    truncate: bool = False
    explain: Optional[tuple[int, int]] = None
    model_view: bool = False
    layers: Optional[str] = None
    device: Optional[str] = None  # --device / --dtype: the torch backend's (None: cpu, float32)
    dtype: Optional[str] = None


def check_combinations(o: MatrixOptions) -> None:
    """What can be checked before the model is loaded."""
    from attncli.attention.model_view import check_model_view_options
    from attncli.attention.pretrained import check_view_options

    check_view_options(pair=o.pair, block=o.block, rollout=o.rollout, layer=o.layer, head=o.head)
    if o.words and o.explain is not None:
        raise BadInput("--explain I J explains one token-level cell: drop --words (word rows mix several pieces)")
    if o.rollout and o.explain is not None:
        raise BadInput("--explain I J explains one head's cell, not the rollout: drop --rollout")
    if o.explain is not None and o.hide_special:
        raise BadInput("--explain I J takes input positions (special tokens included): drop --hide-special")
    check_model_view_options(model_view=o.model_view, layers=o.layers, layer=o.layer, head=o.head, explain=o.explain,
                             rollout=o.rollout, words=o.words, block=o.block)
    if o.backend not in ("auto", "numpy", "torch"):
        raise BadInput(f"--backend {o.backend!r}: expected auto, numpy or torch")


def load_model(name: str, backend: str, device: Optional[str] = None, dtype: Optional[str] = None):
    from attncli.transformer import load

    return load(name, backend=backend, device=device, dtype=dtype)


def run_matrix(o: MatrixOptions, *, json_out: bool, svg: Optional[Path], html: Optional[Path],
               row_span, col_span) -> None:
    from attncli.attention import pretrained as pv
    from attncli.cli.app import out_console

    check_combinations(o)
    model = load_model(o.transformer, o.backend, o.device, o.dtype)
    layer = pv.layer_shown(model, o.layer, o.head)
    if o.explain is not None and model.backend != "numpy":
        raise BadInput("--explain I J needs attn's NumPy forward pass (the queries and keys of a layer): "
                       "add --backend numpy (BERT and GPT-2 families)")
    enc = model.encode(o.text, pair=o.pair, truncate=o.truncate)
    attentions = model.attentions(enc)  # (L, h, T, T)
    meta = pv.view_meta(model, enc, layer=layer, head=o.head, rollout=o.rollout, block=o.block,
                        hide_special=o.hide_special, words=o.words)
    from attncli.cli.transformer_views import render_view

    console = None
    if svg or html:
        from attncli.cli.matrix import _recording_console

        console = _recording_console(to_stdout=not json_out)
    if o.model_view:
        from attncli.attention.model_view import head_classes, layer_range
        from attncli.views.model_view import render_model_view

        lo, hi = layer_range(o.layers, model.layers)
        classes = head_classes(model, enc, attentions, o.hide_special)  # once, for the JSON and the drawing
        if json_out:
            _write_model_view_json(model, enc, attentions, meta, lo, hi, classes)
        if not json_out or console is not None:
            render_model_view(console or out_console(), model, enc, attentions, lo, hi, hide_special=o.hide_special,
                              classes=classes)
        _save(console, svg, html, enc)
        return
    view = pv.select(attentions, layer=layer, head=o.head, rollout=o.rollout, hide_special=o.hide_special,
                     block=o.block or "all", words=o.words, tokens=enc.tokens, segments=enc.segments,
                     special=enc.special, word_ids=enc.word_ids, word_texts=enc.words)
    explanation = None
    if o.explain is not None:
        q, k = model.qk(enc, layer)  # (h, T, d_head) each
        explanation = pv.explain_cell(q, k, model.scale(layer), bool(model.is_decoder), attentions[layer],
                                      enc.tokens, *o.explain, head=o.head)
    if json_out:
        doc = pv.document(view, meta, segments=enc.segments, special=enc.special, explanation=explanation)
        pv.write_document(doc, sys.stdout.write)
        sys.stdout.flush()
        if console is None:
            return
    render_view(console or out_console(), view, meta, enc, row_span, col_span, explanation)
    _save(console, svg, html, enc)


def _save(console, svg, html, enc) -> None:
    if console is None:
        return
    from attncli.cli.matrix import _save_exports

    _save_exports(console, svg, html, title=f"attn matrix: {enc.text[:60]}")


def _write_model_view_json(model, enc, attentions, meta, lo, hi, classes) -> None:
    """The model view as JSON (attncli.attention.model_view.model_view_document)."""
    from attncli.attention.model_view import model_view_document
    from attncli.attention.pretrained import write_document

    write_document(model_view_document(model, enc, attentions, meta, lo, hi, classes), sys.stdout.write)
    sys.stdout.flush()


# --- attn heads --transformer -------------------------------------------------------------------

DEFAULT_SENTENCES = 200


def run_heads(transformer: str, *, file: Optional[Path], sentences: Optional[int], window: int,
              exclude_first: bool, backend: str) -> dict[str, Any]:
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
    model = load_model(transformer, backend)
    if texts is None:
        texts = brown_texts(sentences or DEFAULT_SENTENCES)
    if sentences is not None:
        texts = texts[:sentences]
    if not texts:
        raise BadInput("no sentence to score the heads on (--file is empty)")
    from attncli.cli.app import info

    info(f"scoring the {model.layers * model.heads} heads of {model.name} on {len(texts)} sentences ({model.backend} backend)")
    return score_transformer_heads(model, texts, window=window, exclude_first=exclude_first)
