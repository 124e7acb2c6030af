"""``attn heads --transformer``: every head of a pretrained model scored and labelled.

The scores and the rule are :mod:`attncli.attention.heads`' (shared with ``attn heads`` on attn's
own LM); this module only runs the model over the sentences and hands the attention over.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import numpy as np

from attncli.attention.heads import ScoredInput, classify
from attncli.lm.heads import check_window


def scored_inputs(model, texts: list[str], on_text: Optional[Callable[[], None]] = None) -> Iterator[ScoredInput]:
    """Each sentence's attention (queries: its non-special tokens; separators: the special tokens
    after the first, [SEP] or </s>; an encoder's duplicate tokens); for a decoder also the sentence's token ids twice in a row,
    scored for duplicate_token and induction only (TransformerLens' repeated-sequence test).
    ``on_text`` is called once each sentence is done (a progress bar)."""
    for n, text in enumerate(texts):
        if on_text is not None and n > 0:  # the sentence before this one is done
            on_text()
        enc = model.encode(text, truncate=True)
        special = np.asarray(enc.special, dtype=bool)  # (T,)
        if (~special).sum() < 2:
            continue
        separators = special.copy()
        separators[0] = False
        yield ScoredInput(model.attentions(enc), queries=~special, separators=separators if separators.any() else None,
                          token_ids=None if model.is_decoder else list(enc.ids))  # an encoder: duplicates within the sentence
        if model.is_decoder:
            ids = (list(enc.ids) * 2)[: model.max_positions]
            _, attentions = model.logits_and_attentions(ids)  # (L, h, 2T, 2T)
            yield ScoredInput(attentions, queries=np.ones(len(ids), dtype=bool), token_ids=ids,
                              only=("duplicate_token", "induction"))
    if on_text is not None and texts:
        on_text()


def score_transformer_heads(model, texts: list[str], *, window: int, exclude_first: bool,
                            on_text: Optional[Callable[[], None]] = None) -> dict[str, Any]:
    check_window(window)
    report = classify(scored_inputs(model, texts, on_text), layers=model.layers, heads=model.heads,
                      causal=bool(model.is_decoder), window=window, exclude_first=exclude_first)
    if report["sentences"] == 0:
        from attncli.errors import BadInput

        raise BadInput("no sentence of two or more tokens to score the heads on")
    for entry in report["heads"]:  # grouped-query attention: which key-value head each query head reads
        entry["kv_head"] = model.kv_head(entry["head"])
    return {"model": model.name, "backend": model.backend, "layers": model.layers, "heads_per_layer": model.heads,
            "kv_heads": model.kv_heads, "causal": bool(model.is_decoder), **report}
