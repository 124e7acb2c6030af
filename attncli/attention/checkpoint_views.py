"""What ``attn matrix --transformer`` shows: one head, a layer's heads or the rollout, with special
tokens hidden, one block of a sentence pair, and word pieces merged into words; and its JSON.

Pure NumPy over plain arrays and lists (the tokens and their segments, special flags and word ids
come from ``attncli.hf``'s ``Encoding``; this wing never imports it). Shapes: ``L``
layers, ``h`` heads, ``T`` input tokens, ``R`` rows shown, ``C`` columns shown, ``W`` words.

Order of the steps (each optional): pick the matrices (layer ``layer``: its ``h`` heads, their
mean, or head ``head``; or the rollout through layers 0..layer) -> hide special tokens (rows and
columns dropped, rows renormalised over the kept keys) -> one block of a pair (rows of one
sentence, columns of one sentence, weights as they are) -> merge word pieces into words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from attncli.attention.rollout import rollout as rollout_fn
from attncli.attention.words import hide_special as hide_fn
from attncli.attention.words import merge_words, pair_block, word_groups, word_label
from attncli.errors import BadInput
from attncli.rules.option_conflicts import validate
from attncli.attention.flow import attention_flow
from attncli.attention.document import Rows, encode_json, write_value
from attncli.attention.explain import softmax_steps, explain_step



@dataclass
class WordView:
    tokens: list[str]
    key_tokens: list[str]
    weights: np.ndarray  # (W_q, W_k)
    head_weights: Optional[np.ndarray]  # (h, W_q, W_k) or None
    groups: list[list[int]]  # input token positions of each row word
    key_groups: list[list[int]]
    rows: list[int] = field(default_factory=list)  # (W_q,) each row word's index among the input's words
    cols: list[int] = field(default_factory=list)  # (W_k,) as rows, for the columns


@dataclass
class PretrainedView:
    rows: np.ndarray  # (R,) input positions of the rows shown
    cols: np.ndarray  # (C,)
    tokens: list[str]  # (R,) the tokenizer's pieces ("ĠJohn")
    key_tokens: list[str]  # (C,)
    weights: np.ndarray  # (R, C): the head, or the mean of the layer's heads, or the rollout
    head_weights: Optional[np.ndarray]  # (h, R, C), None for one head or the rollout
    words: Optional[WordView] = None
    special_share: Optional[np.ndarray] = None  # (R,) with hide_special: the attention that went to special keys
    notes: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # (R,) each token's text (" John"), what views draw
    key_texts: list[str] = field(default_factory=list)  # (C,)


def select(attentions: np.ndarray, *, layer: int, head: Optional[int] = None, rollout: bool = False,
           hide_special: bool = False, block: str = "all", block_specials: str = "none", words: bool = False,
           tokens: Sequence[str],
           segments: Sequence[Optional[str]], special: Sequence[bool], word_ids: Sequence[Optional[int]],
           word_texts: Sequence[str], combined: Optional[np.ndarray] = None, flow: bool = False,
           keys: Optional["KeySide"] = None, query_rows: Optional[Sequence[int]] = None,
           texts: Optional[Sequence[str]] = None) -> PretrainedView:
    """The view of ``attentions`` (L, h, T, T) described in the module docstring. ``combined``
    (T, T), if given, is the layer's matrix drawn instead of the heads' mean (e.g. the norm of the
    heads' summed vectors, which is not the mean of their norms). ``flow``: the attention flow
    through layers 0..layer (attncli.attention.flow) instead of one layer. ``keys``: the columns'
    tokens when they are other tokens than the rows' (an encoder-decoder's cross-attention,
    (L, h, T, S): no rollout, flow or pair block there). ``query_rows``: only these input positions'
    rows (sorted, unique: --rows, attncli.attention.long_view); ``attentions`` holds either every
    row or just these (a trace that kept only them, (L, h, R, T)). ``texts``: each token's text
    (attncli.hf.text.token_text; the tokens themselves when not given)."""
    A = np.asarray(attentions, dtype=np.float64)  # (L, h, T, T), or (L, h, T, S) with keys
    T = A.shape[-1]
    if keys is not None and (rollout or flow or block != "all"):
        raise BadInput("rollout, flow and --filter follow one sequence's tokens through the layers: they do not "
                       "apply when the rows and the columns are different tokens")
    keys = keys or KeySide(tokens, segments, special, word_ids, word_texts, texts)
    if flow:
        mats = attention_flow(A, upto=layer)[None]  # (1, T, T)
    elif rollout:
        mats = rollout_fn(A, upto=layer)[None]  # (1, T, T)
    elif head is not None:
        mats = A[layer, head][None]  # (1, T, T)
    else:
        mats = A[layer]  # (h, T, T)
    rows, cols = np.arange(A.shape[-2]), np.arange(T)
    if query_rows is not None:
        rows = np.asarray(query_rows, dtype=int)  # (R,)
        if mats.shape[1] != len(rows):  # every row was computed: keep the asked ones
            mats = mats[:, rows]
    notes: list[str] = []
    share = None
    special = np.asarray(special, dtype=bool)
    key_special = np.asarray(keys.special, dtype=bool)
    if hide_special and (special.any() or key_special.any()):
        keep, keep_cols = ~special[rows], ~key_special
        if not keep.any() or not keep_cols.any():
            raise BadInput("the view is empty: every token is a special one, none is left after --hide-special")
        mats, share = hide_fn(mats, keep, keep_cols)  # (k, T', S'), (k, T')
        rows, cols = rows[keep], np.flatnonzero(keep_cols)
        share = share.mean(axis=0)  # (T',): for a layer's heads, their mean
        notes.append(f"special tokens hidden: their rows and columns dropped, each row renormalised over the "
                     f"other keys (they had {share.mean():.0%} of the attention on average)")
    seg = [segments[t] for t in rows]
    r_keep, c_keep = pair_block(seg, block, block_specials)
    if block != "all":
        mats = mats[:, r_keep][:, :, c_keep]
        notes.append(f"block {block}: sentence {block[0].upper()}'s queries, sentence {block[2].upper()}'s keys; "
                     "weights as in the whole matrix (a row sums to the share of attention that went to that sentence)"
                     + ("; special tokens placed as bertviz does ([CLS] and the first [SEP] in A, the last [SEP] in B)"
                        if block_specials == "bertviz" else ""))
        if share is not None:
            share = share[r_keep]
    if block != "all":
        rows, cols = rows[r_keep], cols[c_keep]
    view = PretrainedView(
        rows=rows, cols=cols, tokens=[tokens[t] for t in rows], key_tokens=[keys.tokens[t] for t in cols],
        weights=mats.mean(axis=0) if mats.shape[0] > 1 else mats[0],
        head_weights=mats if mats.shape[0] > 1 else None, special_share=share, notes=notes,
        texts=[(texts or tokens)[t] for t in rows], key_texts=[keys.token_texts[t] for t in cols],
    )
    if combined is not None and mats.shape[0] > 1:
        view.weights = np.asarray(combined, dtype=np.float64)[np.ix_(rows, cols)]  # (R, C)
    if words:
        view.words = _words(mats, rows, cols, KeySide(tokens, segments, special, word_ids, word_texts, texts), keys)
    return view


@dataclass
class KeySide:
    """One side's tokens (the rows', or the columns' when they differ), per input position."""

    tokens: Sequence[str]
    segments: Sequence[Optional[str]]
    special: Sequence[bool]
    word_ids: Sequence[Optional[int]]
    word_texts: Sequence[str]
    texts: Optional[Sequence[str]] = None  # each token's text (attncli.hf.text.token_text); None: the tokens

    @property
    def token_texts(self) -> Sequence[str]:
        return self.texts if self.texts is not None else self.tokens


