"""Causal tests on one traced forward pass (attncli/transformer/trace.py): ablate a head and watch
the prediction move (``ablate``), copy activations from a clean input into a corrupted one and see
how much of the behaviour comes back (``patch``), and split a logit into each head's and each MLP's
direct part (``dla``). The grids run on any model with ``trace``: batched on attn's own NumPy passes
(the fast path), one resumed trace per intervention on the torch backend; DLA on the NumPy pass
only. The CLI is attncli/cli/causal.py."""
