"""The learned attention: a small causal transformer language model over the word vectors,
trained with torch (``train``) and run in NumPy (``model``), its Brown data, and the
classification of its heads.

    >>> from attncli.tinylm import load_trained
    >>> att = load_trained()
    >>> att.config["layers"], att.config["heads"]
    (2, 4)
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "TrainedAttention": "model",
    "load_trained": "model",
    "has_trained": "checkpoint",
    "score_heads": "heads",
    "TrainConfig": "train_config",
    "train_attention": "train:train",
})
