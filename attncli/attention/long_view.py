"""Views of a long text: some query rows (``--rows``), each row's strongest keys (``--top-k``), or
attention between spans of tokens (``--pool``). Pure NumPy over plain arrays and an encoding read
by duck typing (``tokens``, ``word_ids``, ``words``, ``segments``, ``special``, ``text``, ``pair``:
attncli.hf.text.encoding.Encoding; this wing never imports it).

Shapes: ``T`` input tokens, ``R`` rows shown, ``C`` columns shown, ``k`` matrices (a layer's ``h``
heads, or one), ``K`` keys kept per row, ``P`` query spans, ``Q`` key spans. Positions are input
positions, 0-based, special tokens included, as everywhere in attn.

    --rows N          the row of token N
    --rows A:B        tokens A..B-1 (a slice: B excluded, either end may be left out, B cut at the end)
    --rows A-B        tokens A..B, both included (as --layers A-B)
    --rows last:N     the last N tokens (the whole text when it is shorter)
    --rows word:TEXT  every piece of every occurrence of the word TEXT (case-insensitive)

    --top-k K         each row's K strongest keys, largest first (ties: the earlier key first), and
                      "other" = the sum of the row's remaining keys, so keys + other = the row
    --pool sentence|line|N
                      P[a, b] = mean over the shown queries i of span a of
                                sum over the shown keys j of span b of A[i, j]
                      (a row of P sums to what a row of A sums to: 1 for attention weights)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from attncli.rules import limits
from attncli.errors import BadInput
from attncli.attention.document import Rows

ROWS_FORMS = "N, A:B (B excluded), A-B (both included), last:N or word:TEXT"
POOLS = ("sentence", "line")
MAX_TOP_K = 64  # a row's keys shown by --top-k: more is what --json and --rows are for
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*$")


@dataclass(frozen=True)
class LongSpec:
    """The long-text options of a view, as given: ``rows`` (a --rows SPEC), ``top_k``, ``pool``."""

    rows: Optional[str] = None
    top_k: Optional[int] = None
    pool: Optional[str] = None

    def __bool__(self) -> bool:
        return any(x is not None for x in (self.rows, self.top_k, self.pool))


def check_spec(spec: LongSpec) -> None:
    """What can be refused before the model is loaded (exit 2)."""
    if spec.top_k is not None and spec.pool is not None:
        raise BadInput("--top-k and --pool are two views of the keys: give one of them")
    if spec.top_k is not None and not 1 <= spec.top_k <= MAX_TOP_K:
        raise BadInput(f"--top-k must be between 1 and {MAX_TOP_K} (got {spec.top_k}); every key is in --json")
    if spec.pool is not None:
        parse_pool(spec.pool)
    if spec.rows is not None:
        _parse_rows(spec.rows)


def rows_note(spec: str, positions: np.ndarray, T: int, *, computed: bool) -> str:
    """What --rows picked, for the view's notes."""
    shown = len(positions)
    return (f"--rows {spec}: {shown} of the text's {T} rows" + (" (only these were computed)" if computed else ""))


def rows_only(*, rollout: bool, flow: bool, explain: bool, page: bool, show: str) -> bool:
    """Whether a view of some --rows can run a pass that keeps only those rows: not the rollout or
    the flow (they multiply whole layers), --explain, the --html page (every row), norms or a
    contribution method (each row reads every token's output)."""
    return not (rollout or flow or explain or page or show not in ("weights", "scores"))


def parse_pool(text: str) -> str | int:
    """'sentence', 'line' or a chunk size N >= 1."""
    t = text.strip().lower()
    if t in POOLS:
        return t
    if not re.fullmatch(r"[+-]?\d+", t):
        raise BadInput(f"--pool {text!r}: expected sentence, line or a chunk size N (tokens), e.g. --pool 32")
    return limits.whole_number("--pool", t, 1, limits.MACHINE_INT)  # the one rule for numbers (attncli/rules/limits.py)


