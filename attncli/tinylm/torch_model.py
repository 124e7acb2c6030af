"""The torch twin of ``model.py``'s NumPy forward pass, the model ``train.py`` trains: frozen word
vectors -> W_in + sinusoidal positions -> L pre-LayerNorm blocks (torch's own
``nn.MultiheadAttention``) -> LN -> logits over the output vocabulary. torch is imported only
inside the functions. Its parameter names are the stored weights' names (``checkpoint.expected_shapes``).

Shapes: B sentences in a batch, T tokens, d width, h heads, U input tokens, V_out output vocabulary size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncli.tinylm.model import sinusoidal_positions
from attncli.tinylm.train_config import TrainConfig


def _model_class():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int, h: int, d_ff: int, dropout: float):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, h, dropout=dropout, batch_first=True)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(approximate="tanh"), nn.Linear(d_ff, d))
            self.drop = nn.Dropout(dropout)

        def forward(self, x, mask, need_weights: bool = False):
            a = self.ln1(x)  # (B, T, d)
            y, w = self.attn(a, a, a, attn_mask=mask, need_weights=need_weights,
                             average_attn_weights=False, is_causal=not need_weights)  # (B, T, d), (B, h, T, T)
            x = x + self.drop(y)
            x = x + self.drop(self.mlp(self.ln2(x)))
            return x, w

    class CausalLM(nn.Module):
        """Frozen word vectors -> W_in + positions -> L blocks -> LN -> logits over V_out."""

        def __init__(self, table, d: int, layers: int, heads: int, d_ff: int, n_out: int, dropout: float, max_len: int):
            super().__init__()
            self.register_buffer("table", torch.as_tensor(table), persistent=False)  # (U, d) frozen
            self.register_buffer("pe", torch.as_tensor(sinusoidal_positions(max_len, d)), persistent=False)
            self.input = nn.Linear(table.shape[1], d)
            self.blocks = nn.ModuleList(Block(d, heads, d_ff, dropout) for _ in range(layers))
            self.final_ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_out)
            self.drop = nn.Dropout(dropout)

        def forward(self, ids, need_weights: bool = False):
            T = ids.shape[1]
            x = self.drop(self.input(self.table[ids]) + self.pe[:T])  # (B, T, d)
            mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)  # (T, T)
            all_w = []
            for block in self.blocks:
                x, w = block(x, mask, need_weights)
                all_w.append(w)
            logits = self.head(self.final_ln(x))  # (B, T, V_out)
            return (logits, all_w) if need_weights else logits

    return CausalLM


def build_model(table: np.ndarray, cfg: TrainConfig, n_out: int, max_len: int):
    d = table.shape[1]
    return _model_class()(table, d, cfg.layers, cfg.heads, cfg.d_ff_mult * d, n_out, cfg.dropout, max_len)


def model_from_weights(table: np.ndarray, config: dict[str, Any], weights: dict[str, np.ndarray], max_len: int = 512):
    """A torch model carrying stored weights (the tests' reference for the NumPy path)."""
    import torch

    cfg = TrainConfig(layers=config["layers"], heads=config["heads"], d_ff_mult=config["d_ff"] // config["d_model"])
    model = build_model(table, cfg, config["output_vocab_size"], max_len)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()}, strict=True)
    return model.eval()
