"""The attention matrix of a sentence: tokens -> vectors + positions -> Q, K, V -> a variant.

Shapes: T query tokens, S key tokens, d word-vector dimension, d_k / d_v after the projection,
h heads.

1. Tokens come from the shared tokenization; keys are the same tokens (self-attention) or the
   ``context`` sentence's (cross-attention). ``--pad-to N`` appends ``<pad>`` tokens (zero word
   vectors) up to N keys -- and, in self-attention, up to N queries, as in a padded batch; pad
   keys are always masked.
2. Each token's word vector (unknown words from subwords, else a clear error) plus, by default,
   a sinusoidal positional encoding (Vaswani et al. 2017, section 3.5):
   PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).
   Every PE row has length sqrt(d/2) (about 7 for d = 100), more than a typical word vector of
   a word2vec/fastText model, so raw PE would drown the words; it is scaled so that each PE row
   is exactly as long as the model's average word vector (the mean over its first 1,000, most
   frequent, words). ``positions="none"`` leaves the word vectors alone.
3. A projection from :mod:`attncli.attention.projection` (identity, random, later trained).
4. A variant from :mod:`attncli.attention.variants`, under the masks of :mod:`attncli.attention.masks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attncli.attention import masks as masks_mod
from attncli.attention.variants import AttentionResult, VariantConfig, attend, get_variant, init_params
from attncli.errors import BadInput
from attncli.attention.projection import ProjectionInput, Projected, get_projection
from attncli.io.textio import check_length
from attncli.vectors.tokenize import tokenize
from attncli.vectors.model import load_vectors

PAD = "<pad>"
POSITIONS = ("sinusoidal", "none")
DEFAULT_POSITIONS = "sinusoidal"
MAX_TOKENS = 4096  # T and S; the (T, S) float64 arrays stay under ~130 MB each
MAX_ADDITIVE_TERMS = 2**29  # T * S * d_a of --variant additive: a few seconds of tanh
MAX_HEAD_CELLS = 4 * MAX_TOKENS * MAX_TOKENS  # h * T * S for multihead: each (h, T, S) array stays under ~540 MB


@dataclass
class MatrixRequest:
    text: str
    context: str | None = None
    variant: str = "scaled"
    mask: masks_mod.MaskSpec = field(default_factory=masks_mod.MaskSpec)
    positions: str = DEFAULT_POSITIONS
    projection: str = "identity"
    d_k: int | None = None
    seed: int = 0
    heads: int | None = None  # None: 4 for multihead (or what the projection fixes), else 1
    max_relative: int = 4
    model: str | None = None
    projection_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class MatrixResult:
    request: MatrixRequest
    tokens: list[str]  # T query tokens (pads included)
    key_tokens: list[str]  # S key tokens (pads included)
    n_real_keys: int
    model_name: str
    projected: Projected
    params: dict[str, Any]
    attention: AttentionResult

    @property
    def cross(self) -> bool:
        return self.request.context is not None

    @property
    def d_k(self) -> int:
        return int(self.projected.q.shape[1])

    @property
    def d_v(self) -> int:
        return int(self.projected.v.shape[1])

    @property
    def positions(self) -> str:
        """The positional encoding the queries and keys carry: --positions, unless the projection has its own."""
        return self.projected.positions or self.request.positions

    def mask_label(self) -> str:
        label = self.request.mask.describe()
        if self.request.variant == "local":
            label = f"local window {self.params['window']}" + ("" if label == "no mask" else f" + {label}")
        return label


def sinusoidal(n: int, d: int) -> np.ndarray:
    """(n, d) positional encoding of Vaswani et al. 2017 (odd d: the last sin column is kept)."""
    pos = np.arange(n)[:, None]  # (n, 1)
    rate = 1.0 / (10000.0 ** (np.arange(0, d, 2) / d))  # (ceil(d/2),)
    angles = pos * rate[None, :]  # (n, ceil(d/2))
    pe = np.empty((n, d))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d // 2])
    return pe


def typical_norm(vectors) -> float:
    """Mean length of the model's first 1,000 word vectors (its most frequent words)."""
    head = np.asarray(vectors.vectors[:1000], dtype=np.float64)  # (<=1000, d)
    return float(np.linalg.norm(head, axis=1).mean()) if len(head) else 1.0