def _int(text: str, spec: str) -> int:
    if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
        raise BadInput(f"--rows {spec!r}: expected {ROWS_FORMS}")
    return limits.whole_number("--rows", text, -limits.MACHINE_INT, limits.MACHINE_INT)


def _parse_rows(spec: str) -> tuple[str, Any]:
    """The form of a --rows SPEC: ('word', text), ('last', n) or ('range', (start, end or None))."""
    s = spec.strip()
    head, sep, rest = s.partition(":")
    if sep and head.lower() == "word":
        if not rest.strip():
            raise BadInput(f"--rows {spec!r}: give the word, e.g. --rows word:bank")
        return "word", rest.strip()
    if sep and head.lower() == "last":
        n = _int(rest, spec)
        if n < 1:
            raise BadInput(f"--rows {spec!r}: last:N takes N >= 1 rows")
        return "last", n
    if sep:
        lo = _int(head, spec) if head.strip() else 0
        hi = _int(rest, spec) if rest.strip() else None
        if lo < 0 or (hi is not None and hi <= lo):
            raise BadInput(f"--rows {spec!r}: expected 0 <= A < B in A:B (B excluded)")
        return "range", (lo, hi)
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", s)
    if m:
        lo, hi = _int(m.group(1), spec), _int(m.group(2), spec)
        if hi < lo:
            raise BadInput(f"--rows {spec!r}: expected A <= B in A-B (both included)")
        return "range", (lo, hi + 1)
    n = _int(s, spec)
    if n < 0:
        raise BadInput(f"--rows {spec!r}: rows are 0-based, from 0")
    return "range", (n, n + 1)


def row_positions(spec: str, enc) -> np.ndarray:
    """(R,) the input positions --rows ``spec`` names in ``enc``, sorted; BadInput naming the
    text's length when they lie outside it or name nothing."""
    T = len(enc.tokens)
    kind, arg = _parse_rows(spec)
    if kind == "last":
        return np.arange(max(T - arg, 0), T)
    if kind == "word":
        want = arg.casefold()
        hits = [t for t, w in enumerate(enc.word_ids) if w is not None and w < len(enc.words)
                and enc.words[w].strip().casefold() == want]
        if not hits:
            raise BadInput(f"--rows {spec!r}: no word {arg!r} in the text ({T} tokens); a word is matched whole, "
                           "case-insensitively")
        return np.asarray(hits, dtype=int)
    lo, hi = arg
    if lo >= T:
        raise BadInput(f"--rows starts at {lo}, but the text has {T} tokens (0..{T - 1}, special tokens included)")
    if hi is not None and hi > T and "-" in spec:
        raise BadInput(f"--rows {spec!r} ends past the text: it has {T} tokens (0..{T - 1}, special tokens included)")
    return np.arange(lo, T if hi is None else min(hi, T))


# --- top-k ----------------------------------------------------------------------------------------


@dataclass
class TopK:
    """Each row's ``K`` strongest keys of one (R, C) matrix."""

    keys: np.ndarray  # (R, K) column indices into the view's columns, strongest first
    weights: np.ndarray  # (R, K)
    other: np.ndarray  # (R,) the sum of the row's other C - K keys (0 when K = C)


def top_k(m: np.ndarray, k: int) -> TopK:
    """The ``k`` largest entries of each row of ``m`` (R, C), largest first, ties broken by the
    smaller column; the rest of the row summed into ``other``. K = min(k, C)."""
    m = np.asarray(m, dtype=np.float64)  # (R, C)
    R, C = m.shape
    K = min(k, C)
    order = np.argsort(-m, axis=1, kind="stable")[:, :K]  # (R, K): stable, so equal weights keep column order
    vals = np.take_along_axis(m, order, axis=1)  # (R, K)
    rest = np.ones((R, C), dtype=bool)
    np.put_along_axis(rest, order, False, axis=1)
    other = np.where(rest, m, 0.0).sum(axis=1)  # (R,): summed from the entries, not full - top
    return TopK(order, vals, other)


