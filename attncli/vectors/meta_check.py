"""What is wrong with a model's meta.json: the fields the loaders and ``attn models`` use, their
types and ranges, checked without touching a file (``store.validate_meta`` raises on the answer)."""

from __future__ import annotations

import math
from typing import Any


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) and math.isfinite(x)


def _shown(d: dict[str, Any], key: str) -> str:
    return repr(d[key]) if key in d else "missing"


MAX_DIM = 65_536  # far above any word-vector model's width
MAX_ROWS = 2**31  # vocabulary words, n-gram buckets
MAX_NGRAM = 64  # characters of a fastText n-gram


def meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with the fields of a meta.json the loaders and ``attn models`` use, or None."""
    version = meta.get("format_version", 0)
    if not is_int(version) or version < 0:
        return f"format_version is {version!r}, not a version number"
    for key, low, high in (("dim", 1, MAX_DIM), ("vocab_size", 0, MAX_ROWS)):
        if not is_int(meta.get(key)) or not low <= meta[key] <= high:
            return f"{key} is {_shown(meta, key)}, not a whole number in [{low}, {high:,}]"
    sub = meta.get("subword")
    if sub is not None:
        if not isinstance(sub, dict):
            return f"subword is {sub!r}, not null or {{min_n, max_n, bucket}}"
        for key, high in (("min_n", MAX_NGRAM), ("max_n", MAX_NGRAM), ("bucket", MAX_ROWS)):
            if not is_int(sub.get(key)) or not 1 <= sub[key] <= high:
                return f"subword.{key} is {_shown(sub, key)}, not a whole number in [1, {high:,}]"
        if sub["min_n"] > sub["max_n"]:
            return f"subword.min_n {sub['min_n']} is above subword.max_n {sub['max_n']}"
    for key in ("name", "dtype", "algorithm", "created", "corpus_label"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"{key} is {meta[key]!r}, not a string"
    corpus = meta.get("corpus")
    if corpus is not None and not isinstance(corpus, (str, dict)):
        return f"corpus is {corpus!r}, not a string or an object"
    evaluation = meta.get("evaluation")
    if evaluation is not None:
        if not isinstance(evaluation, dict):
            return f"evaluation is {evaluation!r}, not an object"
        for bench, figures in evaluation.items():
            if figures is not None and not isinstance(figures, dict):
                return f"evaluation.{bench} is {figures!r}, not an object"
            for key, value in (figures or {}).items():
                if value is not None and not _is_number(value):
                    return f"evaluation.{bench}.{key} is {value!r}, not a number"
    attention = meta.get("attention")
    if attention is not None and not isinstance(attention, dict):
        return f"attention is {attention!r}, not an object"
    return None
