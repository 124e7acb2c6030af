"""``attn heads --transformer --weights`` and ``--random N``: what each head is, read from its
weights (attncli.hf.methods.head_circuits) or from its attention on repeated random tokens, as one JSON
document (drawn by attncli.views.head_map).

The activation scores are attncli.attention.heads' (previous_token, duplicate_token, induction:
the same per-query definitions ``attn heads`` and ``attn stats`` use) on TransformerLens' test:
the model's leading special tokens, then N distinct random token ids, then the same N again. A
query of the second half has exactly one induction key (the token after its first copy: the
"induction stripe", offset N - 1 back) and one duplicate key (its first copy, N back).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from attncli.attention.heads import ScoredInput, Tally, row_scores, uniform_weights
from attncli.errors import BadInput
from attncli.model.interface import has
from attncli.io.textio import visible
from attncli.hf.methods.head_circuits import MODES, weight_scores

RANDOM_SCORES = ("previous_token", "duplicate_token", "induction")
WEIGHT_ROLES = ("copying", "q_in", "k_in", "v_in")  # X_in: the head's largest X-composition from an earlier head
ROLES = WEIGHT_ROLES + RANDOM_SCORES
MAX_RANDOM_LENGTH = 4096


def weights_report(model: Any, *, top_k: int = 5) -> dict[str, Any]:
    """Every head's copying score and top OV / QK tokens, and the composition scores between heads."""
    if not model.is_decoder:
        raise BadInput(f"--weights reads a decoder's heads (GPT-2, the Llama family, GGUF); model "
                       f"'{visible(model.name)}' is an encoder")
    if not has(model, "weights"):
        raise BadInput("--weights reads the weights on attn's NumPy path: drop --backend torch")
    ws = weight_scores(model, top_k=top_k)
    f = ws.factors
    L, h = f.layers, f.heads
    strings = lambda ids: [str(s) for s in model.token_strings([int(i) for i in ids])]  # noqa: E731
    comp_in = {m: ws.composition[m].max(axis=(0, 1)) for m in MODES}  # (L, h) the strongest writer into each head
    heads = []
    for layer in range(L):
        for head in range(h):
            heads.append({"layer": layer, "head": head, "kv_head": head // (h // f.kv_heads),
                          "copying": float(ws.copying[layer, head]),
                          **{f"{m.lower()}_in": float(comp_in[m][layer, head]) if layer else None for m in MODES},
                          **{name: {"ids": [int(i) for i in ws.directions[name][layer, head]],
                                    "tokens": strings(ws.directions[name][layer, head])}
                             for name in ("ov_in", "ov_out", "qk_query", "qk_key")}})
    parts = getattr(model.arch, "parts", None)
    rope = parts.position == "rotary" if parts is not None else hasattr(model.arch, "inv_freq")
    return {"model": model.name, "backend": model.backend, "layers": L, "heads_per_layer": h, "kv_heads": f.kv_heads,
            "source": "weights", "norm": "LayerNorm" if f.norm == "layer" else "RMSNorm",
            "folding": ("LayerNorm weights folded into W_Q, W_K, W_V and W_U; reading weights, W_O, W_E and W_U "
                        "centred over the model width; W_U centred over the vocabulary (TransformerLens' "
                        "process_weights)") if f.norm == "layer" else
                       ("RMSNorm weights folded into W_Q, W_K, W_V and W_U; W_U centred over the vocabulary "
                        "(TransformerLens' process_weights)"),
            "folded_norms": list(f.folded_norms), "rope": rope, "composed": ("the unrotated W_Q W_K^T (RoPE's rotation depends on the distance between "
                                       "query and key: the score is the content part)") if rope else "W_Q W_K^T",
            "scores": list(WEIGHT_ROLES), "top_k": top_k, "heads": heads,
            "composition": {m: np.round(ws.composition[m], 6).tolist() for m in MODES}}


