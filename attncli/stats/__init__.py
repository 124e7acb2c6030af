"""Head statistics over a corpus: streamed, sharded, resumable and exactly mergeable.

    >>> from attncli.stats.accumulate import STATS
    >>> STATS
    ('sink', 'entropy', 'distance', 'previous_token', 'duplicate_token', 'induction')

``accumulate`` holds the definitions (sums and counts per head, top examples), ``corpus`` reads
texts from a file, stdin, a folder, a JSONL field or a saved ``datasets`` dataset, ``shards``
writes and checks the shard files, ``runner`` plans and computes the chunks (here, in worker
processes, or on Ray through ``cluster``), ``report`` merges shards and makes the JSON result.
"""