# --- pooling --------------------------------------------------------------------------------------


def _word_starts(enc) -> list[Optional[tuple[int, int]]]:
    """Per word: (sequence 0/1, offset of its text in that sequence's text), found left to right;
    None where a word's text is not found (a tokenizer's pieces instead of the text as written)."""
    texts = [enc.text, enc.pair or ""]
    cursor, out = [0, 0], []
    seq_of: dict[int, int] = {}
    for w, seg in zip(enc.word_ids, enc.segments):
        if w is not None and w not in seq_of:
            seq_of[w] = 1 if seg == "b" else 0
    for w, word in enumerate(enc.words):
        seq = seq_of.get(w, 0)
        at = texts[seq].find(word, cursor[seq]) if word else -1
        if at < 0:
            out.append(None)
            continue
        cursor[seq] = at + len(word)
        out.append((seq, at))
    return out


def span_ids(by: str | int, enc) -> np.ndarray:
    """(T,) the span of each input position: chunks of ``by`` tokens, or sentences / lines of the
    text (a special token joins the span of the token before it, or of the first token; the second
    text of a pair starts a span of its own). A text without a sentence end or a line break is one span."""
    T = len(enc.tokens)
    if isinstance(by, int):
        return np.arange(T) // min(by, max(T, 1))  # a chunk past the text's end is the whole text (no int64 overflow)
    starts = _word_starts(enc)
    texts = [enc.text, enc.pair or ""]
    ids = np.zeros(T, dtype=int)
    current, prev_word, prev_seg, prev_end = 0, None, None, None  # prev_end: (seq, offset) after the last word
    first_real = True
    for t in range(T):
        w, seg = enc.word_ids[t], enc.segments[t]
        if w is None or w == prev_word:
            ids[t] = current
            continue
        new = False
        if not first_real and seg != prev_seg:
            new = True
        elif not first_real and by == "sentence" and prev_word is not None and _SENTENCE_END.search(enc.words[prev_word]):
            new = True
        elif not first_real and by == "line" and starts[w] is not None and prev_end is not None and starts[w][0] == prev_end[0]:
            seq, at = starts[w]
            new = "\n" in texts[seq][prev_end[1]:at]
        if new:
            current += 1
        ids[t] = current
        first_real = False
        prev_word, prev_seg = w, seg
        if starts[w] is not None:
            prev_end = (starts[w][0], starts[w][1] + len(enc.words[w]))
    return ids


def span_label(positions: Sequence[int], enc, width: int = 24) -> str:
    """A span's words, e.g. 'time flies like…' (cut to ``width`` characters)."""
    words, seen = [], set()
    for t in positions:
        w = enc.word_ids[t]
        if w is not None and w not in seen and w < len(enc.words):
            seen.add(w)
            words.append(enc.words[w])
    text = " ".join(words) or " ".join(enc.tokens[t] for t in positions)
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class Pooled:
    """Attention between spans of the view's rows and columns."""

    by: str | int
    weights: np.ndarray  # (P, Q): the view's matrix pooled
    head_weights: Optional[np.ndarray]  # (h, P, Q) or None
    row_spans: list[list[int]]  # (P,) the input positions of each query span's shown rows
    col_spans: list[list[int]]  # (Q,) as row_spans, for the keys
    span_index: list[int] = field(default_factory=list)  # (P,) each query span's number in the text
    key_span_index: list[int] = field(default_factory=list)  # (Q,)