def check_texts(text: str, pair: Optional[str], command: str = "matrix") -> None:
    """The sentence, and the --pair sentence when given, must hold more than blanks: a model would
    otherwise show its special tokens alone, as if that were the sentence's attention. ``command``:
    the one the example in the message names."""
    if not text.strip():
        raise BadInput(f'the sentence is empty: give a sentence, e.g. attn {command} "time flies like an arrow" '
                       "--transformer NAME")
    if pair is not None and not pair.strip():
        raise BadInput("the --pair sentence is empty: give a second sentence, or drop --pair")


def check_view_options(*, pair: Optional[str], block: Optional[str], rollout: bool, layer: Optional[int],
                       head: Optional[int]) -> None:
    """The refusals of the view's options that need no model (the table: attncli.rules.option_conflicts)."""
    validate(dict(pair=pair, filter=block, rollout=rollout, layer=layer, head=head), "transformer")


def layer_shown(model, layer: Optional[int], head: Optional[int]) -> int:
    """The layer to show (default: the last), after checking ``layer`` and ``head`` against the
    model's ``layers`` and ``heads``."""
    if layer is not None and layer >= model.layers:
        raise BadInput(f"--layer {layer} is out of range: the model has {model.layers} layers (0..{model.layers - 1})")
    if head is not None and head >= model.heads:
        raise BadInput(f"--head {head} is out of range: the model has {model.heads} heads per layer (0..{model.heads - 1})")
    return model.layers - 1 if layer is None else layer


