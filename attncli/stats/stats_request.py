"""What ``attn stats`` and ``attn stats merge`` ask for: :class:`StatsRequest` and
:class:`MergeRequest`, frozen, built the same way by the command line and Python and handed to
attncli.pipeline.compute_stats / compute_merge (request -> result).

:meth:`StatsRequest.check` refuses what needs no model nor corpus: the table of
attncli.rules.option_conflicts (its "stats" rows) and each number's bounds (:data:`LIMITS`).

    >>> from attncli.stats.stats_request import StatsRequest
    >>> StatsRequest("corpus.txt", transformer="gpt2").check()
    >>> StatsRequest("corpus.txt", transformer="gpt2", top_k=0).check()
    Traceback (most recent call last):
    ...
    attncli.errors.BadInput: --top-k must be between 1 and 100 (got 0)
    >>> StatsRequest("corpus.txt", transformer="gpt2", top_k=7, seed=3).options()[:3]
    [('--transformer', 'gpt2'), ('--field', None), ('--split', None)]
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional, Union

from attncli.errors import BadInput
from attncli.rules.option_conflicts import validate
from attncli.stats.cluster import host_port

LIMITS = {"max_texts": (1, 10**12), "max_tokens": (1, 10**15), "shard_texts": (1, 100_000), "workers": (1, 256),
          "top_k": (1, 100), "probe_every": (1, 10**9), "probe_length": (2, 4096), "seed": (0, 2**32 - 1),
          "batch_size": (1, 256)}  # field -> (lowest, highest) allowed


@dataclass(frozen=True)
class StatsRequest:
    """``attn stats CORPUS``: per-head statistics of a pretrained model over a corpus."""

    corpus: str  # a text file (one text a line), - for stdin, a folder of .txt files, a JSONL file or a saved dataset
    transformer: Optional[str] = None  # a hub id or a directory
    field: Optional[str] = None  # the text's field of a JSONL file or dataset (None: text)
    split: Optional[str] = None  # a saved DatasetDict's split (None: train)
    max_texts: Optional[int] = None
    max_tokens: Optional[int] = None
    out: Optional[Union[str, Path]] = None  # a folder of shards; a run started again resumes
    shard_texts: int = 64
    workers: int = 1
    ray: Optional[str] = None  # a Ray cluster's address
    top_k: int = 5
    probe_every: int = 4
    probe_length: int = 20
    seed: int = 0
    batch_size: int = 8
    precision: Optional[str] = None  # float32 (None) or float64: the NumPy pass's weights
    backend: str = "auto"
    allow_missing_weights: bool = False

    command = "stats run"

    def check(self, **surface: Any) -> None:
        """The refusals that need no model nor corpus (BadInput, exit 2). ``surface``: the options
        of the surface that asked (``json_out``, ``explore``), for the table's rows about them."""
        validate({**{f.name: getattr(self, f.name) for f in fields(self)}, **surface}, "stats")
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            if value is not None and not lo <= value <= hi:
                raise BadInput(f"--{name.replace('_', '-')} must be between {lo:,} and {hi:,} (got {value})")
        if self.ray is not None:
            host_port(self.ray)

    def positionals(self) -> list[str]:
        return [self.corpus]

    def options(self) -> list[tuple[str, Any]]:
        """(flag, value) of each option that says the statistics (a default left out; --out, --workers,
        --ray, --shard-texts and --batch-size say where and how they ran, not what they are)."""
        return [("--transformer", self.transformer), ("--field", self.field), ("--split", self.split),
                ("--max-texts", self.max_texts), ("--max-tokens", self.max_tokens),
                ("--top-k", self.top_k if self.top_k != 5 else None),
                ("--probe-every", self.probe_every if self.probe_every != 4 else None),
                ("--probe-length", self.probe_length if self.probe_length != 20 else None), ("--seed", self.seed or None),
                ("--precision", self.precision), ("--backend", None if self.backend == "auto" else self.backend),
                ("--allow-missing-weights", self.allow_missing_weights)]


@dataclass(frozen=True)
class MergeRequest:
    """``attn stats merge DIR...``: the shards of several runs or machines, merged exactly."""

    folders: tuple[Union[str, Path], ...]  # folders written by ``attn stats --out`` (or shard files)
    skip_damaged: bool = False  # --skip-damaged: merge without a damaged shard (named, counted) instead of failing

    command = "stats merge"

    def check(self, **surface: Any) -> None:
        validate({"folders": self.folders, **surface}, "merge")

    def positionals(self) -> list[str]:
        return [str(f) for f in self.folders]

    def options(self) -> list[tuple[str, Any]]:
        return [("--skip-damaged", self.skip_damaged)]
