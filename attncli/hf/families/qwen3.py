"""Qwen3's forward pass in NumPy, step for step as transformers' ``modeling_qwen3.py``: Llama's
(llama.py) with a per-head RMSNorm on the queries and the keys.

    embeddings  x = embed_tokens[ids]
    per layer   a = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w
                q, k, v = q_proj(a), k_proj(a), v_proj(a)     (B, T, h d_head), (B, T, h_kv d_head) x 2
                q, k = q_norm(q), k_norm(k)                   per head, over d_head: weights (d_head,)
                q, k = RoPE(q), RoPE(k)
                A = softmax(q k^T / sqrt(d_head) + mask)      causal; a sliding window on the layers
                                                               layer_types marks sliding_attention
                x = x + o_proj(concat_heads(A v))
                x = x + down_proj(silu(gate_proj(m)) * up_proj(m)),  m = RMSNorm(x)
    last        h = RMSNorm(x); logits = h lm_head^T (embed_tokens when tied and no lm_head is stored)

Its config (Qwen3Config): head_dim its own field (128), not hidden_size / heads; biases on q, k,
v and o only with attention_bias (false), none on the MLP; sliding windows only with
use_sliding_window, on the layers layer_types marks (by default those from max_window_layers on).
Shapes as llama.py's.
"""

from __future__ import annotations

from attncli.hf.checks.config_defaults import DERIVED
from attncli.hf.families import llama
from attncli.hf.families.llama import ANCHORS, DTYPE, OPTIONAL, UNUSED_OK, Llama  # noqa: F401 - the family protocol
from attncli.hf.families.llama_config import Variant
from attncli.hf.families.parts import Parts
from attncli.hf.formats.weights import Weights

MODEL_TYPES = {"qwen3"}
DEFAULTS = dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=32, head_dim=128, hidden_act="silu",
                max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
                use_sliding_window=False, sliding_window=4096, max_window_layers=28, layer_types=DERIVED)
QWEN3 = Variant(windows="layer_types", bias_flags=("attention_bias",), qk_norm=True, defaults=DEFAULTS,
                nullable=frozenset({"num_key_value_heads", "sliding_window", "layer_types"}))


def unsupported(config: dict) -> str | None:
    return llama.unsupported(config, QWEN3)


def parts(config: dict) -> Parts:
    """Llama's description with q_norm and k_norm (families/parts.py)."""
    return llama.parts(config, QWEN3)


def expected(config: dict) -> dict[str, tuple[int | None, ...]]:
    return llama.expected(config, QWEN3)


class Qwen3(Llama):
    def __init__(self, weights: Weights, config: dict):
        super().__init__(weights, config, QWEN3)
