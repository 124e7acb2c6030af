"""What the contribution views (``attn matrix --transformer M --show alti | globenc | value-zeroing``)
say and how their layers combine: the formula of each method, as ``--json``'s "formula" and the
notes under the heatmap give it, and the rollout of every layer (the interactive page's
"NAME rollout"). The matrices themselves come from attncli.hf.methods.contributions; this wing only reads
arrays. Shapes: L layers, T tokens.

A contribution view is one matrix per layer, not per head: each method measures the whole
attention block's output (every head, the residual, and the norms), so ``--head`` does not apply.
"""

from __future__ import annotations

import numpy as np

from attncli.rules.option_conflicts import CONTRIBUTIONS

FORMULAS = {  # what a cell (i, j) of one layer's matrix is
    "alti": "ALTI (Ferrando et al. 2022): c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), y_i the attention block's "
            "output with the residual (and a post-LN encoder's norm), T_i(x_j) token j's part of it; rows sum to 1",
    "globenc": "GlobEnc (Modarressi et al. 2022): N_ij = ||LN2_i(LN1_i(sum_h A^h_ij f^h(x_j) + delta_ij x_i))||_2, "
               "both norms' linear parts frozen at this input (a pre-norm decoder: no norm); rows sum to 1",
    "value-zeroing": "value zeroing (Mohebbi et al. 2023): d_ij = 1 - cos(x~_i^{-j}, x_i), x~^{-j} the layer's output "
                     "with token j's values zeroed in every head; rows sum to 1",
}
ROLLOUT_FORMULA = "; rolled out over layers 0..L: R = C_L ... C_0 (no identity added: each C_l holds the residual)"
assert tuple(FORMULAS) == CONTRIBUTIONS


def formula(method: str, rollout: bool = False) -> str:
    """The formula of ``method``'s view (rolled out over layers 0..L with ``rollout``)."""
    return FORMULAS[method] + (ROLLOUT_FORMULA if rollout else "")


def rollouts(per_layer: np.ndarray) -> np.ndarray:
    """(L, T, T): R_l = C_l ... C_0 for each l, from the per-layer matrices (L, T, T)."""
    out = np.empty_like(per_layer, dtype=np.float64)
    R = np.eye(per_layer.shape[-1])
    for l, C in enumerate(per_layer):
        R = C @ R  # (T, T)
        out[l] = R
    return out
