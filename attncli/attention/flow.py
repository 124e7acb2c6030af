"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL), the
max-flow companion of the rollout (:mod:`attncli.attention.rollout`).

The layers make a layered graph: one node per (layer boundary l = 0..L, token t), an edge from
(l-1, j) to (l, i) of capacity Â_l[i, j], Â_l = rownorm(mean_h A_l + I) (the rollout's
residual-augmented attention). The flow from input token j to position i after layer L is the
maximum flow from node (0, j) to node (L, i). It is computed here by Dinic's algorithm, one
source-sink pair at a time: T^2 max-flow problems on (L+1) T nodes, hence the token bound.

Shapes: ``L`` layers, ``h`` heads, ``T`` tokens, ``N`` = (L + 1) T graph nodes.

    >>> import numpy as np
    >>> cap = np.array([[0, 3, 2, 0], [0, 0, 1, 2], [0, 0, 0, 3], [0, 0, 0, 0]], dtype=float)
    >>> max_flow(cap, 0, 3)
    5.0
"""

from __future__ import annotations

import numpy as np

from attncli.attention.rollout import residual_attention
from attncli.errors import BadInput
from attncli.rules.option_conflicts import validate

FORMULA = "F[i, j] = maxflow((0, j) -> (L, i)) through edges (l-1, j') -> (l, i') of capacity Â_l[i', j']"
SOURCE = "Abnar & Zuidema 2020, Quantifying Attention Flow in Transformers (ACL)"
MAX_TOKENS = 32  # T^2 max-flow problems on (L + 1) T nodes each: the time grows as T^4 (bench/bench_beyond.py)
EPS = 1e-12  # residual capacities at or below this count as saturated


def max_flow(capacity: np.ndarray, source: int, sink: int) -> float:
    """The maximum flow from ``source`` to ``sink`` of the graph with (N, N) ``capacity``
    (capacity[u, v] >= 0 on edge u -> v), by Dinic's algorithm: a breadth-first search levels the
    residual graph, then augmenting paths that climb one level per edge are found by a
    depth-first search with current-arc pointers (a dead end leaves the phase) until none is
    left; repeat until the sink is unreachable. On these graphs of a few hundred nodes plain
    Python lists beat NumPy calls (8x faster than a vectorised Edmonds-Karp on 14 tokens, 6 layers)."""
    if source == sink:
        raise ValueError("the source is the sink")
    cap = np.asarray(capacity, dtype=np.float64)  # (N, N)
    N = cap.shape[0]
    residual = cap.tolist()  # residual[u][v] = capacity - flow; pushing b on u -> v adds b to v -> u
    linked = (cap > 0) | (cap.T > 0)  # (N, N): an edge either way
    neighbours = [np.flatnonzero(linked[u]).tolist() for u in range(N)]
    total = 0.0
    while True:
        level = [-1] * N
        level[source] = 0
        queue = [source]
        for u in queue:  # breadth-first: the queue grows as it is read
            row, nxt = residual[u], level[u] + 1
            for v in neighbours[u]:
                if level[v] < 0 and row[v] > EPS:
                    level[v] = nxt
                    queue.append(v)
        if level[sink] < 0:
            return total
        arc = [0] * N  # per node, the next neighbour to try in this phase
        while True:
            path = [source]
            while path and path[-1] != sink:
                u = path[-1]
                near, row, nxt = neighbours[u], residual[u], level[u] + 1
                while arc[u] < len(near):
                    v = near[arc[u]]
                    if level[v] == nxt and row[v] > EPS:
                        path.append(v)
                        break
                    arc[u] += 1
                else:  # no way on from u: out of this phase, and back up one step
                    level[u] = -1
                    path.pop()
                    if path:
                        arc[path[-1]] += 1
            if not path:
                break
            edges = list(zip(path, path[1:]))
            bottleneck = min(residual[u][v] for u, v in edges)
            for u, v in edges:
                residual[u][v] -= bottleneck
                residual[v][u] += bottleneck
            total += bottleneck


def flow_graph(attentions: np.ndarray, upto: int | None = None) -> np.ndarray:
    """The (N, N) capacities of the layered graph through layers 0..upto (default: all):
    node l T + t is token t after l layers (l = 0: the input); capacity[(l-1) T + j, l T + i] = Â_l[i, j]."""
    A = np.asarray(attentions, dtype=np.float64)  # (L, h, T, T)
    last = A.shape[0] - 1 if upto is None else upto
    T = A.shape[-1]
    N = (last + 2) * T
    capacity = np.zeros((N, N))
    for layer in range(last + 1):
        a_hat = residual_attention(A[layer])  # (T, T): row i = query i, column j = key j
        capacity[layer * T:(layer + 1) * T, (layer + 1) * T:(layer + 2) * T] = a_hat.T  # edge j -> i
    return capacity


def check_tokens(T: int) -> None:
    if T > MAX_TOKENS:
        raise BadInput(f"--flow takes at most {MAX_TOKENS} tokens (one max-flow per pair), this input has {T}: "
                       "use --rollout")


def check_flow_options(*, head, rollout: bool, explain, show: str, words: bool, hide_special: bool,
                       model_view: bool) -> None:
    """--flow is one matrix through every head of layers 0..layer, token by token: refuse what
    picks a head, another view, or mixes tokens (the table: attncli.rules.option_conflicts)."""
    validate(dict(flow=True, head=head, rollout=rollout, explain=explain, show=show, words=words,
                  hide_special=hide_special, model_view=model_view), "transformer")


def attention_flow(attentions: np.ndarray, upto: int | None = None) -> np.ndarray:
    """(T, T): F[i, j], the maximum flow from input token j to position i after layers 0..upto.

    Each F[i, j] <= 1 (the capacity into (L, i) sums to 1); unlike the rollout a row need not sum to 1."""
    A = np.asarray(attentions, dtype=np.float64)  # (L, h, T, T)
    T = A.shape[-1]
    check_tokens(T)
    capacity = flow_graph(A, upto)  # (N, N)
    N = capacity.shape[0]
    inner = np.arange(T, N - T)  # the nodes between the input and the last layer boundary
    flows = np.zeros((T, T))
    for j in range(T):
        for i in range(T):
            # the other input nodes and the other last-layer nodes carry nothing from j to i: dropped
            keep = np.concatenate([[j], inner, [N - T + i]])
            flows[i, j] = max_flow(capacity[np.ix_(keep, keep)], 0, keep.size - 1)
    return flows