def _tokens(text: str, what: str) -> list[str]:
    tokens = tokenize(check_length(text, f"the {what}"))
    if not tokens:
        shown = text.strip()[:40]
        raise BadInput(f"the {what} {shown!r} has no word in it (letters or digits): give a sentence" if shown
                       else f"the {what} is empty: give a sentence, e.g. attn matrix \"time flies like an arrow\"")
    if len(tokens) > MAX_TOKENS:
        raise BadInput(f"the {what} has {len(tokens)} tokens; attn matrix handles at most {MAX_TOKENS}")
    return tokens


def _embed(vectors, words: list[str], n_total: int) -> np.ndarray:
    """(n_total, d): the words' vectors, then zero rows for the pads."""
    out = np.zeros((n_total, vectors.dim))
    out[: len(words)] = vectors.matrix(words)  # (n_words, d)
    return out


def _heads(req: MatrixRequest, projected: Projected, T: int, S: int) -> int:
    if req.variant != "multihead":
        if projected.heads is not None and projected.heads > 1:
            raise BadInput(f"the {req.projection} projection has {projected.heads} heads: add --variant multihead, "
                           "or pick one head with --head H")
        if req.heads not in (None, 1):
            raise BadInput(f"--heads {req.heads} needs --variant multihead (the {req.variant} variant has one head)")
        return 1
    heads = req.heads or projected.heads or 4
    if projected.heads is not None and heads != projected.heads:
        raise BadInput(f"the {req.projection} projection has {projected.heads} heads; --heads {heads} contradicts it")
    d_k, d_v = projected.q.shape[1], projected.v.shape[1]
    named = f"--heads {heads}" if req.heads else f"the default of {heads} heads"
    if heads < 1 or d_k % heads or d_v % heads:
        divisors = [n for n in range(1, min(d_k, 16) + 1) if d_k % n == 0 and d_v % n == 0]
        raise BadInput(
            f"{named} does not divide the dimension (d_k = {d_k}, d_v = {d_v}): "
            f"try --heads with one of {', '.join(map(str, divisors))}"
        )
    if heads * T * S > MAX_HEAD_CELLS:
        raise BadInput(
            f"{named} on {T} x {S} tokens needs {heads * T * S:,} cells per (heads, T, S) array "
            f"({heads * T * S * 8 / 2**30:.1f} GiB each); attn matrix allows {MAX_HEAD_CELLS:,} "
            f"(4 heads at {MAX_TOKENS:,} tokens): use fewer heads or a shorter text"
        )
    return heads


def _check_work(req: MatrixRequest, T: int, S: int, d_k: int) -> None:
    """BadInput naming the limit if the variant's work would be far beyond an interactive view:
    additive attention evaluates tanh on T * S * d_a terms (d_a = d_k)."""
    if req.variant == "additive" and T * S * d_k > MAX_ADDITIVE_TERMS:
        raise BadInput(
            f"--variant additive on {T} x {S} tokens with d_k = {d_k} needs {T * S * d_k:,} tanh terms; "
            f"attn matrix allows at most {MAX_ADDITIVE_TERMS:,}: use a shorter text, or a smaller --d-k with --proj random"
        )