def leading_specials(model: Any) -> list[int]:
    """The special tokens the tokenizer puts in front of a text (BOS), as ids."""
    enc = model.encode("a")
    out = []
    for i, special in zip(enc.ids, enc.special):
        if not special:
            break
        out.append(int(i))
    return out


def repeated_random(model: Any, length: int, seed: int) -> tuple[list[int], int]:
    """(ids, prefix): the model's leading special tokens, ``length`` distinct random non-special
    token ids, the same again; ``prefix`` the count of leading specials."""
    prefix = leading_specials(model)
    specials = np.fromiter(sorted(model.special_ids), dtype=np.int64)
    pool = np.setdiff1d(np.arange(model.vocab_size), specials)
    if len(pool) < length:
        raise BadInput(f"--random {length}: the model has only {len(pool)} ordinary tokens to draw distinct ids from")
    half = np.random.default_rng(seed).choice(pool, size=length, replace=False).tolist()
    return prefix + half + half, len(prefix)


def random_inputs(model: Any, length: int, count: int, seed: int,
                  on_text: Optional[Callable[[], None]] = None) -> Iterator[ScoredInput]:
    """``count`` repeated random sequences (seeds seed, seed + 1, ...), each with its attention;
    the queries scored are the random tokens (not the leading specials)."""
    for n in range(count):
        ids, prefix = repeated_random(model, length, seed + n)
        _, attentions = model.logits_and_attentions(ids)  # (L, h, T, T)
        queries = np.zeros(len(ids), dtype=bool)
        queries[prefix:] = True
        yield ScoredInput(attentions, queries=queries, token_ids=ids, only=RANDOM_SCORES)
        if on_text is not None:
            on_text()


def random_report(model: Any, *, length: int, count: int, seed: int = 0,
                  on_text: Optional[Callable[[], None]] = None) -> dict[str, Any]:
    """Each head's previous-token, duplicate-token and induction score on ``count`` repeated random
    sequences of ``length`` tokens (the mean over every query that has the pattern's key)."""
    if not model.is_decoder:
        raise BadInput(f"--random scores a decoder's heads on repeated random tokens; model '{visible(model.name)}' is an "
                       "encoder: score it on sentences (drop --random)")
    if 2 * length + len(leading_specials(model)) > model.max_positions:
        raise BadInput(f"--random {length}: twice {length} tokens and the leading special tokens exceed the model's "
                       f"{model.max_positions} positions")
    tally, base = Tally(model.layers, model.heads), Tally(1, 1)
    for inp in random_inputs(model, length, count, seed, on_text):
        kw = dict(causal=True, window=1, queries=inp.queries, token_ids=inp.token_ids, only=RANDOM_SCORES)
        tally.add_all_layers([row_scores(layer, **kw) for layer in inp.attentions])  # each (h, T, T)
        base.add(0, row_scores(uniform_weights(inp.attentions.shape[-1], True), **kw))
    means, uniform = tally.means(), base.means()
    scores = [s for s in RANDOM_SCORES if means[s] is not None]
    heads = [{"layer": layer, "head": head, "kv_head": model.kv_head(head),
              **{s: float(means[s][layer, head]) for s in scores}}
             for layer in range(model.layers) for head in range(model.heads)]
    return {"model": model.name, "backend": model.backend, "layers": model.layers, "heads_per_layer": model.heads,
            "kv_heads": model.kv_heads, "source": "random", "random": {"length": length, "sequences": count,
                                                                          "seed": seed},
            "scores": scores, "queries": tally.counts["previous_token"],
            "uniform": {s: float(uniform[s][0, 0]) for s in scores}, "heads": heads}


def check_role(role: Optional[str], source: str) -> None:
    allowed: Sequence[str] = WEIGHT_ROLES if source == "weights" else RANDOM_SCORES
    if role is not None and role not in allowed:
        raise BadInput(f"--role {role!r}: with {'--weights' if source == 'weights' else '--random'} choose one of "
                       f"{', '.join(allowed)}")
