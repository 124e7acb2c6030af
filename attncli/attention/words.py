"""A pretrained model's attention seen by word, without special tokens, or one sentence-pair block.

Pure NumPy, one function per view. Shapes: ``T`` query tokens, ``S`` key tokens, ``W`` words,
``...`` any leading axes (heads ``h``, layers ``L``). The weights are softmax rows: every row of
``(..., T, S)`` sums to 1. Group lists (``list[list[int]]``) name the token positions of each
word in order; :func:`word_groups` makes them from a tokenizer's word ids.

    >>> import numpy as np
    >>> A = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    >>> groups = [[0], [1, 2]]        # word 0 = piece 0; word 1 = pieces 1 and 2 ("fl", "##ies")
    >>> merge_words(A, groups, groups).round(3).tolist()
    [[0.5, 0.5], [0.15, 0.85]]
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from attncli.errors import BadInput

FILTERS = ("all", "a-a", "a-b", "b-a", "b-b")


def word_groups(word_ids: Sequence[Optional[int]], segments: Sequence[Optional[str]] | None = None) -> list[list[int]]:
    """Token positions of each word, in order: a word is a run of consecutive tokens with the same
    word id (and the same segment, since a pair's second sentence numbers its words from 0 again);
    a token without a word id (a special token) is a word of its own."""
    segments = segments if segments is not None else [None] * len(word_ids)
    groups: list[list[int]] = []
    previous = None
    for t, (wid, seg) in enumerate(zip(word_ids, segments)):
        key = None if wid is None else (seg, wid)
        if key is not None and key == previous:
            groups[-1].append(t)
        else:
            groups.append([t])
        previous = key
    return groups


def word_label(pieces: Sequence[str]) -> str:
    """The text of a word from its pieces: WordPiece's '##' continuation marks and byte-level BPE's
    'Ġ' (a space before the piece) or SentencePiece's '▁' dropped, the pieces joined."""
    out = []
    for n, piece in enumerate(pieces):
        if n > 0 and piece.startswith("##"):
            piece = piece[2:]
        out.append(piece.lstrip("Ġ▁") or piece)
    return "".join(out)


def merge_words(weights: np.ndarray, row_groups: list[list[int]], col_groups: list[list[int]]) -> np.ndarray:
    """Word-level attention from token-level attention (Clark et al. 2019, "What Does BERT Look At?",
    section 3): for query word a and key word b,

        M[a, b] = mean over query pieces i of a ( sum over key pieces j of b of A[i, j] )

    Summing over a word's key pieces keeps all the attention that reached the word; averaging over
    its query pieces keeps each row a distribution, so rows of M sum to what rows of A sum to (1).
    A word of one piece keeps its row and column unchanged.
    """
    A = np.asarray(weights, dtype=np.float64)  # (..., T, S)
    cols = np.stack([A[..., idx].sum(axis=-1) for idx in col_groups], axis=-1)  # (..., T, W_k)
    return np.stack([cols[..., idx, :].mean(axis=-2) for idx in row_groups], axis=-2)  # (..., W_q, W_k)


def hide_special(weights: np.ndarray, keep_rows: np.ndarray, keep_cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop special-token rows and columns, and renormalise each remaining row over the kept keys:

        A'[i, j] = A[i, j] / sum over kept keys j' of A[i, j']

    i.e. the attention a query paid to [CLS]/[SEP]/<s> is shared out over the other keys in
    proportion to what they already had (the same as a softmax over the kept keys' scores only).
    Returns (A' of shape (..., T', S'), the share of each kept row's attention that went to the
    dropped keys, shape (..., T')). A row whose kept keys had no attention at all stays all 0.
    """
    A = np.asarray(weights, dtype=np.float64)[..., np.asarray(keep_rows, bool), :]  # (..., T', S)
    total = A.sum(axis=-1)  # (..., T')
    kept = A[..., np.asarray(keep_cols, bool)]  # (..., T', S')
    mass = kept.sum(axis=-1, keepdims=True)  # (..., T', 1)
    out = np.divide(kept, mass, out=np.zeros_like(kept), where=mass > 0)
    return out, total - mass[..., 0]


SPECIALS_IN_BLOCKS = ("none", "bertviz")


def bertviz_segments(segments: Sequence[Optional[str]]) -> list[Optional[str]]:
    """The segments with each special token (None) given to a sentence as bertviz's sentence
    filter does (``sentence_b_start``: A is every token before B's first, B the rest): a special
    token before sentence B's first token belongs to A ([CLS] and the first [SEP]; RoBERTa's
    ``<s>`` and ``</s></s>``), one after it to B (the last [SEP])."""
    first_b = next((i for i, s in enumerate(segments) if s == "b"), len(segments))
    return [s if s is not None else ("a" if i < first_b else "b") for i, s in enumerate(segments)]


def pair_block(segments: Sequence[Optional[str]], which: str, specials: str = "none") -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns of one block of a sentence pair's attention (bertviz's sentence filter):
    ``which`` is 'all' or QUERY-KEY with each side 'a' or 'b' ('a-b' = sentence A's tokens
    attending to sentence B's). 'all' keeps every token; with ``specials`` 'none' a block keeps
    neither sentence's special tokens, with 'bertviz' they go to the sentences as bertviz puts them
    (:func:`bertviz_segments`). The weights of a block are shown as they are (not renormalised): a
    row of 'a-b' sums to the share of that query's attention that crossed to sentence B. Returns
    (rows (T,), cols (S,)) as boolean masks."""
    if which not in FILTERS:
        raise BadInput(f"--filter {which!r}: expected one of {', '.join(FILTERS)}")
    if specials not in SPECIALS_IN_BLOCKS:
        raise BadInput(f"--filter-specials {specials!r}: expected one of {', '.join(SPECIALS_IN_BLOCKS)}")
    if specials == "bertviz":
        segments = bertviz_segments(segments)
    seg = np.array([s or "" for s in segments])  # (T,)
    if which == "all":
        everything = np.ones(len(seg), dtype=bool)
        return everything, everything
    q, k = which.split("-")
    return seg == q, seg == k
