"""Causal tests on one traced forward pass (attncli/model/trace.py): ablate a head and watch
the prediction move (``ablate``), copy activations from a clean input into a corrupted one and see
how much of the behaviour comes back (``patch``), and split a logit into each head's and each MLP's
direct part (``dla``). The grids run on any model with ``trace``: batched on attn's own NumPy passes
(the fast path), one resumed trace per intervention on the torch backend; DLA on the NumPy pass
only. What each command asks for is a request (``causal_request``: AblateRequest, PatchRequest,
DlaRequest), which attncli.pipeline.compute_causal turns into its result; the CLI is
attncli/cli/causal.py.

    >>> import numpy as np
    >>> from attncli.causal import Target, ablate, patch, dla    # ablate(model, ids, target) -> Grid
    >>> t = Target(position=2, token=1, label="b")               # log p(b) at position 2
    >>> round(float(t.metric(np.log([0.25, 0.5, 0.25]))), 4)     # the quantity every grid moves
    -0.6931
    >>> c = Target(position=2, token=1, label="b", contrast=0, contrast_label="a")
    >>> float(c.metric(np.array([1.0, 3.0, 0.0])))               # logit(b) - logit(a)
    2.0
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "Target": "target",
    "resolve": "target",
    "Grid": "grids",
    "check_traced": "grids",
    "ablate": "grids",
    "patch": "grids",
    "head_means": "grids",
    "dla": "dla",
    "AblateRequest": "causal_request",
    "PatchRequest": "causal_request",
    "DlaRequest": "causal_request",
})