def view_meta(model, enc, *, layer: int, head: Optional[int], rollout: bool, block: Optional[str],
              hide_special: bool, words: bool, flow: bool = False) -> dict[str, Any]:
    """The ``meta`` of a view's JSON document: the model, the input's facts and the view's options."""
    return {"model": model.name, "model_type": model.model_type, "backend": model.backend, "layer": layer,
            "head": head, "rollout": rollout, "filter": block or "all", "hide_special": hide_special,
            "words_merged": words, "causal": bool(model.is_decoder), "truncated": bool(enc.truncated),
            "layers": model.layers, "heads": model.heads, "show": "weights", "flow": flow, "kv_heads": model.kv_heads,
            "kv_head": None if head is None else model.kv_head(head)}


def _words(mats, rows, cols, query: KeySide, key: KeySide) -> WordView:
    def groups_of(positions, side: KeySide):
        local = word_groups([side.word_ids[t] for t in positions], [side.segments[t] for t in positions])
        return [[int(positions[n]) for n in g] for g in local]

    def label(group, side: KeySide):
        wid = side.word_ids[group[0]]
        return (side.word_texts[wid] if wid is not None and wid < len(side.word_texts)
                else word_label([side.tokens[t] for t in group]))

    def word_index(side: KeySide) -> dict[int, int]:
        """input position -> index of its word among all the input's words (special tokens are
        words of their own): a word keeps its number when --hide-special or --filter drops others."""
        everything = word_groups(list(side.word_ids), list(side.segments))
        return {t: n for n, g in enumerate(everything) for t in g}

    row_groups, col_groups = groups_of(rows, query), groups_of(cols, key)
    row_index, col_index = word_index(query), word_index(key)
    index_r = {int(t): n for n, t in enumerate(rows)}
    index_c = {int(t): n for n, t in enumerate(cols)}
    merged = merge_words(mats, [[index_r[t] for t in g] for g in row_groups],
                         [[index_c[t] for t in g] for g in col_groups])  # (k, W_q, W_k)
    return WordView(
        tokens=[label(g, query) for g in row_groups], key_tokens=[label(g, key) for g in col_groups],
        weights=merged.mean(axis=0) if merged.shape[0] > 1 else merged[0],
        head_weights=merged if merged.shape[0] > 1 else None, groups=row_groups, key_groups=col_groups,
        rows=[row_index[g[0]] for g in row_groups], cols=[col_index[g[0]] for g in col_groups],
    )


def document(view: PretrainedView, meta: dict[str, Any], *, segments: Sequence[Optional[str]],
             special: Sequence[bool], explanation: Optional[dict] = None,
             keys: Optional[KeySide] = None) -> dict[str, Any]:
    """The ``--json`` document (keys in docs/transformers.md); matrices as :class:`document.Rows`.
    ``keys``: the columns' side when it is other tokens than the rows' (cross-attention)."""
    key_segments, key_special = (keys.segments, keys.special) if keys is not None else (segments, special)

    doc: dict[str, Any] = {
        "tokens": view.tokens,
        "key_tokens": view.key_tokens,
        "token_texts": view.texts,
        "key_token_texts": view.key_texts,
        **meta,
        "weights": Rows(view.weights, np.isfinite(view.weights)),  # --show scores: masked -inf -> null
        "head_weights": [Rows(m, np.isfinite(m)) for m in view.head_weights] if view.head_weights is not None else None,
        "rows": [int(t) for t in view.rows],
        "cols": [int(t) for t in view.cols],
        "segments": [segments[t] for t in view.rows],
        "special": [bool(special[t]) for t in view.rows],
        "key_segments": [key_segments[t] for t in view.cols],
        "key_special": [bool(key_special[t]) for t in view.cols],
        "special_share": None if view.special_share is None else [round(float(x), 6) for x in view.special_share],
    }
    if view.words is not None:
        w = view.words
        doc["words"] = {
            "tokens": w.tokens, "key_tokens": w.key_tokens, "rows": w.rows, "cols": w.cols,
            "groups": w.groups, "key_groups": w.key_groups,
            "weights": Rows(w.weights),
            "head_weights": [Rows(m) for m in w.head_weights] if w.head_weights is not None else None,
        }
    if explanation is not None:
        doc["explanation"] = explanation
    return doc


