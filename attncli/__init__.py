"""attn: a command-line attention explorer.

The importable core lives in the submodules (``tokenize``, ``store``, ``vectors``, ``corpus``,
``train``, ``evaluate``, ``lookup``, ``attention``, ``matrix``, ``render`` ...); ``cli`` is a thin
Typer layer over them. Nothing here imports torch, gensim or nltk.
"""

__version__ = "0.1.0"
