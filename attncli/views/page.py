"""``attn matrix --transformer ... --html``: an interactive page, one file that works offline.

What bertviz's head and model views show, without require.js, d3 or jQuery from a CDN: layer and
head pickers, the head view (hover a query token to see where it attends, with the numbers), the
heatmap of the current matrix (numbers in the cells and on hover), the model view (every layer x
head as a thumbnail; click one to open it), the --words / --hide-special / --rollout toggles and
the A/B blocks of a pair; with --show norms, --show scores or --flow, that view of every layer
too (a "show" picker: :func:`extra_views`). Vanilla JavaScript and CSS inline, the data inline, and a
Content-Security-Policy that forbids every request (``default-src 'none'``).

The data are ``attn matrix --json`` documents (:func:`attncli.attention.checkpoint_views.document`),
one per layer x {tokens, special tokens hidden} x {heads, rollout}, each with its words merged
(``--words``); the page picks and slices them (a block of a pair is a slice, as ``--filter``'s).
Shapes: ``L`` layers, ``h`` heads, ``T`` tokens.
"""

from __future__ import annotations

import html
import json
from typing import Any, Optional

from attncli.attention import checkpoint_views as pv
from attncli.attention.contribution_views import formula, rollouts
from attncli.attention.value_norms import head_norms, summed_norms
from attncli.io.textio import texts_of
from attncli.rules.option_conflicts import CONTRIBUTIONS
from attncli.errors import BadInput
from attncli.io.textio import token_label, visible
from attncli.views.export import NOT_MARKUP, markup_safe
from attncli.views.render import VIRIDIS

SCRIPT_FILE = "page.js"
MAX_NUMBERS = 4_000_000  # weights the page may embed (about 10 bytes each in its JSON): ~40 MB


EXTRA_SHOWS = ("norms", "scores")  # --show views the page can add to the weights (token by token, one layer)
# CONTRIBUTIONS (attncli.rules.option_conflicts): one matrix per layer, and its rollout "NAME rollout"


def check_size(layers: int, heads: int, tokens: int, has_special: bool, extra: int = 0) -> None:
    """BadInput (exit 2) before any work when the page would embed more than MAX_NUMBERS
    weights: every layer x head x T x T, with and without the special tokens, by token and by
    word (the rollouts add one matrix per layer); ``extra`` more matrices per layer (--show
    norms / scores: h + 1 each, --flow: 1) by token."""
    numbers = layers * (heads + 2) * tokens * tokens * (2 if has_special else 1) * 2 + layers * extra * tokens * tokens
    if numbers > MAX_NUMBERS:
        most = int((MAX_NUMBERS / (layers * ((heads + 2) * (2 if has_special else 1) * 2 + extra))) ** 0.5)
        raise BadInput(f"--html: the interactive page of {tokens} tokens would hold {numbers:,} weights "
                       f"({layers} layers x {heads} heads); it takes up to about {most} tokens of this model: "
                       "shorten the input, or use --svg / --json")


def page_views(model, enc, attentions, meta: dict[str, Any], keys=None) -> dict[str, Any]:
    """Every view the page can show: key "LAYER|HIDE|ROLLOUT" (HIDE, ROLLOUT 0 or 1) -> the
    ``--json`` document of ``--layer LAYER --words [--hide-special] [--rollout]``. ``keys``
    (attncli.attention.checkpoint_views.KeySide): the columns' tokens when they are not the rows'
    (cross-attention, (L, h, T, S): no rollout there)."""
    views = {}
    hides = (0, 1) if any(enc.special) or (keys is not None and any(keys.special)) else (0,)
    for layer in range(model.layers):
        for hide in hides:
            for rollout in ((0, 1) if keys is None else (0,)):
                view = pv.select(attentions, layer=layer, rollout=bool(rollout), hide_special=bool(hide), words=True,
                                 tokens=enc.tokens, segments=enc.segments, special=enc.special,
                                 word_ids=enc.word_ids, word_texts=enc.words, keys=keys, texts=texts_of(enc))
                view_meta = {**meta, "layer": layer, "head": None, "rollout": bool(rollout), "filter": "all",
                             "hide_special": bool(hide), "words_merged": True}
                doc = pv.to_json(pv.document(view, view_meta, segments=enc.segments, special=enc.special, keys=keys))
                views[f"{layer}|{hide}|{rollout}"] = doc
    return views