def check_request(req: MatrixRequest) -> None:
    """Options that contradict each other or are out of range (BadInput)."""
    get_variant(req.variant)
    kind = get_projection(req.projection)
    if req.positions not in POSITIONS:
        raise BadInput(f"unknown --positions {req.positions!r}: choose one of {', '.join(POSITIONS)}")
    if req.mask.window is not None and req.mask.window <= 0:
        raise BadInput(f"--window must be at least 1 (got {req.mask.window}): it is how many keys each side a query sees")
    if req.mask.causal and req.context is not None:
        raise BadInput("--causal contradicts --context: a causal mask hides later tokens of the same sentence, "
                       "while cross-attention keys come from another sentence")
    if req.d_k is not None and not kind.takes_d_k:
        raise BadInput(f"--d-k needs a projection that has one, e.g. --proj random (not {req.projection})")
    if not 1 <= req.max_relative <= MAX_TOKENS:
        raise BadInput(f"--max-relative must be between 1 and {MAX_TOKENS} (got {req.max_relative})")
    if req.heads is not None and not 1 <= req.heads <= 256:
        raise BadInput(f"--heads must be between 1 and 256 (got {req.heads})")
    if req.seed < 0:
        raise BadInput(f"--seed must be 0 or more (got {req.seed})")
    if req.mask.pad_to is not None and req.mask.pad_to < 1:
        raise BadInput(f"--pad-to must be at least 1 (got {req.mask.pad_to})")


def compute(req: MatrixRequest, vectors=None) -> MatrixResult:
    """Run the whole pipeline for ``req``; ``vectors`` defaults to ``load_vectors(req.model)``."""
    check_request(req)
    tokens = _tokens(req.text, "sentence")
    key_words = _tokens(req.context, "context") if req.context is not None else tokens
    n_real_keys = len(key_words)
    pad_to = req.mask.pad_to
    if pad_to is not None:
        if pad_to < n_real_keys:
            raise BadInput(f"--pad-to {pad_to} is shorter than the {'context' if req.context else 'sentence'} "
                           f"({n_real_keys} tokens)")
        if pad_to > MAX_TOKENS:
            raise BadInput(f"--pad-to {pad_to} is more than {MAX_TOKENS} tokens")
    n_keys = max(n_real_keys, pad_to or 0)
    key_tokens = key_words + [PAD] * (n_keys - n_real_keys)
    query_tokens = key_tokens if req.context is None else tokens

    if vectors is None:
        vectors = load_vectors(req.model)
    words_q = _embed(vectors, tokens, len(query_tokens))  # (T, d)
    words_kv = words_q if req.context is None else _embed(vectors, key_words, n_keys)  # (S, d)
    x_q, x_kv = words_q, words_kv
    if req.positions == "sinusoidal":
        pe = sinusoidal(max(len(query_tokens), n_keys), vectors.dim)  # (max(T, S), d)
        pe *= typical_norm(vectors) / np.sqrt(vectors.dim / 2)
        x_q = words_q + pe[: len(query_tokens)]  # (T, d)
        x_kv = words_kv + pe[:n_keys]  # (S, d)

    kind = get_projection(req.projection)
    projected = kind(ProjectionInput(
        x_q=x_q, x_kv=x_kv, words_q=words_q, words_kv=words_kv, tokens=query_tokens, key_tokens=key_tokens,
        model=vectors, d_k=req.d_k, seed=req.seed, options=dict(req.projection_options),
    ))
    heads = _heads(req, projected, len(query_tokens), n_keys)
    _check_work(req, len(query_tokens), n_keys, projected.q.shape[1])
    local_window = req.mask.window if req.mask.window is not None else 2
    config = VariantConfig(heads=heads, max_relative=req.max_relative, local_window=local_window)
    params = init_params(req.variant, projected.q.shape[1], projected.v.shape[1], seed=req.seed, config=config)
    if req.variant == "multihead" and projected.w_o is not None:
        params["W_o"] = projected.w_o
        if projected.b_o is not None:
            params["b_o"] = projected.b_o
    mask = masks_mod.build(req.mask, len(query_tokens), n_keys, n_real_keys)
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (projected.q, projected.k, projected.v))
    result = attend(req.variant, q, k, v, mask=mask, params=params)
    return MatrixResult(
        request=req, tokens=query_tokens, key_tokens=key_tokens, n_real_keys=n_real_keys,
        model_name=vectors.name, projected=projected, params=params, attention=result,
    )
