"""The head map of ``attn explore --transformer`` (key H): every layer x head of a decoder coloured
by one role read from its weights, what ``attn heads --transformer NAME --weights --role ROLE``
draws (attncli.pipeline.heads_compute: its request, compute and result, on the model the app has
loaded), replacing the attention's heatmap. s / S cycle the role (copying, then each head's
strongest Q-, K- and V-composition from an earlier head: q_in, k_in, v_in) without reading the
weights again; H returns. Exported and copied as that command's result (attncli.views.result)."""

from __future__ import annotations

from typing import Any, Optional

from attncli.errors import BadInput
from attncli.pipeline.head_roles import WEIGHT_ROLES
from attncli.pipeline.heads_compute import HeadMapResult, HeadsRequest
from attncli.pipeline.heads_compute import compute as compute_heads

ROLES = WEIGHT_ROLES  # what s / S cycle through
KEYS_LINE = "head map (attn heads --weights): s / S the next / previous role ({roles}); H returns to the attention."


class ExploreHeadMap(HeadMapResult):
    """``attn heads --weights --role ROLE``'s result, with the model it was read from (the app's
    layer and head keys read ``result.model``) and the line saying which keys act on it."""

    model: Any = None

    def notes(self, width: Optional[int] = None) -> list[str]:
        return [*super().notes(width), KEYS_LINE.format(roles=", ".join(ROLES))]


def head_map_request(state) -> HeadsRequest:
    """``attn heads --transformer NAME --weights --role ROLE``'s request of the app's state."""
    return HeadsRequest(transformer=state.transformer, weights=True, role=state.head_map, backend=state.backend,
                        allow_missing_weights=state.allow_missing_weights)


def head_map_refusal(model: Any) -> Optional[str]:
    """Why the head map cannot be read from ``model`` (H says it at once), or None."""
    if model is not None and not model.is_decoder:
        return (f"the head map reads a decoder's heads from their weights (attn heads --weights): "
                f"'{model.name}' ({model.model_type}) is an encoder")
    return None


def compute_head_map(model: Any, state, models: dict) -> ExploreHeadMap:
    """The head map of ``state.head_map``'s role. The weights are read once per model: the
    document is kept in ``models`` (the app's cache, by (name, what)) and each role redraws it."""
    reason = head_map_refusal(model)
    if reason:
        raise BadInput(reason)
    request = head_map_request(state)
    key = (state.transformer, f"heads --weights ({state.backend})")  # beside the models, by (name, backend)
    if key not in models:
        models[key] = compute_heads(HeadsRequest(transformer=state.transformer, weights=True, backend=state.backend),
                                    model).doc
    result = ExploreHeadMap(request, {**models[key], "role": state.head_map})
    result.model = model
    return result
