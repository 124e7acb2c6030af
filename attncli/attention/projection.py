"""Projections: how token vectors become queries, keys and values (Q = X W_q, K = X W_k, V = X W_v).

Shapes: T query tokens, S key tokens, d input dimension, d_k query/key dimension, d_v value
dimension.

A projection is a function ``ProjectionInput -> Projected`` registered under a name; the names in
``PROJECTIONS`` are the choices of ``attn matrix --proj``. Two are built in:

- ``identity``: Q = K = V = X (d_k = d_v = d). Attention then compares the word vectors directly.
- ``random``: W_q, W_k (d x d_k), W_v (d x d_v = d_k) and the output W_o (d_v x d_v) drawn from
  N(0, 1/fan_in) by a generator seeded with ``--seed``, so vector lengths are kept on average.

A learned projection (``trained``, issue 5) is added with one line here,
``register("trained", "attncli.<module>:<function>", "...")``: a "module:function" string is
imported only when that projection is chosen, so the matrix path stays light. The function receives the raw word vectors as well as the position-encoded ones, the model, and
free-form ``options`` (e.g. layer, head), and may fix the number of heads and supply W_o.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from attncli.errors import BadInput


@dataclass
class ProjectionInput:
    x_q: np.ndarray  # (T, d) word vectors + positional encoding of the queries
    x_kv: np.ndarray  # (S, d) the same for the keys/values
    words_q: np.ndarray  # (T, d) word vectors alone (pad rows are 0)
    words_kv: np.ndarray  # (S, d)
    tokens: list[str]
    key_tokens: list[str]
    model: Any  # attncli.vectors.model.Vectors
    d_k: int | None = None  # None: the projection's own default
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Projected:
    q: np.ndarray  # (T, d_k)
    k: np.ndarray  # (S, d_k)
    v: np.ndarray  # (S, d_v)
    label: str  # how the title names it, e.g. "random (seed 0, d_k 64)"
    w_o: np.ndarray | None = None  # (d_v, d_v) output projection for multihead; None = identity
    b_o: np.ndarray | None = None  # (d_v,) its bias, if the projection has one (torch's out_proj.bias)
    heads: int | None = None  # set when the projection fixes the head count (a trained layer)
    positions: str | None = None  # set when the projection adds positions of its own (a trained model): --positions does not apply


ProjectionFn = Callable[[ProjectionInput], Projected]


@dataclass(frozen=True)
class ProjectionKind:
    name: str
    help: str
    fn: ProjectionFn | str  # a function, or "module:function" imported on first use
    takes_d_k: bool = False

    def __call__(self, inp: ProjectionInput) -> Projected:
        fn = self.fn
        if isinstance(fn, str):
            import importlib

            module, _, attr = fn.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        return fn(inp)


PROJECTIONS: dict[str, ProjectionKind] = {}


def register(name: str, fn: ProjectionFn | str, help: str, *, takes_d_k: bool = False) -> None:
    PROJECTIONS[name] = ProjectionKind(name, help, fn, takes_d_k)


def get_projection(name: str) -> ProjectionKind:
    try:
        return PROJECTIONS[name]
    except KeyError:
        raise BadInput(f"unknown projection {name!r}: choose one of {', '.join(PROJECTIONS)}") from None


def _identity(inp: ProjectionInput) -> Projected:
    if inp.d_k is not None and inp.d_k != inp.x_q.shape[1]:
        raise BadInput(f"--d-k {inp.d_k} needs --proj random: the identity projection keeps d = {inp.x_q.shape[1]}")
    return Projected(q=inp.x_q, k=inp.x_kv, v=inp.x_kv, label="identity")


def random_weights(d: int, d_k: int, seed: int) -> dict[str, np.ndarray]:
    """The seeded W_q, W_k (d, d_k), W_v (d, d_k) and W_o (d_k, d_k) of the random projection."""
    rng = np.random.default_rng([seed, 1])
    return {
        "W_q": rng.standard_normal((d, d_k)) / np.sqrt(d),
        "W_k": rng.standard_normal((d, d_k)) / np.sqrt(d),
        "W_v": rng.standard_normal((d, d_k)) / np.sqrt(d),
        "W_o": rng.standard_normal((d_k, d_k)) / np.sqrt(d_k),
    }


def _random(inp: ProjectionInput) -> Projected:
    d = inp.x_q.shape[1]
    d_k = d if inp.d_k is None else inp.d_k
    if d_k < 1 or d_k > 4096:
        raise BadInput(f"--d-k must be between 1 and 4096 (got {d_k})")
    w = random_weights(d, d_k, inp.seed)
    return Projected(
        q=inp.x_q @ w["W_q"],  # (T, d) @ (d, d_k) -> (T, d_k)
        k=inp.x_kv @ w["W_k"],  # (S, d_k)
        v=inp.x_kv @ w["W_v"],  # (S, d_v)
        label=f"random (seed {inp.seed}, d_k {d_k})",
        w_o=w["W_o"],
    )


register("identity", _identity, "Q = K = V = the input vectors")
register("random", _random, "seeded random W_q, W_k, W_v (--seed, --d-k)", takes_d_k=True)
# issue 5's learned weights (attncli/tinylm/model.py), imported only when chosen; options: layer, head
register("trained", "attncli.tinylm.model:projection", "learned W_q, W_k, W_v of the model's trained attention (--layer, --head)")
