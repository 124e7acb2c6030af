"""The fuzzy-key dictionary: a lookup by attention instead of by exact key.

A Python dict answers ``d['colour']`` with a KeyError when the key is ``'color'``. Attention
(Bahdanau et al. 2015; Vaswani et al. 2017, "Attention Is All You Need", section 3.2) compares the
query with *every* key, turns the similarities into weights that sum to 1, and answers with the
values weighted by them::

    similarity_i = (1 - lambda) * cos(c(q), c(k_i)) + lambda * ngram(q, k_i)
    weight_i     = softmax(similarity / T)_i = exp(similarity_i / T) / sum_j exp(similarity_j / T)
    answer       = value of argmax_i weight_i
    soft_value   = sum_i weight_i * value_i      (only when every value attended to is a number)

Shapes: N keys.

* ``c(text)``, the vector of a query or key of one or more words, and the n-gram score are
  defined in ``keyindex.py``: c is the mean of the token unit vectors after removing the
  direction every word shares; ngram is a Dice overlap of character 3-6-grams.
* An exact key behaves like a dict: if the query string *is* a key, that key gets weight 1 and
  every other key 0 (``exact=False`` turns this off and always uses the softmax).
* ``top_k``: only the k keys with the largest similarity are kept; the softmax is taken over
  those k (so their weights sum to 1) and the other keys are dropped from the result.
* Entries are sorted by weight, then similarity, then dictionary order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attncli.errors import BadInput
from attncli.lookup.keyindex import KeyIndex, KeyTokens, check_ngram_weight  # noqa: F401 (re-exported)
from attncli.lookup.params import DEFAULT_TEMPERATURE, NGRAM_WEIGHT
from attncli.numeric import softmax  # lookup.softmax(scores, T): the top score's term is exactly 1
from attncli.io.textio import check_text, read_user_text
from attncli.vectors.model import Vectors


@dataclass(slots=True)
class Entry:
    key: str
    similarity: float
    weight: float
    value: Any
    cosine: float
    ngram: float


@dataclass
class LookupResult:
    """One lookup's answer. The per-key columns are arrays sorted by weight, descending (then
    similarity, then dictionary order); ``entries`` builds objects from them on demand."""

    query: str
    model: str
    temperature: float
    keys: list[str]  # (M,) M = kept keys: N, or k with top_k
    values: list[Any]  # (M,)
    similarity: np.ndarray  # (M,)
    weight: np.ndarray  # (M,)
    cosine: np.ndarray  # (M,)
    ngram: np.ndarray  # (M,)
    soft_value: float | None
    exact: bool  # the query was a key: weight 1 on it, as in a dict
    top_k: int | None = None
    n_keys: int = 0  # keys in the dictionary
    query_tokens: list[str] = field(default_factory=list)

    def head(self, n: int | None = None) -> list[Entry]:
        """The first n entries (all with None)."""
        end = len(self.keys) if n is None else min(n, len(self.keys))
        return [
            Entry(self.keys[i], float(self.similarity[i]), float(self.weight[i]), self.values[i], float(self.cosine[i]), float(self.ngram[i]))
            for i in range(end)
        ]

    @property
    def entries(self) -> list[Entry]:
        return self.head()

    @property
    def best(self) -> Entry:
        return self.head(1)[0]

    def to_json(self) -> dict[str, Any]:
        """The ``attn lookup --json`` document (stable keys, see docs/lookup.md)."""
        best = self.best
        return {
            "query": self.query,
            "model": self.model,
            "temperature": self.temperature,
            "entries": [
                {"key": k, "similarity": s, "weight": w, "value": v}
                for k, s, w, v in zip(self.keys, self.similarity.tolist(), self.weight.tolist(), self.values)
            ],
            "best": {"key": best.key, "value": best.value, "weight": best.weight},
            "soft_value": self.soft_value,
        }


# ---------------------------------------------------------------- dictionaries


def parse_dictionary(text: str, source: str = "the dictionary") -> dict[str, Any]:
    """A JSON object from ``text``; BadInput saying where it is wrong."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON (use null or a finite number)")

    if not text.strip():  # an empty file or an empty standard input: say so, not "not valid JSON"
        raise BadInput(f"{source} is empty: a lookup needs at least one key")
    try:
        obj = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except ValueError as exc:  # NaN / Infinity, or a number too deep/large to parse
        raise BadInput(f"{source} is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadInput(f"{source} is nested too deeply to read") from None
    if not isinstance(obj, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(obj), "a number")
        raise BadInput(f'{source} must be a JSON object {{"key": value, ...}}, got {kind}')
    if not obj:
        raise BadInput(f"{source} is empty: a lookup needs at least one key")
    _check_json_values(obj, source)
    return obj


MAX_DEPTH = 100  # nesting of a dictionary's values: far below the JSON encoder's recursion limit


def _check_json_values(obj: Any, source: str) -> None:
    """Every string valid Unicode and every number finite (1e400 parses to inf), so the answer
    can be printed and written as strict JSON; iterative, any nesting depth."""
    stack = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadInput(f"{source} is nested more than {MAX_DEPTH} levels deep: attn reads at most {MAX_DEPTH} "
                           "(values are shown and written back as JSON)")
        if isinstance(item, dict):
            for key, value in item.items():
                check_text(key, f"a key of {source}")
                stack.append((value, depth + 1))
        elif isinstance(item, list):
            stack.extend((x, depth + 1) for x in item)
        elif isinstance(item, str):
            check_text(item, f"a value of {source}")
        elif isinstance(item, float) and not math.isfinite(item):
            raise BadInput(f"{source} has a number too large for a float (it reads as infinity): "
                           "write it as a string, or scale it down")


def read_dictionary(path: str | Path) -> dict[str, Any]:
    """Read a JSON object from a file, or from stdin when ``path`` is ``-``."""
    source = "the dictionary on stdin" if str(path) == "-" else f"dictionary file {str(path)!r}"
    text = read_user_text(path, "dictionary file", hint="give a UTF-8 JSON object")
    return parse_dictionary(text, source)


# ---------------------------------------------------------------- scoring


def check_temperature(temperature: float) -> float:
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise BadInput(f"--temperature must be a number > 0, got {temperature}")
    return float(temperature)


# ---------------------------------------------------------------- lookup


def soft_value(values: list[Any], weights: np.ndarray) -> float | None:
    """sum_i w_i * v_i over the entries with weight > 0; None unless all of those are numbers.

    JSON booleans are not numbers here. A weight that underflowed to exactly 0 contributes
    nothing, so its value is not looked at.
    """
    weights = np.asarray(weights, dtype=np.float64)
    attended = np.flatnonzero(weights > 0)
    picked = [values[i] for i in attended.tolist()]
    if not all(type(v) in (int, float) for v in picked):  # bool, str, None, list, dict, subclasses: no
        return None
    try:
        numbers = np.array(picked, dtype=np.float64)  # (m,)
    except OverflowError:  # an integer beyond float range
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # 1e308-sized values may overflow: no warning, None
        total = float(weights[attended] @ numbers)
    return total if math.isfinite(total) else None


def exact_key(query: str, dictionary: dict[str, Any], index: KeyTokens, *, exact: bool = True) -> bool:
    """Whether ``query`` is looked up as an exact key (like a dict). Otherwise attention needs a
    vector for every key: the index's error for a key without one is raised here."""
    is_exact = exact and query in dictionary
    if index.missing_error is not None and not is_exact:
        raise index.missing_error
    return is_exact


def lookup(
    query: str,
    dictionary: dict[str, Any],
    vectors: Vectors | None,
    *,
    temperature: float = DEFAULT_TEMPERATURE,
    top_k: int | None = None,
    exact: bool = True,
    ngram_weight: float = NGRAM_WEIGHT,
    index: KeyTokens | None = None,
) -> LookupResult:
    """Attend over ``dictionary``'s keys with ``query``; ``index`` reuses embedded keys (batch),
    and may be a sentence encoder's ``EncoderIndex`` (then ``vectors`` is None)."""
    temperature = check_temperature(temperature)
    if top_k is not None and (isinstance(top_k, bool) or top_k <= 0):
        raise BadInput(f"--top-k must be at least 1, got {top_k}")
    if not query or not query.strip():
        raise BadInput("the query is empty: give a word or phrase to look up")
    keys = list(dictionary)
    if not keys:
        raise BadInput("the dictionary is empty: a lookup needs at least one key")
    index = index or KeyIndex(vectors, keys, ngram_weight=ngram_weight)
    is_exact = exact_key(query, dictionary, index, exact=exact)
    tokens, cosine, ngram, similarity = index.score(query, allow_no_vector=is_exact)
    n = len(keys)
    keep = np.arange(n)
    if top_k is not None and top_k < n:
        keep = np.argpartition(-similarity, top_k - 1)[:top_k]
    if is_exact:
        hit = keys.index(query)
        if hit not in keep:  # a dict always finds its key: it replaces the k-th most similar
            keep = np.append(keep[np.argsort(-similarity[keep], kind="stable")][:-1], hit)
        weights = (keep == hit).astype(np.float64)
    else:
        weights = softmax(similarity[keep].astype(np.float64), temperature)
    order = np.lexsort((keep, -similarity[keep], -weights))  # weight desc, similarity desc, dict order
    rows = keep[order]
    weights = weights[order]
    sorted_keys = [keys[i] for i in rows.tolist()]
    values = [dictionary[k] for k in sorted_keys]
    return LookupResult(
        query=query,
        model=index.name,
        temperature=temperature,
        keys=sorted_keys,
        values=values,
        similarity=similarity[rows].astype(np.float64),
        weight=weights,
        cosine=cosine[rows].astype(np.float64),
        ngram=ngram[rows].astype(np.float64),
        soft_value=soft_value(values, weights),
        exact=is_exact,
        top_k=top_k,
        n_keys=n,
        query_tokens=tokens,
    )


def read_queries(path: str | Path) -> list[tuple[int, str]]:
    """(line number, query) for each non-blank line of a file, or of stdin for ``-``."""
    # split on newlines only: str.splitlines also breaks at form feeds, U+2028 and the like,
    # which would make the line numbers in messages disagree with an editor's
    lines = read_user_text(path, "queries file", hint="give one query per line").split("\n")
    out = [(i, line.strip()) for i, line in enumerate(lines, start=1) if line.strip()]
    if not out:
        raise BadInput("no query to look up: the queries input has no non-blank line")
    return out

