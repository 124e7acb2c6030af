"""Watching attention while a language model writes (``attn generate``).

A decoder (the built-in trained LM, or a pretrained causal model from the transformer wing)
writes one token at a time; each step keeps the chosen token, its probability, the runners-up,
and the attention row of the query that chose it. NumPy only for the built-in LM.

    >>> from attncli.generate import Settings, generate, load_decoder
    >>> gen = generate(load_decoder(), "the cat", Settings(n=3, greedy=True))
    >>> gen.tokens[:2], len(gen.steps) <= 3, gen.weights.shape[0] == len(gen.tokens)
    (['the', 'cat'], True, True)
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "Settings": "run",
    "Step": "run",
    "Generation": "run",
    "generate": "run",
    "document": "run",
    "load_decoder": "decoders",
    "BuiltinLM": "decoders",
    "sampling_distribution": "sampling",
    "rollout": "step_view",
    "view_matrix": "step_view",
})
