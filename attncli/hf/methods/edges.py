"""The graph of a decoder's components and its edge-patched forward pass, in NumPy.

Nodes that write the residual stream (upstream, ``U`` of them): the embeddings, every head (its
z times its rows of W_O) and every MLP, in the order they run. Nodes that read it (downstream,
``D`` of them): every head's query, key and value input separately, every MLP's input and the
unembedding's (the logits). An edge u -> v joins a writer to a later reader.

The edge-patched forward (Hanna et al. 2024's circuit evaluation) runs the clean text with every
reader's input made separately:

    input_v = corrupt_stream_v + sum_u w[u, v] (u_run - u_corrupt)                 (T, d)

where u_run is u's output in this pass and corrupt_stream_v the corrupted run's residual stream
where v reads it (its embeddings, every earlier writer's output and the biases). With w = 1 on
every edge this is the clean run, with w = 0 the corrupted one; w = 0 on an edge is that edge
carrying the corrupted run's value (the edge removed from the circuit), and a fractional w its
linear path between the two. Each head reads its own query, key and value inputs (the layer's
input norm applied to each), each MLP its own input. Shapes: T tokens, d width, h heads, d_head a
head's width, L layers.
"""

from __future__ import annotations

import numpy as np

from attncli.errors import BadInput
from attncli.hf.kernels import blas, ops
from attncli.hf.methods.backward import DecoderTape, head_projections
from attncli.numeric import rms_norm, softmax
from attncli.io.textio import visible


def up_names(L: int, h: int) -> list[str]:
    """The U = 1 + L (h + 1) writers: embed, then per layer L{l}H{h} for each head and L{l}MLP."""
    return ["embed"] + [n for l in range(L) for n in [f"L{l}H{x}" for x in range(h)] + [f"L{l}MLP"]]


def down_names(L: int, h: int) -> list[str]:
    """The D = L (3h + 1) + 1 readers: per layer every head's q, then k, then v input, the MLP's, then the logits."""
    return [n for l in range(L) for n in [f"L{l}H{x}.{c}" for c in "qkv" for x in range(h)] + [f"L{l}MLP"]] + ["logits"]


def up_index(l: int, head: int | None, h: int) -> int:
    """A writer's index: layer l's head ``head``, or its MLP (head None)."""
    return 1 + l * (h + 1) + (h if head is None else head)


def down_index(l: int, head: int | None, which: str, h: int) -> int:
    """A reader's index: layer l's head ``head`` input ``which`` (q, k or v), or its MLP (head None)."""
    return l * (3 * h + 1) + (3 * h if head is None else "qkv".index(which) * h + head)


def edge_mask(L: int, h: int) -> np.ndarray:
    """(U, D) bool: which writer u runs before reader v (u -> v is an edge)."""
    mask = np.zeros((1 + L * (h + 1), L * (3 * h + 1) + 1), dtype=bool)
    for l in range(L):
        heads_in = l * (3 * h + 1)
        mask[:1 + l * (h + 1), heads_in:heads_in + 3 * h] = True  # the heads read everything before the layer
        mask[:1 + l * (h + 1) + h, heads_in + 3 * h] = True  # the MLP also reads its own layer's heads
    mask[:, -1] = True
    return mask


def additive(tape: DecoderTape) -> None:
    """BadInput for a family whose heads do not write the stream as a sum (a norm on the attention's
    output, Gemma 3's): the graph's writers would not add up to its residual stream."""
    if tape.parts.extra_norms:
        raise BadInput(f"circuit edges join heads that add their outputs to the residual stream; model "
                       f"'{visible(str(tape.model.name))}' ({tape.model.model_type}) normalises each sublayer's output before its "
                       f"residual add ({', '.join(tape.parts.extra_norms)}), which the graph does not take yet")


def node_outputs(tape: DecoderTape) -> np.ndarray:
    """(U, T, d) every writer's output in a tape's forward (a head's without W_O's bias, which every
    run shares; an MLP's with its own)."""
    additive(tape)
    h, out = tape.arch.heads, [tape.embed]
    with blas.for_rows(tape.embed.shape[0]):  # a sentence: one thread (blas.py)
        for t in tape.layers:
            w_o = t["W"]["o"][0].reshape(h, -1, t["x"].shape[1])  # (h, d_head, d)
            out += list(t["z"].transpose(1, 0, 2) @ w_o)
            out.append(t["post"] - t["mid"])
    return np.stack(out)