def extra_size(heads: int, show: str = "weights", flow: bool = False) -> int:
    """Matrices per layer that :func:`extra_views` adds (for :func:`check_size`)."""
    return (heads + 1 if show in EXTRA_SHOWS else 2 if show in CONTRIBUTIONS else 0) + (1 if flow else 0)


def extra_views(model, enc, attentions, meta: dict[str, Any], show: str = "weights",
                flow: bool = False, reads=None) -> dict[str, list[dict[str, Any]]]:
    """The views beyond the weights, one ``--json`` document per layer (index = layer): "norms"
    (``--show norms --layer L``: each head's ||alpha f(x)||, the whole layer's ||sum_h alpha f(x)||;
    each document also holds "value_norms" (h, T), ||f^h(x_j)||, for the page's tooltips),
    "scores" (``--show scores``: masked -inf as null), "flow" (``--flow --layer L``), and a
    contribution method's "alti" (``--show alti --layer L``) and "alti rollout" (``--rollout``: R = C_L
    ... C_0), each document with its "formula". ``reads`` (attncli.pipeline.reads.Reads) answers from the
    command's one traced pass; without it, the model's own methods do (a contribution method needs it)."""
    import numpy as np

    def doc(mats, layer, combined=None, **options):
        view = pv.select(mats, layer=0 if mats.shape[0] == 1 else layer, tokens=enc.tokens, segments=enc.segments,
                         special=enc.special, word_ids=enc.word_ids, word_texts=enc.words, combined=combined,
                         flow=options.pop("flow_view", False), texts=texts_of(enc))
        view_meta = {**meta, "layer": layer, "head": None, "rollout": False, "filter": "all", "hide_special": False,
                     "words_merged": False, **options}
        return pv.to_json(pv.document(view, view_meta, segments=enc.segments, special=enc.special))

    views: dict[str, list[dict[str, Any]]] = {}
    if show == "norms":
        views["norms"] = []
        for layer in range(model.layers):
            weights, fx = reads.value_vectors(layer) if reads else model.value_vectors(enc, layer)  # (h, T, T), (h, T, d)
            d = doc(head_norms(weights, fx)[None], layer, summed_norms(weights, fx), show="norms")
            d["value_norms"] = [[round(float(x), 6) for x in row] for row in np.linalg.norm(fx, axis=-1)]  # (h, T)
            views["norms"].append(d)
    elif show == "scores":
        views["scores"] = []
        for layer in range(model.layers):
            per_head = reads.scores(layer) if reads else model.scores(enc, layer)  # (h, T, T), -inf where masked
            views["scores"].append(doc(per_head[None], layer, per_head.mean(axis=0), show="scores"))
    elif show in CONTRIBUTIONS:  # (L, T, T), rows summing to 1; rolled out: each layer's product with those below
        per_layer = reads.contributions(show, range(model.layers))
        for name, mats, rolled in ((show, per_layer, False), (f"{show} rollout", rollouts(per_layer), True)):
            views[name] = [doc(m[None, None], layer, show=show, formula=formula(show, rolled), rollout=rolled)
                           for layer, m in enumerate(mats)]
    if flow:
        views["flow"] = [doc(np.asarray(attentions), layer, flow_view=True, flow=True) for layer in range(model.layers)]
    return views