def _group_sums(x: np.ndarray, inv: np.ndarray, n: int, axis: int) -> np.ndarray:
    """``x`` summed along ``axis`` by group: entry i of that axis goes to group ``inv[i]`` (of ``n``).
    One pass over ``x`` (a sort and ``np.add.reduceat``): work in proportion to its size, whatever
    the number of groups."""
    if inv.size and np.all(inv[1:] >= inv[:-1]):  # spans in order (sentences, lines, chunks): no reordered copy
        return np.add.reduceat(x, np.searchsorted(inv, np.arange(n)), axis=axis)
    order = np.argsort(inv, kind="stable")  # (N,)
    starts = np.searchsorted(inv[order], np.arange(n))  # (n,) every group holds at least one entry
    return np.add.reduceat(np.take(x, order, axis=axis), starts, axis=axis)


def pool_matrices(mats: np.ndarray, row_span: np.ndarray, col_span: np.ndarray) -> tuple[np.ndarray, list, list]:
    """(k, P, Q) the pooled ``mats`` (k, R, C): summed over each key span's columns, averaged over
    each query span's rows; ``row_span`` (R,) and ``col_span`` (C,) give each row's / column's span.
    Returns it with the span numbers of its rows and columns (those that hold a shown row / column).
    Work and memory grow with k x R x C (the matrices' size), not with the number of spans."""
    mats = np.asarray(mats, dtype=np.float64)
    q_ids, q_inv = np.unique(row_span, return_inverse=True)  # (P,), (R,)
    k_ids, k_inv = np.unique(col_span, return_inverse=True)  # (Q,), (C,)
    by_key = _group_sums(mats, k_inv.ravel(), len(k_ids), axis=2)  # (k, R, Q)
    summed = _group_sums(by_key, q_inv.ravel(), len(q_ids), axis=1)  # (k, P, Q)
    counts = np.bincount(q_inv.ravel(), minlength=len(q_ids))  # (P,) shown rows per query span
    pooled = summed / counts[None, :, None]  # (k, P, Q)
    return pooled, q_ids.tolist(), k_ids.tolist()


def pool_view(view, by: str | int, enc) -> Pooled:
    """The pooled view of a PretrainedView (attncli.attention.checkpoint_views): its rows and columns are
    input positions, its heads pooled one by one and its matrix (their mean, or one head) too."""
    ids = span_ids(by, enc)
    rows, cols = np.asarray(view.rows, dtype=int), np.asarray(view.cols, dtype=int)
    pooled, q_ids, k_ids = pool_matrices(view.weights[None], ids[rows], ids[cols])  # (1, P, Q)
    heads = None if view.head_weights is None else pool_matrices(view.head_weights, ids[rows], ids[cols])[0]  # (h, P, Q)
    row_spans = [[int(t) for t in rows if ids[t] == s] for s in q_ids]
    col_spans = [[int(t) for t in cols if ids[t] == s] for s in k_ids]
    return Pooled(by, pooled[0], heads, row_spans, col_spans, q_ids, k_ids)


# --- the long view of a PretrainedView --------------------------------------------------------------


@dataclass
class LongView:
    """What --top-k or --pool made of a view (rows already picked by --rows), and how it came."""

    top: Optional[TopK] = None  # of the view's matrix (the heads' mean, or the one head)
    head_tops: Optional[list[TopK]] = None  # (h,) each head's
    pooled: Optional[Pooled] = None
    auto: Optional[str] = None  # the note when attn chose this view because the matrix is too wide
    notes: list[str] = field(default_factory=list)


