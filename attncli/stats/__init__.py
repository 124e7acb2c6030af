"""Head statistics over a corpus: streamed, sharded, resumable and exactly mergeable.

``accumulate`` holds the definitions (sums and counts per head, top examples), ``corpus`` reads
texts from a file, stdin, a folder, a JSONL field or a saved ``datasets`` dataset, ``shards``
writes and checks the shard files, ``runner`` plans and computes the chunks (here, in worker
processes, or on Ray through ``cluster``; ``chunk_work`` is what a worker does with one), ``report`` merges shards and makes the JSON result.

    >>> import numpy as np
    >>> from attncli.stats import Accumulator, add_text
    >>> acc = Accumulator(layers=1, heads=1, top_k=2)
    >>> A = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.25, 0.25, 0.5]]]])  # (L, h, T, T), causal
    >>> add_text(acc, A, text_id=0, tokens=["a", "b", "a"], ids=[1, 2, 1], special=[False] * 3, causal=True)
    True
    >>> {name: round(float(m[0, 0]), 4) for name, m in acc.means().items() if m is not None}
    {'sink': 0.375, 'entropy': 0.9732, 'distance': 0.625, 'previous_token': 0.375, 'duplicate_token': 0.25}
    >>> acc.top("sink", 0, 0)[0]["context"]
    'a [b] a'
"""

from attncli.lazy import exports

__all__, __getattr__, __dir__ = exports(__name__, {
    "STATS": "accumulate",
    "Settings": "accumulate",
    "Accumulator": "accumulate",
    "add_text": "accumulate",
    "add_probe": "accumulate",
    "texts": "corpus",
    "run": "runner",
    "patterns": "chunk_work",
    "merge_shards": "report",
    "document": "report",
})