def page_data(model, enc, attentions, meta: dict[str, Any], classes: list, *, layer: int,
              head: Optional[int] = None, words: bool = False, hide_special: bool = False, rollout: bool = False,
              block: Optional[str] = None, model_view: bool = False, show: str = "weights",
              flow: bool = False, reads=None, keys=None) -> dict[str, Any]:
    """Everything the page embeds: the views, each head's class, and the state it opens in
    (``show`` and ``flow``: the extra views the page holds, and opens on). ``keys``: the columns'
    side when it is other tokens than the rows' (cross-attention: "square" is false, no rollout)."""
    key_side = keys if keys is not None else enc
    return {
        "model": model.name, "layers": model.layers, "heads": model.heads, "text": enc.text, "pair": enc.pair,
        "input": {"tokens": enc.tokens, "segments": enc.segments, "special": [bool(s) for s in enc.special],
                  "labels": [token_label(t) for t in texts_of(enc)]},  # each token's text as drawn: ␣ for a space
        "key_input": {"tokens": list(key_side.tokens), "segments": list(key_side.segments),
                      "special": [bool(s) for s in key_side.special],
                      "labels": [token_label(t) for t in (key_side.token_texts if keys is not None else texts_of(enc))]},
        "square": keys is None,
        "classes": [[{"label": c["label"], "score": c["score"]} for c in row] for row in classes],
        "viridis": VIRIDIS,
        "start": {"layer": layer, "head": head, "words": words,
                  "hide_special": hide_special and (any(enc.special) or any(key_side.special)),
                  "rollout": rollout and show not in CONTRIBUTIONS, "filter": block or "all",
                  "view": "model" if model_view else "head",
                  "show": "flow" if flow else f"{show} rollout" if rollout and show in CONTRIBUTIONS else show},
        "views": page_views(model, enc, attentions, meta, keys),
        "extra": extra_views(model, enc, attentions, meta, show, flow, reads),
    }


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside <script>: no '<', '>' or '&' (so no '</script>' or
    '<!--'), no U+2028/U+2029; strict (NaN refused)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return NOT_MARKUP.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # DEL, C1, lone surrogates: JSON escapes


def interactive_page(data: dict[str, Any], title: str) -> str:
    """The page: inline CSS, the data as application/json, the inline script; nothing remote."""
    from importlib.resources import files

    script = files("attncli.views").joinpath(SCRIPT_FILE).read_text(encoding="utf-8")
    return markup_safe(PAGE.format(title=html.escape(visible(title)), data=script_json(data), script=script, style=STYLE))


STYLE = """
body { font: 14px/1.4 'DejaVu Sans', Arial, sans-serif; margin: 16px; color: #222; background: #fafafa; }
h1 { font-size: 17px; margin: 0 0 4px; } .sub { color: #555; margin-bottom: 10px; }
#controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 12px; }
#controls label { white-space: nowrap; }
.tabs button { padding: 3px 10px; } .tabs button.on { font-weight: bold; background: #ddd; }
#headview { display: flex; gap: 0; align-items: flex-start; }
.col { display: flex; flex-direction: column; font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; }
.tok { height: 22px; line-height: 22px; padding: 0 6px; cursor: default; white-space: pre; border-radius: 3px; }
.q { text-align: right; } .tok.hot { background: #ffe08a; }
.tok .w { color: #333; font-size: 12px; margin-left: 6px; } .tok.dim { color: #aaa; }
#lines { flex: none; }
#matrix { border-collapse: collapse; font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px;
          margin-top: 14px; }
#matrix th { font-weight: bold; padding: 1px 4px; } #matrix th.r { text-align: left; }
#matrix td { padding: 1px 4px; text-align: right; }
#readout { margin-top: 8px; min-height: 20px; font-family: monospace; }
#modelview { display: grid; gap: 6px; } .thumb { cursor: pointer; text-align: center; font-size: 11px; }
.thumb canvas { border: 1px solid #ccc; display: block; } .thumb.on canvas { border: 2px solid #d33; }
.note { color: #666; font-size: 12px; margin-top: 8px; max-width: 60em; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1 id="title"></h1>
<div class="sub" id="sub"></div>
<div id="controls">
  <span class="tabs"><button id="tab-head" type="button">head view</button><button id="tab-model" type="button">model view</button></span>
  <label>layer <select id="layer"></select></label>
  <label>head <select id="head"></select></label>
  <label><input type="checkbox" id="words"> words</label>
  <label><input type="checkbox" id="hide"> hide special</label>
  <label><input type="checkbox" id="rollout"> rollout</label>
  <label id="show-label">show <select id="show"></select></label>
  <label id="filter-label">block <select id="filter"><option value="all">all</option><option value="a-a">A-A</option><option value="a-b">A-B</option><option value="b-a">B-A</option><option value="b-b">B-B</option></select></label>
</div>
<div id="head-pane">
  <div id="headview"><div class="col" id="queries"></div><svg id="lines" width="160"></svg><div class="col" id="keys"></div></div>
  <div id="readout"></div>
  <table id="matrix"></table>
</div>
<div id="model-pane"><div id="modelview"></div></div>
<div class="note" id="note"></div>
<noscript>This page draws with JavaScript; the same numbers: attn matrix ... --json.</noscript>
<script type="application/json" id="attn-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""