def apply_long_view(view, spec: LongSpec, enc, *, words: bool = False) -> Optional[LongView]:
    """--top-k or --pool of ``view`` (a PretrainedView whose rows --rows already picked: see
    ``pretrained.select(query_rows=...)``); None when neither is asked for."""
    if spec.top_k is None and spec.pool is None:
        return None
    if spec.pool is not None:
        if words:
            raise BadInput("--pool merges tokens into spans itself: drop --words")
        by = parse_pool(spec.pool)
        pooled = pool_view(view, by, enc)
        what = f"{by}-token chunks" if isinstance(by, int) else f"{by}s"
        return LongView(pooled=pooled, notes=[f"pooled into {what}: a cell is the attention of a query span's tokens "
                                               "to a key span's, summed over its keys and averaged over its queries"])
    m = view.words.weights if words and view.words is not None else view.weights
    heads = view.words.head_weights if words and view.words is not None else view.head_weights
    top = top_k(m, spec.top_k)
    head_tops = [top_k(hm, spec.top_k) for hm in heads] if heads is not None else None
    K = top.keys.shape[1]
    return LongView(top=top, head_tops=head_tops,
                    notes=[f"each row's {K} strongest keys, largest first (ties: the earlier key); other = the sum of "
                           f"the row's {m.shape[1] - K} other keys"])


def auto_view(n_cols: int, fits: int, *, rows_given: bool, enc, page: int, k: int) -> Optional[LongSpec]:
    """The view to draw instead of a matrix of ``n_cols`` columns when only ``fits`` fit (``page``
    on one page): each row's ``k`` strongest keys when --rows picked the rows, else pooled
    (sentences when they fit on a page, else chunks of N tokens); None when the matrix fits."""
    if n_cols <= fits:
        return None
    if rows_given:
        return LongSpec(top_k=k)
    n_sentences = int(span_ids("sentence", enc).max()) + 1 if len(enc.tokens) else 0
    if 2 <= n_sentences <= page:
        return LongSpec(pool="sentence")
    return LongSpec(pool=str(-(-n_cols // max(page, 1))))


def top_k_document(top: TopK, cols: Sequence[int], key_tokens: Sequence[str]) -> dict[str, Any]:
    """One matrix's --top-k as JSON: per row, the keys (input positions and tokens), their weights
    and the other keys' sum."""
    cols = np.asarray(cols)
    return {"keys": [[int(cols[c]) for c in row] for row in top.keys],
            "key_tokens": [[key_tokens[c] for c in row] for row in top.keys],
            "weights": [[float(x) for x in row] for row in top.weights],
            "other": [float(x) for x in top.other]}


def long_document(doc: dict[str, Any], lv: LongView, view, enc, spec: LongSpec, *, words: bool = False) -> dict[str, Any]:
    """``doc`` (pretrained.document's) with the long view: "long_view" says which, and with --top-k
    or --pool "top_k" or "pool" carries the matrices, which then replace "weights" and
    "head_weights" (null) and the words' matrices."""
    doc["long_view"] = {"rows": spec.rows, "top_k": spec.top_k, "pool": spec.pool, "auto": lv.auto if lv else None}
    if lv is None:
        return doc
    doc["weights"], doc["head_weights"] = None, None
    if "words" in doc:
        doc["words"]["weights"], doc["words"]["head_weights"] = None, None
    if lv.top is not None:
        w = view.words if words and view.words is not None else None
        cols = w.cols if w is not None else view.cols
        key_tokens = w.key_tokens if w is not None else view.key_tokens
        doc["top_k"] = {"k": int(lv.top.keys.shape[1]), **top_k_document(lv.top, range(len(cols)) if w else cols,
                                                                         key_tokens),
                        "heads": [top_k_document(t, range(len(cols)) if w else cols, key_tokens)
                                  for t in lv.head_tops] if lv.head_tops is not None else None}
        if w is not None:
            doc["top_k"]["keys_are"] = "word columns (words.cols)"
    if lv.pooled is not None:
        p = lv.pooled
        doc["pool"] = {"by": p.by, "spans": p.span_index, "key_spans": p.key_span_index,
                       "span_rows": p.row_spans, "span_cols": p.col_spans,
                       "labels": [span_label(s, enc) for s in p.row_spans],
                       "key_labels": [span_label(s, enc) for s in p.col_spans],
                       "weights": Rows(p.weights),
                       "head_weights": [Rows(m) for m in p.head_weights] if p.head_weights is not None else None}
    return doc
