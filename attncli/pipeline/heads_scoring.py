"""``attn heads --transformer``: every head of a pretrained model scored and labelled (its compute:
attncli.pipeline.heads_compute).

The scores and the rule are :mod:`attncli.attention.heads`' (shared with ``attn heads`` on attn's
own LM); this module only runs the model over the sentences and hands the attention over.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import numpy as np

from attncli.attention.heads import ScoredInput, classify
from attncli.errors import BadInput
from attncli.tinylm.heads import check_window


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


def stack_inputs(model, texts: list[str], stack: str, on_text: Optional[Callable[[], None]] = None
                 ) -> Iterator[ScoredInput]:
    """An encoder-decoder's decoder or cross stack on each line "SOURCE<TAB>TARGET" (no TAB: the
    source is its own target): the decoder's input (the target shifted right) is each row, its
    special tokens (the decoder start) not scored; the keys are the target's (decoder, causal, with
    its token ids) or the source's (cross, (T, S): separators are the source's special tokens
    after the first, no token ids across two texts)."""
    for n, line in enumerate(texts):
        if on_text is not None and n > 0:
            on_text()
        source_text, _, target_text = line.partition("\t")
        source = model.encode(source_text.strip() or target_text.strip(), truncate=True)
        target = model.encode_target(target_text.strip() or source_text.strip(), truncate=True)
        attentions = model.stack_attentions(source, target)[stack]  # (L, h, T, T) or (L, h, T, S)
        queries = ~np.asarray(target.special, dtype=bool)  # (T,)
        keys = source if stack == "cross" else target
        separators = np.asarray(keys.special, dtype=bool).copy()  # (S,)
        separators[0] = False
        if queries.sum() < (1 if stack == "cross" else 2):
            continue
        yield ScoredInput(attentions, queries=queries, separators=separators if separators.any() else None,
                          token_ids=list(target.ids) if stack == "decoder" else None)
    if on_text is not None and texts:
        on_text()


def score_transformer_heads(model, texts: list[str], *, window: int, exclude_first: bool,
                            on_text: Optional[Callable[[], None]] = None, stack: Optional[str] = None) -> dict[str, Any]:
    """``stack`` (an encoder-decoder's): "encoder" (its self-attention, as any encoder), "decoder"
    or "cross" (:func:`stack_inputs`)."""
    check_window(window)
    shape = model.stack(stack) if stack is not None else model  # its layers, heads and causal flag
    inputs = scored_inputs(model, texts, on_text) if stack in (None, "encoder") else stack_inputs(model, texts, stack,
                                                                                                 on_text)
    report = classify(inputs, layers=shape.layers, heads=shape.heads, causal=bool(shape.is_decoder), window=window,
                      exclude_first=exclude_first)
    if report["sentences"] == 0:
        raise BadInput("no sentence of two or more tokens to score the heads on")
    for entry in report["heads"]:  # grouped-query attention: which key-value head each query head reads
        entry["kv_head"] = shape.kv_head(entry["head"])
    return {"model": model.name, "backend": model.backend, "layers": shape.layers, "heads_per_layer": shape.heads,
            "kv_heads": shape.kv_heads, "causal": bool(shape.is_decoder), **report}
