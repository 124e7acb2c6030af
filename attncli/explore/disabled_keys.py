"""The keys of ``attn explore`` that are disabled: the transformer view's keys the options table
refuses (a key that would make a state :mod:`attncli.rules.option_conflicts` refuses: u with --head and
--flow on, r with a head picked, M with --rollout on, ...), shown disabled in the footer, and R and
E (attn patch, attn attribute) without --corrupt, left out of it (attncli.explore.keys.CORRUPT_FOOTER).
Each says why (and what enables it) when pressed, instead of failing after the forward pass. Plain
data, no Textual: tested without a terminal.
"""

from __future__ import annotations

from typing import Any, Optional

from attncli.explore.drawing import CAUSAL_VIEWS
from attncli.rules.option_conflicts import refusal, validate

NEEDS_CORRUPT = ("patch", "attribute")  # the causal views of two texts: attn explore CLEAN --corrupt CORRUPT


def corrupt_refusal(kind: str) -> str:
    """What R and E (``kind``: "patch", "attribute") say without --corrupt: how to enable them."""
    command = "attn patch" if kind == "patch" else "attn attribute"
    return (f"{CAUSAL_VIEWS[kind][0]} draws {command}'s grid of the sentence against a corrupted text: start "
            "with attn explore TEXT --corrupt CORRUPTED_TEXT (as many tokens as TEXT)")


def state_options(state) -> dict[str, Any]:
    """The options of ``attn matrix --transformer`` that ``state`` (an ExploreState) stands for. The
    app keeps --layers for the next M while the ordinary view is on: only the model view uses it."""
    return dict(pair=state.pair, filter=state.filter, rollout=state.rollout, layer=state.layer, head=state.head,
                model_view=state.model_view, layers=state.layers if state.model_view else None, words=state.words,
                hide_special=state.hide_special, show=state.contribution or ("norms" if state.norms else "weights"), flow=state.flow,
                backend=state.backend, rows=state.rows, top_k=state.top_k, pool=state.pool)


def check(state) -> None:
    """BadInput: the first row of the table that refuses ``state`` (the refusals that need no model)."""
    validate(state_options(state), "explore")


def next_state(state, action: str, params: tuple, *, heads: Optional[int], layers: Optional[int],
               in_model_view: bool):
    """The state a key of the transformer's view makes (None: not one the table can refuse)."""
    if state.transformer is None:
        return None
    if action == "flag" and params:
        return state.toggle(params[0])
    if action == "filter" and params:
        return state.next_filter(params[0])
    if action == "head" and params and heads and not in_model_view:
        return state.step_head(params[0], heads)
    if action == "model_view" and layers and not state.model_view:
        return state.enter_model_view(layers - 1 if state.layer is None else state.layer)
    return None


def key_refusal(state, action: str, params: tuple, *, heads: Optional[int] = None, layers: Optional[int] = None,
                in_model_view: bool = False) -> Optional[str]:
    """Why the key (``action`` with ``params``) is disabled in ``state``, or None: R and E without
    --corrupt; a key to a state the table refuses. A state that is refused already (it cannot come
    from the keys) leaves every key on, as it was."""
    if action == "causal_test" and params and params[0] in NEEDS_CORRUPT and state.corrupt is None:
        return corrupt_refusal(str(params[0]))
    new = next_state(state, action, params, heads=heads, layers=layers, in_model_view=in_model_view)
    if new is None or refusal(state_options(state), "explore") is not None:
        return None
    return refusal(state_options(new), "explore")