def _heads(tape: DecoderTape, l: int, a: np.ndarray) -> np.ndarray:
    """(h, T, d) each head's output from its own normed inputs ``a`` (3h, T, d): q's, k's, v's."""
    W, h, arch = tape.layers[l]["W"], tape.arch.heads, tape.arch
    T = a.shape[1]
    proj = []
    for i, n in enumerate("qkv"):
        kv = h if n == "q" else h // tape.group  # the projection's heads; a key-value head's query heads in a row
        w = head_projections(W[n][0], kv)  # (kv, d, d_head), a view
        y = a[i * h:(i + 1) * h].reshape(kv, -1, a.shape[2]) @ w  # (kv, group T, d_head)
        if W[n][1] is not None:
            y = y + W[n][1].reshape(kv, 1, -1)
        proj.append(y.reshape(h, T, -1))  # (h, T, d_head)
    q, k, v = proj
    if tape.qk_norm:  # each head's q and k through their per-head RMSNorms, before RoPE
        q, k = rms_norm(q, W["q_norm"][0], tape.eps), rms_norm(k, W["k_norm"][0], tape.eps)
    if tape.rope:
        q, k = (ops.rotate(t, *tape.cos_sin[l]) for t in (q, k))
    s = np.where(tape._allowed(l, T), q @ k.swapaxes(-1, -2) * arch.scale(l), -np.inf)  # (h, T, T)
    z = softmax(s) @ v  # (h, T, d_head)
    return z @ W["o"][0].reshape(h, -1, a.shape[2])  # (h, T, d)


def _mlp(tape: DecoderTape, l: int, x: np.ndarray) -> np.ndarray:
    """(T, d) layer l's MLP output (its bias included) on its own input ``x`` (T, d)."""
    W = tape.layers[l]["W"]
    m = tape._norm(W["norm"], x, W["n2"])
    up = m @ W["up"][0] + (W["up"][1] if W["up"][1] is not None else 0.0)
    if W["gate"] is not None:
        gate = m @ W["gate"][0] + (W["gate"][1] if W["gate"][1] is not None else 0.0)
        inner = tape.act(gate) * up
    else:
        inner = tape.act(up)
    return inner @ W["down"][0] + (W["down"][1] if W["down"][1] is not None else 0.0)


def edge_patched_logits(clean: DecoderTape, corrupt: DecoderTape, weights: np.ndarray, position: int,
                        corrupt_outputs: np.ndarray | None = None) -> np.ndarray:
    """(V,) the logits at ``position`` of the edge-patched forward (the module's docstring) with
    edge weights ``weights`` (U, D) (1 kept, 0 removed; entries off the edge mask are ignored), from
    ``clean``'s embeddings; ``corrupt`` is the corrupted text's tape (its streams and outputs)."""
    additive(clean)
    h, L = clean.arch.heads, len(clean.layers)
    corr = node_outputs(corrupt) if corrupt_outputs is None else corrupt_outputs  # (U, T, d)
    w = np.where(edge_mask(L, h), weights, 0.0).astype(corr.dtype)
    with blas.for_rows(3 * h * clean.embed.shape[0]):  # (3h, T, d) the heads' inputs (blas.py's policy)
        diff = np.zeros_like(corr)  # (U, T, d): u_run - u_corrupt, filled as the writers run
        diff[0] = clean.embed - corr[0]
        for l in range(L):
            n, first = 1 + l * (h + 1), l * (3 * h + 1)
            W = corrupt.layers[l]["W"]
            inp = corrupt.layers[l]["x"] + np.tensordot(w[:n, first:first + 3 * h], diff[:n], axes=(0, 0))  # (3h, T, d)
            diff[n:n + h] = _heads(clean, l, clean._norm(W["norm"], inp, W["n1"])) - corr[n:n + h]
            x_mlp = corrupt.layers[l]["mid"] + np.tensordot(w[:n + h, first + 3 * h], diff[:n + h], axes=(0, 0))  # (T, d)
            diff[n + h] = _mlp(clean, l, x_mlp) - corr[n + h]
    final = corrupt.layers[-1]["post"][position] + w[:, -1] @ diff[:, position]  # (d,)
    kind, fw, fb, eps = clean.final
    y = ops.layer_norm(final, fw, fb, eps) if kind == "layer" else rms_norm(final, fw, eps)
    return (clean.unembedding @ y).astype(np.float64)
