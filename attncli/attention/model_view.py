"""The model view of a pretrained model's attention (``attn matrix --transformer --model-view``,
``M`` in ``attn explore``) as data: its option checks, the layers it covers, each head's class on
the input, and its ``--json`` document. Drawn by :mod:`attncli.views.model_view`.

Pure NumPy, like :mod:`attncli.attention.checkpoint_views`: the model and its ``Encoding`` come in as
plain objects (``layers``, ``heads``, ``is_decoder``; ``tokens``, ``ids``, ``special``, ...).
Shapes: ``L`` layers, ``h`` heads, ``T`` input tokens.

    >>> layer_range("1-2", 4), layer_range(None, 4), layer_range("3", 4)
    ((1, 3), (0, 4), (3, 4))
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from attncli.errors import BadInput
from attncli.rules.option_conflicts import validate
from attncli.attention.heads import ScoredInput, classify
from attncli.attention.words import hide_special as hide_fn
from attncli.attention.document import Rows

def check_model_view_options(*, model_view: bool, layers: Optional[str], layer: Optional[int], head: Optional[int],
                             explain: Any = None, rollout: bool = False, words: bool = False,
                             block: Optional[str] = None) -> None:
    """The refusals of --model-view and --layers that need no model (the table: attncli.rules.option_conflicts)."""
    validate(dict(model_view=model_view, layers=layers, layer=layer, head=head, explain=explain, rollout=rollout,
                  words=words, block=block), "transformer")


def parse_layers(text: str) -> tuple[int, int]:
    """'A-B' or 'A' -> (A, B), both included; only the form is checked (the range needs the model)."""
    a, sep, b = text.partition("-")
    try:
        return int(a), int(b) if sep else int(a)
    except ValueError:
        raise BadInput(f"--layers {text!r}: expected A-B (0-based, both included), e.g. --layers 0-2") from None


def layer_range(text: Optional[str], n: int) -> tuple[int, int]:
    """'A-B' (0-based, both included) or 'A' -> (A, B + 1), checked against n layers."""
    if text is None:
        return 0, n
    lo, hi = parse_layers(text)
    if not 0 <= lo <= hi < n:
        raise BadInput(f"--layers {text!r}: the model has layers 0..{n - 1}")
    return lo, hi + 1


def head_classes(model, enc, attentions: np.ndarray, hide_special: bool = False) -> list[list[dict[str, Any]]]:
    """Each head's class on this one input (the rule of ``attn heads``; duplicate-token and
    induction need a repeated sequence and are left to ``attn heads --transformer``). With
    ``hide_special``, on the attention with special tokens hidden (what the model view draws).
    ``attentions`` (L, h, T, T); the result is indexed [layer][head]: {"label", "score"}."""
    special = np.asarray(enc.special, dtype=bool)
    seps = special.copy()
    seps[0] = False
    queries = ~special if (~special).sum() >= 2 else np.ones_like(special)
    ids = None if model.is_decoder else list(enc.ids)  # an encoder's duplicate-token heads (e.g. across a pair)
    if hide_special and special.any() and (~special).sum() >= 2:
        attentions = hide_fn(attentions, ~special, ~special)[0]  # (L, h, T', T')
        queries, seps = np.ones(attentions.shape[-1], dtype=bool), np.zeros(1, dtype=bool)
        ids = None if ids is None else [t for t, s in zip(ids, special) if not s]
    report = classify([ScoredInput(attentions, queries=queries, separators=seps if seps.any() else None,
                                   token_ids=ids)],
                      layers=model.layers, heads=model.heads, causal=bool(model.is_decoder), window=3)
    out = [[{} for _ in range(model.heads)] for _ in range(model.layers)]
    for h in report["heads"]:
        score = h.get(h["label"])
        out[h["layer"]][h["head"]] = {"label": h["label"], "score": None if score is None else round(score, 4)}
    return out


def model_view_document(model, enc, attentions: np.ndarray, meta: dict[str, Any], lo: int, hi: int,
                        classes: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The model view's ``--json`` document: every head's (T, T) matrix of layers lo..hi-1,
    layer-major in one list (``attentions[(layer - lo) * heads + head]``), and each head's class
    (``classes`` from :func:`head_classes`). ``meta`` is the view's (its layer and head left out)."""
    return {"tokens": enc.tokens, **{k: v for k, v in meta.items() if k not in ("head", "layer")},
            "segments": enc.segments, "special": enc.special, "layer_range": [lo, hi - 1],
            "classes": [classes[layer] for layer in range(lo, hi)],
            "attentions": [Rows(attentions[layer, h]) for layer in range(lo, hi) for h in range(model.heads)]}
