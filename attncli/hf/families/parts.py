"""A family's parts as the methods read them (gradients, contributions, QK attribution, circuit
edges): a written description, made by each family file's ``parts(config)`` and held by its pass
as ``arch.parts``, so a method asks "the norm before attention" of the description, never of the
family's class.

    norm          "layer" (LayerNorm: weight and bias) or "rms" (RMSNorm: weight)
    place         "pre": a norm before each sublayer, the stream a plain sum (GPT-2, Llama);
                  "post": a norm after each residual add (BERT's family, DistilBERT, MPNet)
    norm_offset   an RMSNorm's weight applied as offset + w (Gemma: 1)
    qk_norm       None, or "rms": q and k each RMS-normed per head over d_head (its weight (d_head,)),
                  before RoPE (Qwen3, Gemma 3)
    position      "absolute" (added to the embeddings), "rotary" (RoPE on q and k; ``inv_freq`` per
                  layer) or "relative" (a bias added to the scores: MPNet)
    windows       per layer, the sliding window (a query sees keys less than w positions back) or None
    logit_cap     None, or c: the logits are c tanh(raw / c) (final_logit_softcapping: Gemma 3 where set)
    roles         layer l's weights by role, each a Tensor (its name with "{l}", its stored shape,
                  its bias, its share of a fused tensor):
                      n1, n2                 the norms before (pre) or after (post) attention and the MLP
                      q, k, v, o             the attention's projections
                      gate, up, down         the MLP's (gate only in a gated MLP)
                      q_norm, k_norm         the per-head norms of q and k (qk_norm)
                      attn_out_norm, mlp_out_norm   a norm on a sublayer's output before its residual
                                             add (Gemma 3's post-attention and post-feedforward norms)

Biases and fused projections are the roles' (Tensor.bias, Tensor.out). Shapes: d width, h heads,
h_kv key-value heads, d_head a head's width, I the MLP's width.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

NORM_ROLES = ("n1", "n2", "q_norm", "k_norm", "attn_out_norm", "mlp_out_norm")
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")
EXTRA_NORMS = ("attn_out_norm", "mlp_out_norm")


@dataclass(frozen=True)
class Tensor:
    """Where a role's weights are stored: ``name`` without ".weight" / ".bias" ("{l}" for the layer),
    the stored weight's ``shape`` (a Linear's (out, in), a Conv1D's (in, out), a norm's (n,); None
    for a size the config does not state), ``bias`` (a ".bias" beside it), ``conv1d`` (stored
    (in, out), as GPT-2's), ``out`` ([start, stop) of the outputs: this role's share of a fused
    tensor, as Phi-3's qkv_proj or GPT-2's c_attn)."""

    name: str
    shape: tuple[int | None, ...]
    bias: bool = False
    conv1d: bool = False
    out: tuple[int, int] | None = None

    def at(self, l: int) -> str:
        return self.name.format(l=l)


@dataclass(frozen=True, eq=False)
class Parts:
    """The description (see the module docstring); compared by identity (it holds arrays)."""

    layers: int
    heads: int
    kv_heads: int
    d_head: int
    norm: str  # "layer" | "rms"
    place: str  # "pre" | "post"
    eps: float
    roles: Mapping[str, Tensor]
    norm_offset: float = 0.0
    qk_norm: str | None = None
    position: str = "absolute"  # "absolute" | "rotary" | "relative"
    inv_freq: tuple[np.ndarray, ...] = ()  # rotary: per layer, (rotary_dim / 2,) float64
    windows: tuple[int | None, ...] = field(default=())
    logit_cap: float | None = None

    @property
    def group(self) -> int:
        """Query heads per key-value head (grouped-query attention; 1 without)."""
        return self.heads // self.kv_heads

    def kv_head(self, head: int) -> int:
        return head // self.group

    @property
    def gated(self) -> bool:
        return "gate" in self.roles

    @property
    def extra_norms(self) -> tuple[str, ...]:
        """The sublayer-output norms this family has (none but Gemma 3's)."""
        return tuple(r for r in EXTRA_NORMS if r in self.roles)

    def window(self, l: int) -> int | None:
        return self.windows[l] if self.windows else None


def shapes(roles: Mapping[str, Tensor], layers: int) -> dict[str, tuple[int | None, ...]]:
    """Every layer tensor the roles name, with its stored shape: ``expected``'s layer part."""
    out: dict[str, tuple[int | None, ...]] = {}
    for l in range(layers):
        for t in roles.values():
            out[t.at(l) + ".weight"] = t.shape
            if t.bias:
                out[t.at(l) + ".bias"] = (t.shape[-1] if t.conv1d else t.shape[0],)  # (out,)
    return out
