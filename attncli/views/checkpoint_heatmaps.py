"""The heatmaps of a pretrained model's attention view (``attn matrix --transformer``): one per
head and the mean, or one head, or the rollout; by token or by word, with the rows of a sentence
pair marked A / B. Drawn by ``attncli.pipeline.view_result.ViewResult`` for every surface."""

from __future__ import annotations

from typing import Any, Optional

from attncli.views.render import Heatmap
from attncli.errors import BadInput
from attncli.io.textio import token_label


def _mark(seg: Optional[str], pair: bool) -> str:
    return f"{seg.upper()} " if pair and seg else ""


def view_title(meta: dict[str, Any], what: str) -> str:
    if meta.get("flow"):
        which = f"attention flow through layers 0-{meta['layer']}"
    elif meta["rollout"]:
        which = f"rollout through layers 0-{meta['layer']}"
    elif meta["head"] is not None:
        which = f"layer {meta['layer']} head {meta['head']}"
    else:
        which = f"layer {meta['layer']}"
    stack = f"{meta['stack']} " if meta.get("stack") else ""  # an encoder-decoder's stack
    return f"{meta['model']} · {stack}{which} · {what}"


def pair_note(enc) -> Optional[str]:
    if enc.pair is None:
        return None
    spans = []
    for s in ("a", "b"):
        pos = [t for t, seg in enumerate(enc.segments) if seg == s]
        if pos:
            spans.append(f"{s.upper()} = tokens {pos[0]}-{pos[-1]}")
    return "sentence pair: " + ", ".join(spans) + " (rows are marked A / B)"


def _finite(m):
    """(values, masked): --show scores' -inf (a causal model's future keys) drawn as masked cells."""
    import numpy as np

    masked = ~np.isfinite(m)
    return np.where(masked, 0.0, m), (masked if masked.any() else None)


def pretrained_heatmaps(view, meta: dict[str, Any], enc, row_span=None, col_span=None, *, cursor=None,
                        cell_meta: bool = False) -> list[Heatmap]:
    """The heatmaps of ``view`` (attncli.attention.checkpoint_views.PretrainedView); ``cursor`` (row,
    column) is marked, as in ``attn explore``."""
    pair = enc.pair is not None
    if view.words is not None:
        w = view.words
        seg_of = [enc.segments[g[0]] for g in w.groups]
        row_labels = [f"{n} {_mark(s, pair)}{t}" for n, t, s in zip(w.rows, w.tokens, seg_of)]  # n: the word's index
        col_labels, mats, heads = w.key_tokens, w.weights, w.head_weights
        what = "words" if meta.get("show", "weights") == "weights" else f"{meta['show']} by word"
    else:
        texts, key_texts = view.texts or view.tokens, view.key_texts or view.key_tokens
        row_labels = [f"{int(t)} {_mark(enc.segments[t], pair)}{token_label(text)}" for t, text in zip(view.rows, texts)]
        col_labels, mats, heads = [token_label(text) for text in key_texts], view.weights, view.head_weights
        what = "max-flow" if meta.get("flow") else meta.get("show", "weights")
    R, C = mats.shape
    if R == 0 or C == 0:
        raise BadInput("the view is empty: no token is left after --hide-special / --filter")
    for span, n, option, kind in ((row_span, R, "--rows", "rows"), (col_span, C, "--cols", "columns")):
        if span is not None and span[0] >= n:
            raise BadInput(f"{option} starts at {span[0]}, but the view has {n} {kind} (0..{n - 1})")
    notes = list(view.notes)
    if view.words is not None:
        notes.append("word pieces merged: a word's row is the mean of its pieces' rows, its column the sum of their columns")
    notes.append(f"rows: queries, columns: keys · backend: {meta['backend']}")
    if meta.get("flow"):
        notes.append("flow: the max-flow from input token j (column) to position i (row) through the layers' "
                     "(head mean + I)/2 graph (Abnar & Zuidema 2020); each <= 1, a row need not sum to 1")
    if meta.get("show") == "norms":
        notes.append("norms: ||alpha f(x_j)||, f(x) = (x W_V + b_V) W_O (Kobayashi et al. 2020); the layer's: "
                     "||sum over heads||, not their mean")
    elif meta.get("formula"):  # a contribution method (attncli.hf.methods.contributions): one matrix per layer
        notes.append(f"{meta['show']}: {meta['formula']}")
    elif meta.get("show") == "scores":
        notes.append("scores: q.k x scale before the softmax; the layer's: the heads' mean")
    if (note := pair_note(enc)) is not None:
        notes.append(note)
    if meta["truncated"]:
        notes.append("the input was cut to the model's limit (--truncate)")
    maps = []
    if heads is not None:
        for h, m in enumerate(heads):
            values, masked = _finite(m)
            maps.append(Heatmap(values, row_labels, col_labels, view_title({**meta, "head": h}, what), masked=masked,
                                rows=row_span, cols=col_span, cursor=cursor, cell_meta=cell_meta))
        what = f"{what}, mean of {len(heads)} heads"
    values, masked = _finite(mats)
    maps.append(Heatmap(values, row_labels, col_labels, view_title(meta, what), masked=masked, rows=row_span, cols=col_span,
                        notes=tuple(notes), cursor=cursor, cell_meta=cell_meta))
    return maps