def write_document(doc: dict[str, Any], write: Callable[[str], Any]) -> None:
    """Stream ``doc`` as JSON, one matrix row per line (as ``attn matrix --json`` does)."""
    write("{")
    for n, (key, value) in enumerate(doc.items()):
        write(("\n" if n == 0 else ",\n") + f"  {encode_json(key)}: ")
        if isinstance(value, dict) and any(not isinstance(v, (str, int, float, bool, type(None), list)) for v in value.values()):
            write("{")
            for m, (k2, v2) in enumerate(value.items()):
                write(("\n" if m == 0 else ",\n") + f"    {encode_json(k2)}: ")
                write_value(v2, write, "    ")
            write("\n  }")
        else:
            write_value(value, write, "  ")
    write("\n}\n")


def to_json(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as plain lists (exactly what ``--json`` prints)."""
    import io

    buf = io.StringIO()
    write_document(doc, buf.write)
    return json.loads(buf.getvalue())


def explain_cell(q: np.ndarray, k: np.ndarray, scale: float, causal: bool, weights: np.ndarray,
                 tokens: Sequence[str], i: int, j: int, head: Optional[int] = None) -> dict[str, Any]:
    """``--explain I J`` for a pretrained layer (bertviz's neuron view as numbers): per head, q_I and
    k_J, their dot product, the scale, the softmax over row I, each checked against ``weights``.

    ``q``, ``k`` (h, T, d_head) are the layer's queries and keys, ``weights`` (h, T, T) its
    attention; ``head`` limits the explanation to one head."""
    h, T, d_head = q.shape
    if not (0 <= i < T and 0 <= j < T):
        raise BadInput(f"--explain {i} {j} is outside the {T} x {T} matrix: rows and columns 0..{T - 1} (0-based, "
                       "input token positions, special tokens included)")
    visible_row = np.ones(T, dtype=bool) if not causal else np.arange(T) <= i  # (T,)
    masked = not visible_row[j]
    doc: dict[str, Any] = {
        "query": {"index": i, "token": tokens[i]}, "key": {"index": j, "token": tokens[j]},
        "variant": "pretrained", "formula": "softmax(q_I . k_J * scale) over the keys of row I",
        "masked": masked, "mask_reasons": [f"causal: key {j} comes after query {i}"] if masked else [],
    }
    entries = []
    for hd in ([head] if head is not None else range(h)):
        scores_row = (k[hd] @ q[hd, i]) * scale  # (T,)
        dot = float(q[hd, i] @ k[hd, j])
        w = float(weights[hd, i, j])
        steps = [explain_step("q_I", q[hd, i], f"{d_head} dims, |q| = {np.linalg.norm(q[hd, i]):.4g}"),
                 explain_step("k_J", k[hd, j], f"{d_head} dims, |k| = {np.linalg.norm(k[hd, j]):.4g}"),
                 explain_step("q . k", dot), explain_step("scale", scale, f"1/sqrt(d_head) = 1/sqrt({d_head})" if
                                             abs(scale * np.sqrt(d_head) - 1) < 1e-9 else "the model's own scale"),
                 explain_step("score", dot * scale)]
        if masked:
            steps.append(explain_step("weight", 0.0, "masked: the key comes after the query (causal)"))
        else:
            soft = softmax_steps(np.where(visible_row, scores_row, 0.0), visible_row, j, dot * scale, w)
            steps += [st for st in soft if st["name"] != "the matrix's score"]  # the row's scores are recomputed here too
        entries.append({"head": hd, "score": None if masked else dot * scale, "weight": w, "steps": steps})
    if head is not None:
        doc.update(score=entries[0]["score"], weight=entries[0]["weight"], steps=entries[0]["steps"])
    else:
        doc.update(heads=entries, score=None, weight=float(np.mean([e["weight"] for e in entries])),
                   note=f"weight = the mean of the {h} heads' weights")
    return doc
